package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/domain"
)

// The recipients who say no mid-run (issue 25, point 7).
const (
	// webhookRecipients: the webhooks go to this many recipients, URLs of the one sink that
	// differ in their query; optOutRecipients of them (10 %) opt out mid-run, the even ones by
	// POST /v1/suppressions and the odd ones by PUT /v1/preferences for soakCategory, which every
	// accept carries.
	webhookRecipients = 40
	optOutRecipients  = 4
	// soakCategory is the category of every accept: declared in the file, not required.
	soakCategory = "marketing"
	// optOutPatience bounds how long one opt-out is repeated while the API is down.
	optOutPatience = time.Minute
)

// The two ways a recipient opts out.
const (
	optOutBySuppression = "suppression"
	optOutByPreference  = "preference"
)

// webhookRecipient is the n-th webhook recipient: the sink's URL with its number in the query.
func webhookRecipient(sink string, n int) string { return fmt.Sprintf("%s?r=%02d", sink, n) }

// webhookRecipientOf is the number of the i-th delivery's webhook recipient: a hash of i, so
// that who gets what does not follow the schedule's or the SMS share's period.
func webhookRecipientOf(i int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(strconv.Itoa(i)))
	return int(h.Sum32() % webhookRecipients)
}

// optOutKind is how the n-th opted-out recipient opts out.
func optOutKind(n int) string {
	if n%2 == 0 {
		return optOutBySuppression
	}
	return optOutByPreference
}

// optOutShareAt is the share of the deliveries accepted when the n-th recipient opts out:
// spread from 35 % to 65 %, so that each has deliveries accepted before and after.
func optOutShareAt(n int) float64 { return 0.35 + 0.3*float64(n)/float64(max(optOutRecipients-1, 1)) }

// optOut is one recipient's opt-out, as the soak saw it.
type optOut struct {
	Kind string
	// Sent is when the opt-out was first sent; Answered when its 2xx came back (zero: never).
	// The opt-out committed at the latest when it was answered, perhaps at an earlier try
	// whose answer was lost.
	Sent, Answered time.Time
	// Answer is the final answer: a status, or "no answer".
	Answer string
}

// optOuter plays the recipients who opt out while processes die around them: each opt-out is
// sent until a 2xx (a repeat is harmless: the suppression's add answers the active entry, the
// preference's put sets the same value), or optOutPatience runs out.
type optOuter struct {
	api    string
	sink   string
	client *http.Client
	ctx    context.Context
	wg     sync.WaitGroup
	mu     sync.Mutex
	// optOuts is each opted-out recipient's opt-out, by recipient.
	optOuts map[string]optOut
	// retries counts the opt-outs sent again after no answer or a 5xx.
	retries int
}

func newOptOuter(ctx context.Context, api, sink string) *optOuter {
	return &optOuter{api: api, sink: sink, ctx: ctx, optOuts: map[string]optOut{},
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
}

// start opts out the n-th recipient, in the background.
func (o *optOuter) start(n int) {
	recipient, kind := webhookRecipient(o.sink, n), optOutKind(n)
	o.wg.Go(func() {
		out := optOut{Kind: kind, Sent: time.Now()}
		out.Answer, out.Answered = o.send(recipient, kind)
		o.mu.Lock()
		o.optOuts[recipient] = out
		o.mu.Unlock()
	})
}

// send sends the opt-out until it gets a final answer; it returns the answer and, for a 2xx,
// when it arrived.
func (o *optOuter) send(recipient, kind string) (string, time.Time) {
	method, path := http.MethodPost, "/v1/suppressions"
	body := map[string]any{"channel": webhook.Name, "recipient": recipient, "reason": "soak: the recipient said no"}
	if kind == optOutByPreference {
		method, path = http.MethodPut, "/v1/preferences"
		body = map[string]any{"channel": webhook.Name, "recipient": recipient, "category": soakCategory, "opted_out": true}
	}
	payload, _ := json.Marshal(body) // maps of strings and booleans always encode
	deadline := time.Now().Add(optOutPatience)
	pause := 50 * time.Millisecond
	for {
		status, err := o.do(method, path, payload)
		switch {
		case err == nil && status >= 200 && status < 300:
			return strconv.Itoa(status), time.Now()
		case err == nil && status < 500:
			return strconv.Itoa(status), time.Time{}
		case o.ctx.Err() != nil || time.Now().After(deadline):
			return "no answer", time.Time{}
		}
		o.mu.Lock()
		o.retries++
		o.mu.Unlock()
		select {
		case <-o.ctx.Done():
		case <-time.After(pause):
		}
		pause = min(pause*2, time.Second)
	}
}

func (o *optOuter) do(method, path string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(o.ctx, method, o.api+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+soakAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// wait waits for every opt-out started so far and returns them, and the retries.
func (o *optOuter) wait() (map[string]optOut, int) {
	o.wg.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.optOuts), o.retries
}

// optOutVerdict is what the checker found about the opt-outs.
type optOutVerdict struct {
	// OptOuts counts the recipients who opted out, BySuppression and ByPreference how.
	OptOuts, BySuppression, ByPreference int
	// After counts the deliveries to an opted-out recipient accepted after the opt-out was
	// answered (every request of theirs sent after the answer came back), SuppressedAfter
	// those that ended suppressed, CallsAfter the sink's calls for any of them.
	After, SuppressedAfter, CallsAfter int
	// Before counts the deliveries to an opted-out recipient accepted before, and how they
	// ended (cancelled: by the canceller, whose answers checkSchedule checks).
	Before, BeforeDelivered, BeforeSuppressed, BeforeUnknown, BeforeCancelled int
	// ByProvider counts the SMS suppressed because an earlier SMS to the same permanent number
	// died with a code that says the number is out of service (the Twilio fake's 30005): the
	// ledger's suppression list took the provider's word.
	ByProvider int
}

// checkOptOuts checks the opt-outs: each was answered; a delivery accepted after its
// recipient's opt-out was answered never reached the sink and ended suppressed; one accepted
// before ended delivered or suppressed (or unknown, with the evidence checkHistory asks for, or
// cancelled, by a cancel checkSchedule holds to its answer);
// and only an opted-out recipient's deliveries were suppressed, by what the recipient did.
func checkOptOuts(v *verdict, ev evidence, accepted map[string]string, histories map[string]*history) {
	o := &v.OptOuts
	unanswered := 0
	for _, r := range sortedKeys(ev.optOuts) {
		out := ev.optOuts[r]
		o.OptOuts++
		if out.Kind == optOutBySuppression {
			o.BySuppression++
		} else {
			o.ByPreference++
		}
		if out.Answered.IsZero() {
			unanswered++
		}
	}
	calls := map[string]int{}
	for _, c := range ev.calls {
		calls[c.ID]++
	}
	calledAfter, unsuppressedAfter, endedBefore, suppressedUnasked, suppressedOtherwise := 0, 0, 0, 0, 0
	for _, id := range sortedKeys(histories) {
		h := histories[id]
		state := h.d.State()
		out, opted := ev.optOuts[h.d.Recipient()]
		if h.d.Channel() != webhook.Name {
			opted = false
		}
		if state == domain.StateSuppressed {
			switch by := h.d.Suppression(); {
			case !opted && suppressedByProvider(h, histories):
				o.ByProvider++
			case !opted:
				suppressedUnasked++
				v.example(id, "suppressed, its recipient never opted out")
			case by == nil || (out.Kind == optOutBySuppression) != (by.By == domain.SuppressedByList) ||
				(by.By == domain.SuppressedByPreference && by.Category != soakCategory):
				suppressedOtherwise++
				v.example(id, fmt.Sprintf("suppressed by %+v, its recipient opted out by %s", by, out.Kind))
			}
		}
		if !opted {
			continue
		}
		sent, ok := ev.sentAt[accepted[id]]
		if !out.Answered.IsZero() && ok && sent.After(out.Answered) {
			o.After++
			if n := calls[id]; n > 0 {
				o.CallsAfter += n
				calledAfter++
				v.example(id, fmt.Sprintf("accepted %s after its recipient's opt-out was answered, the sink was called %d times",
					sent.Sub(out.Answered).Round(time.Millisecond), n))
			}
			if state == domain.StateSuppressed {
				o.SuppressedAfter++
			} else {
				unsuppressedAfter++
				v.example(id, "accepted after its recipient's opt-out was answered, ended "+string(state))
			}
			continue
		}
		o.Before++
		switch state {
		case domain.StateDelivered:
			o.BeforeDelivered++
		case domain.StateSuppressed:
			o.BeforeSuppressed++
		case domain.StateUnknown:
			o.BeforeUnknown++
		case domain.StateCancelled:
			o.BeforeCancelled++
		default:
			endedBefore++
			v.example(id, "accepted before its recipient's opt-out, ended "+string(state))
		}
	}
	for _, f := range []struct {
		n    int
		what string
	}{
		{unanswered, "opt-outs were never answered 2xx"},
		{calledAfter, "deliveries accepted after their recipient's opt-out was answered reached the sink"},
		{unsuppressedAfter, "deliveries accepted after their recipient's opt-out was answered did not end suppressed"},
		{endedBefore, "deliveries accepted before their recipient's opt-out ended neither delivered, suppressed, unknown nor cancelled"},
		{suppressedUnasked, "deliveries were suppressed whose recipient never opted out"},
		{suppressedOtherwise, "deliveries were suppressed by something other than their recipient's opt-out"},
	} {
		if f.n > 0 {
			v.fail("%d %s", f.n, f.what)
		}
	}
}

// suppressedByProvider says whether h was suppressed by a list entry a provider's answer made:
// its evidence is an SMS of the run, to the same permanent number, that died.
func suppressedByProvider(h *history, histories map[string]*history) bool {
	by := h.d.Suppression()
	if by == nil || by.By != domain.SuppressedByList || by.Source != domain.SuppressionByProvider || by.Evidence == nil {
		return false
	}
	cause := histories[by.Evidence.DeliveryID]
	return cause != nil && cause.d.Channel() == h.d.Channel() && cause.d.Recipient() == h.d.Recipient() &&
		smsFateOf(h.d.Recipient()) == smsPermanent && cause.d.State() == domain.StateDead
}

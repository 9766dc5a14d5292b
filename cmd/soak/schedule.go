package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// The scheduled sends and the cancels that race them.
const (
	// scheduleEvery: one webhook delivery in scheduleEvery carries a send_at, and every other
	// one of those is cancelled.
	scheduleEvery = 5
	// sendAheadMin and sendAheadSpread place a send_at between 0.5 s and 5 s after the request
	// is built: near enough that the due pass releases it within the run, spread so that the
	// releases fall between kills of the relay and the workers.
	sendAheadMin    = 500 * time.Millisecond
	sendAheadSpread = 4500 * time.Millisecond
	// cancelPatience bounds how long the canceller repeats one cancel while the API is down.
	cancelPatience = time.Minute
	// sendAtTolerance is the clock granularity allowed between the ledger's send_at and the
	// sink's clock (both read the same machine's clock, at different moments of a request).
	sendAtTolerance = 5 * time.Millisecond
)

// schedulePlan says which deliveries are scheduled and which of those are cancelled, and when:
// a function of the delivery's ordinal, so that a run's mix does not depend on timing.
type schedulePlan struct{ sms smsPlan }

// sendAhead returns how far ahead of its request the i-th delivery's send_at lies, and whether
// it has one.
func (p schedulePlan) sendAhead(i int) (time.Duration, bool) {
	if _, isSMS := p.sms.ordinal(i); isSMS || i%scheduleEvery != 1 {
		return 0, false
	}
	k := i / scheduleEvery
	return sendAheadMin + time.Duration(k*1543%4500)*sendAheadSpread/4500, true
}

// cancelAt returns when, relative to its send_at, the i-th delivery is cancelled, and whether it
// is: a third well before the due time, a third at it (within 10 ms either side), and a third
// after it, when the due pass may or may not have released it and a worker may or may not have
// started its attempt.
func (p schedulePlan) cancelAt(i int) (time.Duration, bool) {
	if _, ok := p.sendAhead(i); !ok || (i/scheduleEvery)%2 != 0 {
		return 0, false
	}
	k := i / (2 * scheduleEvery)
	spread := time.Duration(k*37%100) * time.Millisecond
	switch k % 3 {
	case 0:
		return -100*time.Millisecond - 4*spread, true // 100-500 ms before
	case 1:
		return spread/5 - 10*time.Millisecond, true // -10 to +10 ms
	}
	return 20*time.Millisecond + 8*spread, true // 20-820 ms after
}

// The canceller's final answers for a delivery.
const (
	cancelOK      = "200"
	cancelRefused = "409"
)

// canceller plays the caller who cancels scheduled sends while processes die around it: each
// cancel goes to POST /v1/deliveries/{id}/cancel at its planned time and is repeated while the
// API gives no answer or a 5xx (killed mid-request, the database cut), until it is answered 200
// (cancelled, or a repeat of a cancel that committed unanswered) or 409 (an attempt started).
type canceller struct {
	api    string
	client *http.Client
	ctx    context.Context
	wg     sync.WaitGroup
	// retries counts the cancels sent again after no answer or a 5xx.
	retries atomic.Int64
	mu      sync.Mutex
	// answers is each cancelled delivery's final answer: cancelOK, cancelRefused, or another
	// status (or "no answer" when cancelPatience ran out).
	answers map[string]string
}

func newCanceller(ctx context.Context, api string) *canceller {
	return &canceller{api: api, ctx: ctx, answers: map[string]string{},
		// No keep-alive, as the producer: a killed API leaves no stale connection behind.
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
}

// add cancels delivery id at the time at (at once if it has passed).
func (c *canceller) add(id string, at time.Time) {
	c.wg.Go(func() {
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(time.Until(at)):
		}
		answer := c.cancel(id)
		c.mu.Lock()
		c.answers[id] = answer
		c.mu.Unlock()
	})
}

// cancel sends the cancel until it gets a final answer, and returns it.
func (c *canceller) cancel(id string) string {
	deadline := time.Now().Add(cancelPatience)
	pause := 50 * time.Millisecond
	for {
		status, err := c.post(id)
		switch {
		case err == nil && status == http.StatusOK:
			return cancelOK
		case err == nil && status == http.StatusConflict:
			return cancelRefused
		case err == nil && status < 500:
			return fmt.Sprint(status)
		case c.ctx.Err() != nil || time.Now().After(deadline):
			return "no answer"
		}
		c.retries.Add(1)
		select {
		case <-c.ctx.Done():
		case <-time.After(pause):
		}
		pause = min(pause*2, time.Second)
	}
}

// post sends one cancel and returns the status it was answered.
func (c *canceller) post(id string) (int, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.api+"/v1/deliveries/"+id+"/cancel",
		strings.NewReader(`{"reason":"soak: the caller changed its mind"}`))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+soakAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// wait waits for every cancel added so far and returns the final answers.
func (c *canceller) wait() map[string]string {
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.answers)
}

// scheduleVerdict is what the checker found about scheduled sends and cancels.
type scheduleVerdict struct {
	// Scheduled counts the deliveries whose history holds a send_at; Delivered, Unknown, Dead,
	// Cancelled and Suppressed how they ended.
	Scheduled, Delivered, Unknown, Dead, Cancelled, Suppressed int
	// Cancels200, Cancels409 and CancelsOther count the canceller's final answers.
	Cancels200, Cancels409, CancelsOther int
	// Lateness is each scheduled delivery's first attempt start minus its send_at.
	Lateness []time.Duration
}

// checkSchedule checks the scheduled sends and the cancels: a cancel answered 200 has no sink
// call and ends cancelled, a 409 answered a delivery an attempt had started for (or one its
// recipient's opt-out had ended suppressed), a scheduled
// delivery not cancelled is delivered (or unknown, which checkHistory explains), nothing is
// cancelled that the canceller was not answered about, and no scheduled delivery reached the
// sink before its send_at.
func checkSchedule(v *verdict, ev evidence, histories map[string]*history) {
	s := &v.Schedule
	calls := map[string][]sinkCall{}
	for _, c := range ev.calls {
		calls[c.ID] = append(calls[c.ID], c)
	}
	calledAfter200, notCancelled, refusedUnstarted, cancelledUnasked, early, undelivered := 0, 0, 0, 0, 0, 0
	for _, id := range sortedKeys(ev.cancels) {
		answer := ev.cancels[id]
		h := histories[id]
		switch answer {
		case cancelOK:
			s.Cancels200++
		case cancelRefused:
			s.Cancels409++
		default:
			s.CancelsOther++
		}
		if h == nil {
			continue
		}
		switch {
		case answer == cancelOK && len(calls[id]) > 0:
			calledAfter200++
			v.example(id, fmt.Sprintf("cancel answered 200, the sink was called %d times", len(calls[id])))
		case answer == cancelOK && h.d.State() != domain.StateCancelled:
			notCancelled++
			v.example(id, "cancel answered 200, ended "+string(h.d.State()))
		case answer == cancelRefused && len(h.started) == 0 && h.d.State() != domain.StateSuppressed:
			refusedUnstarted++
			v.example(id, "cancel answered 409, no attempt started")
		}
	}
	for _, id := range sortedKeys(histories) {
		h := histories[id]
		if h.d.State() == domain.StateCancelled && ev.cancels[id] != cancelOK {
			if _, asked := ev.cancels[id]; !asked || ev.cancels[id] == cancelRefused {
				cancelledUnasked++
				v.example(id, fmt.Sprintf("cancelled, the canceller's answer was %q", ev.cancels[id]))
			}
		}
		sendAt := h.d.SendAt()
		if sendAt == nil {
			continue
		}
		s.Scheduled++
		switch h.d.State() {
		case domain.StateDelivered:
			s.Delivered++
		case domain.StateUnknown:
			s.Unknown++
		case domain.StateDead:
			s.Dead++ // the sink's 404: checkReplays fails the run if the DLQ replay left it dead
		case domain.StateCancelled:
			s.Cancelled++
		case domain.StateSuppressed:
			s.Suppressed++ // its recipient opted out before its attempt: checkOptOuts
		default:
			undelivered++
			v.example(id, "scheduled, not cancelled, ended "+string(h.d.State()))
		}
		if at, ok := h.startedAt[1]; ok {
			s.Lateness = append(s.Lateness, at.Sub(*sendAt))
		}
		for _, c := range calls[id] {
			if c.At.Before(sendAt.Add(-sendAtTolerance)) {
				early++
				v.example(id, fmt.Sprintf("the sink was called at %s, before its send_at %s", c.At.UTC().Format("15:04:05.000"), sendAt.UTC().Format("15:04:05.000")))
				break
			}
		}
	}
	for _, f := range []struct {
		n    int
		what string
	}{
		{calledAfter200, "deliveries whose cancel was answered 200 reached the sink"},
		{notCancelled, "deliveries whose cancel was answered 200 did not end cancelled"},
		{refusedUnstarted, "cancels were answered 409 for a delivery no attempt had started for"},
		{cancelledUnasked, "deliveries ended cancelled without a cancel answered 200 or left unanswered"},
		{undelivered, "scheduled deliveries that were not cancelled ended neither delivered nor unknown"},
		{early, "scheduled deliveries reached the sink before their send_at"},
	} {
		if f.n > 0 {
			v.fail("%d %s", f.n, f.what)
		}
	}
}

// describeLateness renders lateness as "p50 .. p99 .. max .." over n.
func describeLateness(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n=0"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q int) time.Duration { return s[min(len(s)-1, len(s)*q/100)].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %s p99 %s max %s (n=%d)", at(50), at(99), s[len(s)-1].Round(time.Millisecond), len(s))
}

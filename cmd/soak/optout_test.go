package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/sms"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/domain"
)

// optedEnd is how a webhook's stream ends in an opt-out case.
type optedEnd int

const (
	optedDelivered          optedEnd = iota
	optedSuppressedAtAccept          // the accept's probe found the opt-out
	optedSuppressedAtStart           // queued, the attempt's start found it
	optedQueued                      // never settled
	optedCancelled                   // the canceller came first
)

// optedStream is the stream of a webhook to recipient accepted at now (category soakCategory),
// ending as end; suppressedBy is what suppressed it (SuppressedByList or SuppressedByPreference).
func optedStream(t *testing.T, id, recipient string, now time.Time, end optedEnd, suppressedBy string) []domain.Event {
	t.Helper()
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: soakTenant, Channel: webhook.Name, Recipient: recipient,
		Payload: []byte(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 5, RequestKey: "k-" + id, Category: soakCategory}, now)
	if err != nil {
		t.Fatal(err)
	}
	block := domain.Block{OptedOut: soakCategory}
	if suppressedBy == domain.SuppressedByList {
		block = domain.Block{Suppression: &domain.Suppression{ID: "s1", Tenant: soakTenant, Channel: webhook.Name, Recipient: recipient,
			Source: domain.SuppressionManual, CreatedAt: now}}
	}
	var steps []func() ([]domain.Event, error)
	switch end {
	case optedDelivered:
		steps = append(steps,
			func() ([]domain.Event, error) { return d.Queue(now) },
			func() ([]domain.Event, error) { return d.StartAttempt(webhook.Name, now) },
			func() ([]domain.Event, error) {
				return d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeDelivered}, domain.RetryPolicy{MaxAttempts: 5}, now, 0)
			})
	case optedSuppressedAtAccept:
		steps = append(steps, func() ([]domain.Event, error) { return d.Suppress(block, now) })
	case optedSuppressedAtStart:
		steps = append(steps,
			func() ([]domain.Event, error) { return d.Queue(now) },
			func() ([]domain.Event, error) { return d.Suppress(block, now) })
	case optedQueued:
		steps = append(steps, func() ([]domain.Event, error) { return d.Queue(now) })
	case optedCancelled:
		steps = append(steps, func() ([]domain.Event, error) { return d.Cancel("", "", now) })
	}
	return appendSteps(t, events, steps)
}

func TestCheckOptOuts(t *testing.T) {
	const sink = "http://127.0.0.1:1/hook"
	opted, other := webhookRecipient(sink, 0), webhookRecipient(sink, 7)
	answered := time.Now()
	before, after := answered.Add(-time.Millisecond), answered.Add(time.Millisecond)
	for _, tc := range []struct {
		name      string
		recipient string
		kind      string    // how opted opts out
		answered  time.Time // when its opt-out was answered; zero for never
		sent      time.Time // when the delivery's first request was sent
		end       optedEnd
		by        string // what suppressed it
		called    bool   // the sink was called for it
		want      string // a failure names this; "" for none
		after     bool   // counted as accepted after the opt-out
	}{
		{name: "after, suppressed at accept", recipient: opted, kind: optOutBySuppression, answered: answered, sent: after,
			end: optedSuppressedAtAccept, by: domain.SuppressedByList, after: true},
		{name: "after, by preference", recipient: opted, kind: optOutByPreference, answered: answered, sent: after,
			end: optedSuppressedAtAccept, by: domain.SuppressedByPreference, after: true},
		{name: "after, the sink called", recipient: opted, kind: optOutBySuppression, answered: answered, sent: after,
			end: optedSuppressedAtAccept, by: domain.SuppressedByList, called: true, after: true,
			want: "after their recipient's opt-out was answered reached the sink"},
		{name: "after, delivered", recipient: opted, kind: optOutByPreference, answered: answered, sent: after,
			end: optedDelivered, called: true, after: true, want: "reached the sink"},
		{name: "after, delivered, the sink not told", recipient: opted, kind: optOutByPreference, answered: answered, sent: after,
			end: optedDelivered, after: true, want: "did not end suppressed"},
		{name: "before, delivered", recipient: opted, kind: optOutBySuppression, answered: answered, sent: before,
			end: optedDelivered, called: true},
		{name: "before, suppressed at its start", recipient: opted, kind: optOutBySuppression, answered: answered, sent: before,
			end: optedSuppressedAtStart, by: domain.SuppressedByList},
		{name: "before, never settled", recipient: opted, kind: optOutBySuppression, answered: answered, sent: before,
			end: optedQueued, want: "ended neither delivered, suppressed, unknown nor cancelled"},
		{name: "before, cancelled", recipient: opted, kind: optOutByPreference, answered: answered, sent: before,
			end: optedCancelled},
		{name: "after, cancelled", recipient: opted, kind: optOutByPreference, answered: answered, sent: after,
			end: optedCancelled, after: true, want: "did not end suppressed"},
		{name: "the opt-out unanswered", recipient: opted, kind: optOutBySuppression, sent: after,
			end: optedSuppressedAtAccept, by: domain.SuppressedByList, want: "never answered"},
		{name: "suppressed, never opted out", recipient: other, kind: optOutBySuppression, answered: answered, sent: after,
			end: optedSuppressedAtAccept, by: domain.SuppressedByList, want: "whose recipient never opted out"},
		{name: "suppressed by the list after a preference", recipient: opted, kind: optOutByPreference, answered: answered, sent: after,
			end: optedSuppressedAtAccept, by: domain.SuppressedByList, after: true, want: "other than their recipient's opt-out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const id = "d1"
			h, err := readHistory(optedStream(t, id, tc.recipient, tc.sent, tc.end, tc.by))
			if err != nil {
				t.Fatal(err)
			}
			ev := evidence{optOuts: map[string]optOut{opted: {Kind: tc.kind, Sent: answered.Add(-50 * time.Millisecond), Answered: tc.answered}},
				sentAt: map[string]time.Time{"k-d1": tc.sent}}
			if tc.called {
				ev.calls = []sinkCall{{ID: id, Attempt: 1, At: tc.sent.Add(5 * time.Millisecond), Status: 200}}
			}
			v := &verdict{}
			checkOptOuts(v, ev, map[string]string{id: "k-d1"}, map[string]*history{id: h})
			switch {
			case tc.want == "" && len(v.Failures) > 0:
				t.Errorf("failures %q, want none", v.Failures)
			case tc.want != "" && !slices.ContainsFunc(v.Failures, func(f string) bool { return strings.Contains(f, tc.want) }):
				t.Errorf("failures %q, want one saying %q", v.Failures, tc.want)
			}
			if got := v.OptOuts.After == 1; got != tc.after {
				t.Errorf("counted after: %v, want %v (%+v)", got, tc.after, v.OptOuts)
			}
			if tc.called && tc.after && v.OptOuts.CallsAfter != 1 {
				t.Errorf("calls after the opt-out %d, want 1", v.OptOuts.CallsAfter)
			}
		})
	}
}

// TestSuppressedSettles: a suppressed delivery is terminal for the wait, the lost count and the
// one-terminal-event check.
func TestSuppressedSettles(t *testing.T) {
	tr := newTracker(nil)
	tr.states["s"] = domain.StateSuppressed
	if !tr.settled("s") {
		t.Error("a suppressed delivery is not settled")
	}
	h, err := readHistory(optedStream(t, "d1", "http://127.0.0.1:1/hook?r=00", time.Now(), optedSuppressedAtStart, domain.SuppressedByList))
	if err != nil {
		t.Fatal(err)
	}
	v := &verdict{}
	checkHistory(v, "d1", "k-d1", h)
	if v.Lost() != 0 || v.Suppressed != 1 || len(v.Failures) > 0 {
		t.Errorf("lost %d suppressed %d failures %q, want 0, 1, none", v.Lost(), v.Suppressed, v.Failures)
	}
}

// TestOptOutPlan: a tenth of the webhook recipients opt out, half each way, between 35 % and
// 65 % of production, and the webhooks spread over every recipient.
func TestOptOutPlan(t *testing.T) {
	if optOutRecipients*10 != webhookRecipients {
		t.Fatalf("%d of %d recipients opt out, want a tenth", optOutRecipients, webhookRecipients)
	}
	kinds := map[string]int{}
	for n := range optOutRecipients {
		kinds[optOutKind(n)]++
		if at := optOutShareAt(n); at < 0.35 || at > 0.65 || (n > 0 && at <= optOutShareAt(n-1)) {
			t.Errorf("opt-out %d at %.2f of production", n, at)
		}
	}
	if kinds[optOutBySuppression] != optOutRecipients/2 || kinds[optOutByPreference] != optOutRecipients/2 {
		t.Errorf("opt-outs by kind %v, want half each", kinds)
	}
	seen := map[int]int{}
	for i := range 2000 {
		seen[webhookRecipientOf(i)]++
	}
	for n := range webhookRecipients {
		if seen[n] < 20 {
			t.Errorf("recipient %d gets %d of 2000 deliveries", n, seen[n])
		}
	}
}

// TestCheckOptOutsProviderSuppression: an SMS to a permanent number that an earlier SMS's death
// put on the suppression list (the provider's word) is explained; one whose evidence is no such
// death is not.
func TestCheckOptOutsProviderSuppression(t *testing.T) {
	now := time.Now()
	number := permanentNumbers[0]
	accept := func(id string) (*domain.Delivery, []domain.Event) {
		d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: soakTenant, Channel: sms.Name, Recipient: number,
			Payload: []byte(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 5, RequestKey: "k-" + id, Category: soakCategory}, now)
		if err != nil {
			t.Fatal(err)
		}
		return d, events
	}
	first, events := accept("d1")
	died := appendSteps(t, events, []func() ([]domain.Event, error){
		func() ([]domain.Event, error) { return first.Queue(now) },
		func() ([]domain.Event, error) { return first.StartAttempt(twilioProvider, now) },
		func() ([]domain.Event, error) {
			return first.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomePermanent, Provider: twilioProvider, ProviderCode: "30005"}, domain.RetryPolicy{MaxAttempts: 5}, now, 0)
		},
	})
	for _, tc := range []struct {
		name     string
		evidence string // the delivery the suppression names
		want     bool   // explained
	}{
		{name: "the earlier SMS died", evidence: "d1", want: true},
		{name: "no such delivery", evidence: "d9", want: false},
	} {
		second, events := accept("d2")
		block := domain.Block{Suppression: &domain.Suppression{ID: "s1", Tenant: soakTenant, Channel: sms.Name, Recipient: number,
			Source: domain.SuppressionByProvider, Evidence: domain.SuppressionEvidence{DeliveryID: tc.evidence, EventVersion: 4,
				Provider: twilioProvider, ProviderCode: "30005"}, CreatedAt: now}}
		suppressed := appendSteps(t, events, []func() ([]domain.Event, error){func() ([]domain.Event, error) { return second.Suppress(block, now) }})
		histories := map[string]*history{}
		for id, stream := range map[string][]domain.Event{"d1": died, "d2": suppressed} {
			h, err := readHistory(stream)
			if err != nil {
				t.Fatal(err)
			}
			histories[id] = h
		}
		v := &verdict{}
		checkOptOuts(v, evidence{ids: map[string]string{"k-d1": "d1", "k-d2": "d2"}}, map[string]string{"d1": "k-d1", "d2": "k-d2"}, histories)
		explained := v.OptOuts.ByProvider == 1 && !slices.ContainsFunc(v.Failures, func(f string) bool { return strings.Contains(f, "never opted out") })
		if explained != tc.want {
			t.Errorf("%s: explained %v (by provider %d, failures %v), want %v", tc.name, explained, v.OptOuts.ByProvider, v.Failures, tc.want)
		}
	}
}

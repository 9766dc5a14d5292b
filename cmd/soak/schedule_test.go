package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/domain"
)

// scheduledEnd is how a scheduled webhook's stream ends in a schedule case.
type scheduledEnd int

const (
	endScheduled scheduledEnd = iota // still waiting for its send_at
	endQueued                        // released, no attempt started
	endCancelled
	endDelivered
)

// scheduledStream is the stream of a webhook accepted at now with send_at sendAt, ending as end;
// its attempt 1 starts at startAt.
func scheduledStream(t *testing.T, id string, now, sendAt, startAt time.Time, end scheduledEnd) []domain.Event {
	t.Helper()
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: soakTenant, Channel: webhook.Name, Recipient: "http://127.0.0.1:1/hook",
		Payload: []byte(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 5, RequestKey: "k-" + id}, now)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func() ([]domain.Event, error){func() ([]domain.Event, error) { return d.Schedule(sendAt, now) }}
	switch end {
	case endQueued:
		steps = append(steps, func() ([]domain.Event, error) { return d.Release(sendAt) })
	case endCancelled:
		steps = append(steps, func() ([]domain.Event, error) { return d.Cancel("", "", sendAt.Add(-time.Millisecond)) })
	case endDelivered:
		steps = append(steps,
			func() ([]domain.Event, error) { return d.Release(sendAt) },
			func() ([]domain.Event, error) { return d.StartAttempt(webhook.Name, startAt) },
			func() ([]domain.Event, error) {
				return d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeDelivered}, domain.RetryPolicy{MaxAttempts: 5}, startAt, 0)
			})
	}
	return appendSteps(t, events, steps)
}

// appendSteps appends the events of each step of a delivery's life to events.
func appendSteps(t *testing.T, events []domain.Event, steps []func() ([]domain.Event, error)) []domain.Event {
	t.Helper()
	for _, step := range steps {
		more, err := step()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, more...)
	}
	return events
}

func TestCheckSchedule(t *testing.T) {
	now := time.Now()
	sendAt := now.Add(2 * time.Second)
	startAt := sendAt.Add(300 * time.Millisecond)
	callAt := startAt.Add(10 * time.Millisecond)
	for _, tc := range []struct {
		name     string
		end      scheduledEnd
		cancel   string    // the canceller's answer; "" when it did not cancel
		callAt   time.Time // when the sink was called; zero for never
		want     string    // a failure names this; "" for none
		lateBy   time.Duration
		lateness bool
	}{
		{name: "delivered on time", end: endDelivered, callAt: callAt, lateness: true},
		{name: "delivered, a cancel refused", end: endDelivered, callAt: callAt, cancel: cancelRefused, lateness: true},
		{name: "cancelled, answered 200", end: endCancelled, cancel: cancelOK},
		{name: "cancelled, the answer lost", end: endCancelled, cancel: "no answer"},
		{name: "answered 200, the sink called", end: endCancelled, cancel: cancelOK, callAt: callAt, want: "answered 200 reached the sink"},
		{name: "answered 200, delivered", end: endDelivered, cancel: cancelOK, want: "did not end cancelled"},
		{name: "answered 409 before any attempt", end: endQueued, cancel: cancelRefused, want: "no attempt had started"},
		{name: "cancelled though nobody asked", end: endCancelled, want: "without a cancel answered 200"},
		{name: "never released", end: endScheduled, want: "ended neither delivered nor unknown"},
		{name: "called before its send_at", end: endDelivered, callAt: sendAt.Add(-20 * time.Millisecond), want: "before their send_at"},
		{name: "called within the clock's granularity", end: endDelivered, callAt: sendAt.Add(-2 * time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const id = "d1"
			h, err := readHistory(scheduledStream(t, id, now, sendAt, startAt, tc.end))
			if err != nil {
				t.Fatal(err)
			}
			ev := evidence{cancels: map[string]string{}}
			if tc.cancel != "" {
				ev.cancels[id] = tc.cancel
			}
			if !tc.callAt.IsZero() {
				ev.calls = []sinkCall{{ID: id, Attempt: 1, At: tc.callAt, Status: 200}}
			}
			v := &verdict{}
			checkSchedule(v, ev, map[string]*history{id: h})
			switch {
			case tc.want == "" && len(v.Failures) > 0:
				t.Errorf("failures %q, want none", v.Failures)
			case tc.want != "" && !slices.ContainsFunc(v.Failures, func(f string) bool { return strings.Contains(f, tc.want) }):
				t.Errorf("failures %q, want one saying %q", v.Failures, tc.want)
			}
			if v.Schedule.Scheduled != 1 {
				t.Errorf("scheduled %d, want 1", v.Schedule.Scheduled)
			}
			if tc.lateness && !slices.Equal(v.Schedule.Lateness, []time.Duration{startAt.Sub(sendAt)}) {
				t.Errorf("lateness %v, want [%s]", v.Schedule.Lateness, startAt.Sub(sendAt))
			}
		})
	}
}

// TestCancelledSettles: a cancelled delivery is terminal for the wait and the lost count, and a
// scheduled one is not settled.
func TestCancelledSettles(t *testing.T) {
	tr := newTracker(nil)
	tr.states["c"], tr.states["s"] = domain.StateCancelled, domain.StateScheduled
	if !tr.settled("c") || tr.settled("s") {
		t.Errorf("settled: cancelled %v, scheduled %v; want true, false", tr.settled("c"), tr.settled("s"))
	}
	h, err := readHistory(scheduledStream(t, "d1", time.Now(), time.Now().Add(time.Second), time.Time{}, endCancelled))
	if err != nil {
		t.Fatal(err)
	}
	v := &verdict{}
	checkHistory(v, "d1", "k-d1", h)
	if v.Lost() != 0 || v.Cancelled != 1 || len(v.Failures) > 0 {
		t.Errorf("lost %d cancelled %d failures %q, want 0, 1, none", v.Lost(), v.Cancelled, v.Failures)
	}
}

// TestSchedulePlan: a fifth of the webhooks are scheduled 0.5-5 s ahead, half of those cancelled,
// before, at and after their send_at; no SMS is.
func TestSchedulePlan(t *testing.T) {
	plan := schedulePlan{sms: smsPlan{share: 0.2}}
	scheduled, before, at, after := 0, 0, 0, 0
	for i := range 300 {
		ahead, ok := plan.sendAhead(i)
		if !ok {
			if _, c := plan.cancelAt(i); c {
				t.Fatalf("delivery %d is cancelled, not scheduled", i)
			}
			continue
		}
		if _, isSMS := plan.sms.ordinal(i); isSMS {
			t.Fatalf("delivery %d is an SMS and scheduled", i)
		}
		if ahead < sendAheadMin || ahead > sendAheadMin+sendAheadSpread {
			t.Fatalf("delivery %d is %s ahead", i, ahead)
		}
		scheduled++
		off, ok := plan.cancelAt(i)
		switch {
		case !ok:
		case off < -10*time.Millisecond:
			before++
		case off <= 10*time.Millisecond:
			at++
		default:
			after++
		}
	}
	if scheduled != 60 || before+at+after != 30 || before == 0 || at == 0 || after == 0 {
		t.Errorf("scheduled %d, cancelled before/at/after %d/%d/%d; want 60 and 30 spread over all three", scheduled, before, at, after)
	}
}

package domain

import (
	"errors"
	"testing"
	"time"
)

// TestScheduledWaitsForItsTimeThenQueues: a scheduled delivery is queued only at its send_at,
// and the history folds back to the same send_at.
func TestScheduledWaitsForItsTimeThenQueues(t *testing.T) {
	t.Parallel()
	s := accept(t, validSpec())
	sendAt := testNow.Add(time.Hour)
	s.add(t)(s.d.Schedule(sendAt, testNow))
	if s.d.State() != StateScheduled || !s.d.SendAt().Equal(sendAt) || !s.d.NextAttemptAt().Equal(sendAt) {
		t.Fatalf("after schedule: %s, send_at %v, next %v", s.d.State(), s.d.SendAt(), s.d.NextAttemptAt())
	}
	if _, err := s.d.Release(sendAt.Add(-time.Second)); !errors.Is(err, ErrNotScheduled) {
		t.Fatalf("release before send_at: %v, want ErrNotScheduled", err)
	}
	if got := s.d.CopyOf(1, false, false); got.Calls() {
		t.Fatalf("a work message for a scheduled delivery: %s, want no call", got)
	}
	s.add(t)(s.d.Release(sendAt))
	if s.d.State() != StateQueued || s.d.Attempt() != 1 {
		t.Fatalf("after release: %s at attempt %d", s.d.State(), s.d.Attempt())
	}
	again, err := Rehydrate(s.events)
	if err != nil || !again.SendAt().Equal(sendAt) {
		t.Fatalf("rehydrate: %v, send_at %v", err, again.SendAt())
	}
	if _, err := s.d.Schedule(testNow, testNow); err == nil {
		t.Fatal("a send_at that is not ahead was scheduled")
	}
}

// TestCancelOnlyBeforeAnyAttemptStarted: accepted, scheduled and queued deliveries cancel; a
// repeat records nothing; a started attempt refuses the cancel naming state and attempt, and a
// cancelled delivery refuses every start.
func TestCancelOnlyBeforeAnyAttemptStarted(t *testing.T) {
	t.Parallel()
	for _, from := range []State{StateAccepted, StateScheduled, StateQueued} {
		s := accept(t, validSpec())
		switch from {
		case StateScheduled:
			s.add(t)(s.d.Schedule(testNow.Add(time.Minute), testNow))
		case StateQueued:
			s.add(t)(s.d.Queue(testNow))
		}
		s.add(t)(s.d.Cancel("changed my mind", "alice", testNow))
		if s.d.State() != StateCancelled || s.d.Cancellation().From != from || s.d.Cancellation().Actor != "alice" {
			t.Fatalf("cancel from %s: %s, %+v", from, s.d.State(), s.d.Cancellation())
		}
		if events, err := s.d.Cancel("again", "bob", testNow); err != nil || len(events) != 0 {
			t.Fatalf("repeated cancel: %v, %v", events, err)
		}
		if _, err := s.d.StartAttempt("webhook", testNow); err == nil {
			t.Fatalf("an attempt started on a delivery cancelled from %s", from)
		}
		if got := s.d.CopyOf(1, true, true); got.Calls() {
			t.Fatalf("a copy of a cancelled delivery's message: %s, want no call", got)
		}
	}

	s := processing(t, validSpec())
	_, err := s.d.Cancel("", "", testNow)
	var refused *CancelRefused
	if !errors.As(err, &refused) || refused.State != StateProcessing || refused.Attempt != 1 {
		t.Fatalf("cancel while processing: %v", err)
	}
	s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeTransient, Provider: "webhook"}, testPolicy(), testNow, 0))
	s.add(t)(s.d.Queue(testNow.Add(time.Minute)))
	if _, err := s.d.Cancel("", "", testNow); !errors.As(err, &refused) || refused.State != StateQueued || refused.Attempt != 2 {
		t.Fatalf("cancel of a queued retry (attempt 1 finished): %v", err)
	}
}

// TestDueOfNamesEveryDueTime: the events that record a due time give it back, others none.
func TestDueOfNamesEveryDueTime(t *testing.T) {
	t.Parallel()
	s := accept(t, validSpec())
	sendAt := testNow.Add(time.Hour)
	ev := s.add(t)(s.d.Schedule(sendAt, testNow))
	if due, ok := DueOf(ev[0]); !ok || due.Kind != DueSend || !due.At.Equal(sendAt) {
		t.Fatalf("DueOf(scheduled) = %+v, %v", due, ok)
	}
	if _, ok := DueOf(s.events[0]); ok {
		t.Fatal("DueOf(accepted) names a due time")
	}
	s.add(t)(s.d.Release(sendAt))
	until := sendAt.Add(time.Second)
	ev = s.add(t)(s.d.Defer("rate limited", until, sendAt))
	if due, ok := DueOf(ev[0]); !ok || due.Kind != DueDefer || !due.At.Equal(until) {
		t.Fatalf("DueOf(deferred) = %+v, %v", due, ok)
	}
	s.add(t)(s.d.StartAttempt("webhook", until))
	ev = s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeTransient, Provider: "webhook"}, testPolicy(), until, 0))
	if due, ok := DueOf(ev[0]); !ok || due.Kind != DueRetry || !due.At.Equal(*s.d.NextAttemptAt()) {
		t.Fatalf("DueOf(retry_scheduled) = %+v, %v", due, ok)
	}
}

func testPolicy() RetryPolicy {
	return RetryPolicy{Strategy: Exponential{Base: time.Second, Cap: time.Minute}, MaxAttempts: 3}
}

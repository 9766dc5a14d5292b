package domain

import (
	"errors"
	"testing"
)

// expectedTransitions is the lifecycle of docs/design.md written out again, independently of the
// table in state.go, so that a change to either one shows up as a failing pair.
var expectedTransitions = map[State]map[EventType]State{
	StateNone: {EventAccepted: StateAccepted},
	StateAccepted: {
		EventQueued:          StateQueued,
		EventScheduled:       StateScheduled, // a send_at ahead, recorded by the accept
		EventCancelled:       StateCancelled,
		EventSuppressed:      StateSuppressed, // the accept found the recipient suppressed
		EventReceiptRecorded: StateAccepted,
	},
	// The due pass queues a scheduled delivery at its time; a cancel ends it before, and so
	// does a suppression (decided when its attempt would start).
	StateScheduled: {
		EventQueued:          StateQueued,
		EventCancelled:       StateCancelled,
		EventSuppressed:      StateSuppressed,
		EventReceiptRecorded: StateScheduled,
	},
	StateQueued: {
		EventAttemptStarted:  StateProcessing,
		EventDeferred:        StateQueued,
		EventCancelled:       StateCancelled,  // only while no attempt ever started (Delivery.Cancel)
		EventSuppressed:      StateSuppressed, // a worker found the recipient suppressed, before any call
		EventReceiptRecorded: StateQueued,
	},
	StateProcessing: {
		EventDelivered:        StateDelivered,
		EventRetryScheduled:   StateRetrying,
		EventDeadLettered:     StateDead,
		EventOutcomeUnknown:   StateUnknown,
		EventProviderAccepted: StateProcessing,
		EventReceiptRecorded:  StateProcessing,
		EventFailedOver:       StateProcessing,
	},
	StateRetrying: {EventQueued: StateQueued, EventReceiptRecorded: StateRetrying},
	StateDead:     {EventReplayed: StateQueued, EventReceiptRecorded: StateDead},
	StateUnknown: {
		EventReconciledDelivered: StateDelivered,
		EventReconciledDead:      StateDead,
		EventReconciledRetry:     StateRetrying,
		EventReceiptRecorded:     StateUnknown,
		EventReplayed:            StateQueued, // an operator's replay that allows it (ReplayAs)
	},
	// A receipt is evidence in every state, a delivered delivery's included: it changes nothing.
	StateDelivered: {EventReceiptRecorded: StateDelivered},
	// Cancelled is terminal: nothing but evidence follows it, above all no attempt's start.
	StateCancelled: {EventReceiptRecorded: StateCancelled},
	// Suppressed is terminal like cancelled: no attempt follows it.
	StateSuppressed: {EventReceiptRecorded: StateSuppressed},
}

// allStates is StateNone plus every state of the contract.
func allStates() []State {
	return append([]State{StateNone}, States...)
}

func TestNextEveryPair(t *testing.T) {
	t.Parallel()

	pairs := 0
	for _, from := range allStates() {
		for _, event := range EventTypes {
			pairs++
			got, err := Next(from, event)
			want, allowed := expectedTransitions[from][event]
			if allowed {
				if err != nil {
					t.Errorf("Next(%q, %s): unexpected error %v, want %q", from, event, err, want)
					continue
				}
				if got != want {
					t.Errorf("Next(%q, %s) = %q, want %q", from, event, got, want)
				}
				continue
			}
			var terr *TransitionError
			if !errors.As(err, &terr) {
				t.Errorf("Next(%q, %s) = (%q, %v), want a *TransitionError", from, event, got, err)
				continue
			}
			if terr.From != from || terr.Event != event {
				t.Errorf("Next(%q, %s): TransitionError names (%q, %s)", from, event, terr.From, terr.Event)
			}
			if got != StateNone {
				t.Errorf("Next(%q, %s) refused but returned state %q", from, event, got)
			}
			if terr.Error() == "" {
				t.Errorf("Next(%q, %s): TransitionError has an empty message", from, event)
			}
		}
	}
	if want := (len(States) + 1) * len(EventTypes); pairs != want || pairs == 0 {
		t.Fatalf("walked %d pairs, want %d", pairs, want)
	}
}

// TestExpectedTableCoversContract keeps the expected table honest: every state it names and
// every state it leads to is a state of the contract, so the walk above cannot pass by
// comparing against a table that speaks of other states.
func TestExpectedTableCoversContract(t *testing.T) {
	t.Parallel()

	if len(expectedTransitions) != len(States)+1 {
		t.Errorf("expected table has %d source states, the contract has %d (plus none)",
			len(expectedTransitions), len(States))
	}
	for from, events := range expectedTransitions {
		if from != StateNone && !from.Valid() {
			t.Errorf("expected table: source %q is not a state of the contract", from)
		}
		for event, to := range events {
			if !to.Valid() {
				t.Errorf("expected table: %q --%s--> %q leads to an invalid state", from, event, to)
			}
		}
	}
}

func TestStatesHaveNoDuplicates(t *testing.T) {
	t.Parallel()

	seen := map[State]bool{}
	for _, s := range States {
		if s == StateNone {
			t.Errorf("States contains StateNone")
		}
		if seen[s] {
			t.Errorf("States lists %q twice", s)
		}
		seen[s] = true
	}
	wire := []State{"accepted", "scheduled", "queued", "processing", "retrying", "delivered", "dead", "unknown", "cancelled", "suppressed"}
	if len(States) != len(wire) {
		t.Errorf("States has %d elements, the wire contract has %d", len(States), len(wire))
	}
	for _, s := range wire {
		if !seen[s] {
			t.Errorf("States lacks wire state %q", s)
		}
	}
}

func TestEventTypesHaveNoDuplicates(t *testing.T) {
	t.Parallel()

	seen := map[EventType]bool{}
	for _, e := range EventTypes {
		if e == "" {
			t.Errorf("EventTypes contains an empty type")
		}
		if seen[e] {
			t.Errorf("EventTypes lists %q twice", e)
		}
		seen[e] = true
	}
	if len(seen) != 18 {
		t.Errorf("EventTypes has %d distinct types, want 18", len(seen))
	}
}

// TestEveryStateButDeliveredHasAWayOut: a way out is an event that leads to another state; an
// event that keeps the state (a deferral, a receipt) is not one. Delivered and cancelled are
// final.
func TestEveryStateButDeliveredHasAWayOut(t *testing.T) {
	t.Parallel()

	for _, from := range allStates() {
		var exits []EventType
		for _, event := range EventTypes {
			if to, err := Next(from, event); err == nil && to != from {
				exits = append(exits, event)
			}
		}
		switch {
		case (from == StateDelivered || from == StateCancelled || from == StateSuppressed) && len(exits) != 0:
			t.Errorf("%s is final but %v leave it", from, exits)
		case from != StateDelivered && from != StateCancelled && from != StateSuppressed && len(exits) == 0:
			t.Errorf("state %q has no way out", from)
		}
	}
}

// TestPreservingKeepsEveryState: the events Preserving names keep whatever state the delivery
// is in, so projections may skip them when they look for the latest state.
func TestPreservingKeepsEveryState(t *testing.T) {
	t.Parallel()

	preserving := 0
	for _, event := range EventTypes {
		if !Preserving(event) {
			continue
		}
		preserving++
		for _, from := range States {
			if to, err := Next(from, event); err != nil || to != from {
				t.Errorf("Next(%q, %s) = (%q, %v), a preserving event must keep the state", from, event, to, err)
			}
		}
	}
	if preserving != 1 {
		t.Errorf("%d preserving event types, want 1 (receipt_recorded)", preserving)
	}
}

func TestTerminalOnlyDeliveredDeadCancelledAndSuppressed(t *testing.T) {
	t.Parallel()

	for _, s := range allStates() {
		want := s == StateDelivered || s == StateDead || s == StateCancelled || s == StateSuppressed
		if got := s.Terminal(); got != want {
			t.Errorf("%q.Terminal() = %v, want %v", s, got, want)
		}
	}
}

func TestStateValid(t *testing.T) {
	t.Parallel()

	for _, s := range States {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
	}
	for _, s := range []State{StateNone, "Delivered", "pending", "delivery.accepted"} {
		if s.Valid() {
			t.Errorf("%q.Valid() = true", s)
		}
	}
}

package domain_test

import (
	"errors"
	"testing"

	"github.com/deliveryledger/ledger/domain"
)

// expectedTransitions is the lifecycle of DESIGN.md written out again, independently of the
// table in state.go, so that a change to either one shows up as a failing pair.
var expectedTransitions = map[domain.State]map[domain.EventType]domain.State{
	domain.StateNone:     {domain.EventAccepted: domain.StateAccepted},
	domain.StateAccepted: {domain.EventQueued: domain.StateQueued},
	domain.StateQueued:   {domain.EventAttemptStarted: domain.StateProcessing, domain.EventDeferred: domain.StateQueued},
	domain.StateProcessing: {
		domain.EventDelivered:      domain.StateDelivered,
		domain.EventRetryScheduled: domain.StateRetrying,
		domain.EventDeadLettered:   domain.StateDead,
		domain.EventOutcomeUnknown: domain.StateUnknown,
	},
	domain.StateRetrying: {domain.EventQueued: domain.StateQueued},
	domain.StateDead:     {domain.EventReplayed: domain.StateQueued},
	domain.StateUnknown: {
		domain.EventReconciledDelivered: domain.StateDelivered,
		domain.EventReconciledDead:      domain.StateDead,
		domain.EventReconciledRetry:     domain.StateRetrying,
	},
	domain.StateDelivered: {},
}

// allStates is StateNone plus every state of the contract.
func allStates() []domain.State {
	return append([]domain.State{domain.StateNone}, domain.States...)
}

func TestNextEveryPair(t *testing.T) {
	t.Parallel()

	pairs := 0
	for _, from := range allStates() {
		for _, event := range domain.EventTypes {
			pairs++
			got, err := domain.Next(from, event)
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
			var terr *domain.TransitionError
			if !errors.As(err, &terr) {
				t.Errorf("Next(%q, %s) = (%q, %v), want a *TransitionError", from, event, got, err)
				continue
			}
			if terr.From != from || terr.Event != event {
				t.Errorf("Next(%q, %s): TransitionError names (%q, %s)", from, event, terr.From, terr.Event)
			}
			if got != domain.StateNone {
				t.Errorf("Next(%q, %s) refused but returned state %q", from, event, got)
			}
			if terr.Error() == "" {
				t.Errorf("Next(%q, %s): TransitionError has an empty message", from, event)
			}
		}
	}
	if want := (len(domain.States) + 1) * len(domain.EventTypes); pairs != want || pairs == 0 {
		t.Fatalf("walked %d pairs, want %d", pairs, want)
	}
}

// TestExpectedTableCoversContract keeps the expected table honest: every state it names and
// every state it leads to is a state of the contract, so the walk above cannot pass by
// comparing against a table that speaks of other states.
func TestExpectedTableCoversContract(t *testing.T) {
	t.Parallel()

	if len(expectedTransitions) != len(domain.States)+1 {
		t.Errorf("expected table has %d source states, the contract has %d (plus none)",
			len(expectedTransitions), len(domain.States))
	}
	for from, events := range expectedTransitions {
		if from != domain.StateNone && !from.Valid() {
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

	seen := map[domain.State]bool{}
	for _, s := range domain.States {
		if s == domain.StateNone {
			t.Errorf("States contains StateNone")
		}
		if seen[s] {
			t.Errorf("States lists %q twice", s)
		}
		seen[s] = true
	}
	wire := []domain.State{"accepted", "queued", "processing", "retrying", "delivered", "dead", "unknown"}
	if len(domain.States) != len(wire) {
		t.Errorf("States has %d elements, the wire contract has %d", len(domain.States), len(wire))
	}
	for _, s := range wire {
		if !seen[s] {
			t.Errorf("States lacks wire state %q", s)
		}
	}
}

func TestEventTypesHaveNoDuplicates(t *testing.T) {
	t.Parallel()

	seen := map[domain.EventType]bool{}
	for _, e := range domain.EventTypes {
		if e == "" {
			t.Errorf("EventTypes contains an empty type")
		}
		if seen[e] {
			t.Errorf("EventTypes lists %q twice", e)
		}
		seen[e] = true
	}
	if len(seen) != 12 {
		t.Errorf("EventTypes has %d distinct types, want 12", len(seen))
	}
}

func TestEveryStateButDeliveredHasAWayOut(t *testing.T) {
	t.Parallel()

	for _, from := range allStates() {
		var exits []domain.EventType
		for _, event := range domain.EventTypes {
			if _, err := domain.Next(from, event); err == nil {
				exits = append(exits, event)
			}
		}
		switch {
		case from == domain.StateDelivered && len(exits) != 0:
			t.Errorf("delivered is final but %v leave it", exits)
		case from != domain.StateDelivered && len(exits) == 0:
			t.Errorf("state %q has no way out", from)
		}
	}
}

func TestTerminalOnlyDeliveredAndDead(t *testing.T) {
	t.Parallel()

	for _, s := range allStates() {
		want := s == domain.StateDelivered || s == domain.StateDead
		if got := s.Terminal(); got != want {
			t.Errorf("%q.Terminal() = %v, want %v", s, got, want)
		}
	}
}

func TestStateValid(t *testing.T) {
	t.Parallel()

	for _, s := range domain.States {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
	}
	for _, s := range []domain.State{domain.StateNone, "Delivered", "pending", "delivery.accepted"} {
		if s.Valid() {
			t.Errorf("%q.Valid() = true", s)
		}
	}
}

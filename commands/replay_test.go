package commands_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// interleavingStore is the real store with one interleaving forced: right after the first load
// of a stream, between that load and the append decided on it, meanwhile runs (once). It puts
// another writer's work exactly where a race would, without a sleep.
type interleavingStore struct {
	*postgres.EventStore
	once      sync.Once
	meanwhile func()
}

func (s *interleavingStore) Load(ctx context.Context, id string) ([]domain.Event, error) {
	events, err := s.EventStore.Load(ctx, id)
	s.once.Do(s.meanwhile)
	return events, err
}

func (s *interleavingStore) LoadOf(ctx context.Context, tenant, id string) ([]domain.Event, error) {
	events, err := s.EventStore.LoadOf(ctx, tenant, id)
	s.once.Do(s.meanwhile)
	return events, err
}

// TestReplayThatLostARaceDoesNotReplayTheNextDeath: a replay that loaded a dead delivery, lost
// the append to another replay, and meanwhile saw the replayed cycle die again is refused with
// the replay that took its cycle (409 at the API): it asked of the first death, not the second.
// It used to decide again on the reloaded stream, find the delivery dead once more, and replay
// that death too: two replays for one request's worth of deaths.
func TestReplayThatLostARaceDoesNotReplayTheNextDeath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newOperatorFixture(t)
	d := acceptedDelivery(t, f.store)
	die := func(attempt int) {
		t.Helper()
		f.startAttempt(t, d, attempt, false)
		if state, err := f.record.Handle(ctx, commands.RecordOutcome{DeliveryID: d.ID(), Attempt: attempt,
			Outcome: domain.Outcome{Kind: domain.OutcomePermanent, Provider: "webhook", StatusCode: 410}}); err != nil || state != domain.StateDead {
			t.Fatalf("attempt %d: %s %v, want dead", attempt, state, err)
		}
	}
	die(1)
	racing := &interleavingStore{EventStore: f.store, meanwhile: func() {
		// Another operator's replay wins, and its cycle dies again at once.
		if _, err := f.replay.Handle(ctx, commands.Replay{Tenant: "acme", DeliveryID: d.ID(), Actor: "ops:ann"}); err != nil {
			t.Errorf("the other replay: %v", err)
		}
		die(2)
	}}
	loser := commands.NewReplayHandler(racing, f.topics, commands.SystemClock{})
	_, err := loser.Handle(ctx, commands.Replay{Tenant: "acme", DeliveryID: d.ID(), Actor: "ops:bob"})
	var already *domain.AlreadyReplayedError
	if !errors.As(err, &already) || already.Of != 4 || already.Version != 5 || already.By() != "ops:ann" {
		t.Fatalf("the replay that lost: %v (%+v), want AlreadyReplayedError of version 4 by ops:ann at 5", err, already)
	}
	events, err := f.store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	if n := replays(t, f.store, d.ID()); n != 1 || events[len(events)-1].Type != domain.EventDeadLettered {
		t.Fatalf("%d replays, last event %s; want the one replay that won, the delivery dead again", n, events[len(events)-1].Type)
	}
	// The second death is a cycle of its own: a replay asked of it now is recorded.
	after, err := f.replay.Handle(ctx, commands.Replay{Tenant: "acme", DeliveryID: d.ID(), Actor: "ops:bob"})
	if err != nil || after.State() != domain.StateQueued {
		t.Fatalf("replay of the second death: %v, want queued", err)
	}
}

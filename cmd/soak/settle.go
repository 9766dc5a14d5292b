package main

import (
	"context"
	"fmt"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/domain"
)

// loadChunk is how many streams one query loads.
const loadChunk = 500

// settled reports whether nothing will move a delivery in state s any more: delivered is
// terminal, unknown waits for reconciliation, and dead is terminal unless the soak's operator
// replays dead deliveries (then it waits for the replay and the next attempt).
func (t *tracker) settled(s domain.State) bool {
	return s == domain.StateDelivered || s == domain.StateUnknown || (s == domain.StateDead && !t.replaying)
}

// tracker follows the accepted deliveries by folding their streams from the events table.
type tracker struct {
	store *postgres.EventStore
	// states is the last folded state of each delivery seen so far.
	states map[string]domain.State
	// changed is when a delivery was last seen in a new state.
	changed time.Time
	// replaying: the soak replays dead deliveries, so dead is not settled.
	replaying bool
}

func newTracker(store *postgres.EventStore) *tracker {
	return &tracker{store: store, states: map[string]domain.State{}, changed: time.Now()}
}

// refresh folds the streams of the given deliveries that have not settled yet (all of them when
// all is set) and returns how many of ids have settled. It remembers when a state last changed.
func (t *tracker) refresh(ctx context.Context, ids []string, all bool) (int, error) {
	var load []string
	for _, id := range ids {
		if all || !t.settled(t.states[id]) {
			load = append(load, id)
		}
	}
	streams, err := loadStreams(ctx, t.store, load)
	if err != nil {
		return 0, err
	}
	for _, id := range load {
		events, ok := streams[id]
		if !ok {
			delete(t.states, id)
			continue
		}
		d, err := domain.Rehydrate(events)
		if err != nil {
			return 0, err
		}
		if before, ok := t.states[id]; !ok || before != d.State() {
			t.changed = time.Now()
		}
		t.states[id] = d.State()
	}
	n := 0
	for _, id := range ids {
		if t.settled(t.states[id]) {
			n++
		}
	}
	return n, nil
}

// loadStreams loads many streams, a chunk per query.
func loadStreams(ctx context.Context, store *postgres.EventStore, ids []string) (map[string][]domain.Event, error) {
	out := make(map[string][]domain.Event, len(ids))
	for start := 0; start < len(ids); start += loadChunk {
		chunk := ids[start:min(start+loadChunk, len(ids))]
		streams, err := store.LoadMany(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("load streams: %w", err)
		}
		for id, events := range streams {
			out[id] = events
		}
	}
	return out, nil
}

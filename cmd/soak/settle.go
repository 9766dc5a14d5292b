package main

import (
	"context"
	"fmt"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/domain"
)

// loadChunk is how many streams one query loads.
const loadChunk = 500

// settled reports whether nothing will move delivery id any more: delivered, cancelled and
// suppressed are terminal, unknown waits for reconciliation, and dead is terminal unless the soak's operator
// replays dead webhooks (then it waits for the replay and the next attempt). A scheduled
// delivery waits for its send_at: not settled. An SMS that a provider accepted
// stays processing until a receipt, a lookup or its receipt_max_wait decides: not settled.
func (t *tracker) settled(id string) bool {
	switch t.states[id] {
	case domain.StateDelivered, domain.StateCancelled, domain.StateSuppressed, domain.StateUnknown:
		return true
	case domain.StateDead:
		return !t.replaying || t.channels[id] != webhook.Name
	}
	return false
}

// tracker follows the accepted deliveries by folding their streams from the events table, or
// from the archive once retention moved them there.
type tracker struct {
	histories *histories
	// states is the last folded state of each delivery seen so far, channels its channel.
	states   map[string]domain.State
	channels map[string]string
	// changed is when a delivery was last seen in a new state.
	changed time.Time
	// replaying: the soak replays dead webhooks, so a dead webhook is not settled.
	replaying bool
}

func newTracker(h *histories) *tracker {
	return &tracker{histories: h, states: map[string]domain.State{}, channels: map[string]string{}, changed: time.Now()}
}

// refresh folds the streams of the given deliveries that have not settled yet (all of them when
// all is set) and returns how many of ids have settled. It remembers when a state last changed.
func (t *tracker) refresh(ctx context.Context, ids []string, all bool) (int, error) {
	var load []string
	for _, id := range ids {
		if all || !t.settled(id) {
			load = append(load, id)
		}
	}
	streams, _, err := t.histories.load(ctx, load)
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
		t.states[id], t.channels[id] = d.State(), d.Channel()
	}
	n := 0
	for _, id := range ids {
		if t.settled(id) {
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

package postgres

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// AppendBatcher is an EventStore whose concurrent appends share transactions (group commit),
// as the workers' attempt-start and outcome records do: many small transactions cost a commit
// each, a batch costs one. Every caller is answered after the commit that holds its events. A
// batch whose transaction fails (a version or idempotency conflict of one of its appends) is
// replayed append by append, so each caller gets exactly the answer it would have had alone.
//
// Loads are batched the same way: the workers read a stream before every attempt, and concurrent
// reads share one query.
type AppendBatcher struct {
	store    *EventStore
	queue    chan *appendCall
	loads    chan *loadCall
	maxBatch int
	wg       sync.WaitGroup
	stop     chan struct{}
}

type loadCall struct {
	ctx  context.Context
	id   string // canonical form
	done chan loadAnswer
}

type loadAnswer struct {
	events []domain.Event
	err    error
}

var _ commands.EventStore = (*AppendBatcher)(nil)

type appendCall struct {
	ctx    context.Context
	events []domain.Event
	outbox []commands.OutboxMessage
	done   chan error
}

// NewAppendBatcher starts committers goroutines taking up to maxBatch appends each. Close stops
// them.
func NewAppendBatcher(store *EventStore, committers, maxBatch int) *AppendBatcher {
	b := &AppendBatcher{store: store, queue: make(chan *appendCall), loads: make(chan *loadCall), maxBatch: maxBatch, stop: make(chan struct{})}
	for range max(committers, 1) {
		b.wg.Add(2)
		go b.run()
		go func() {
			defer b.wg.Done()
			collectBatches(b.loads, b.stop, b.maxBatch, b.load)
		}()
	}
	return b
}

// Close stops the committers after the batches in progress.
func (b *AppendBatcher) Close() {
	close(b.stop)
	b.wg.Wait()
}

// Load reads a stream, in one query with the other loads waiting at the same time.
func (b *AppendBatcher) Load(ctx context.Context, deliveryID string) ([]domain.Event, error) {
	id, err := uuid.Parse(deliveryID)
	if err != nil {
		return nil, commands.ErrNotFound
	}
	call := &loadCall{ctx: ctx, id: id.String(), done: make(chan loadAnswer, 1)}
	select {
	case b.loads <- call:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.stop:
		return b.store.Load(ctx, deliveryID)
	}
	select {
	case a := <-call.done:
		return a.events, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *AppendBatcher) load(batch []*loadCall) {
	live := batch[:0]
	ids := make([]string, 0, len(batch))
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.done <- loadAnswer{err: err}
			continue
		}
		live = append(live, c)
		ids = append(ids, c.id)
	}
	if len(live) == 0 {
		return
	}
	streams, err := b.store.LoadMany(context.Background(), ids)
	for _, c := range live {
		switch events := streams[c.id]; {
		case err != nil:
			c.done <- loadAnswer{err: fmt.Errorf("load %s: %w", c.id, err)}
		case len(events) == 0:
			c.done <- loadAnswer{err: commands.ErrNotFound}
		default:
			c.done <- loadAnswer{events: events}
		}
	}
}

// Append queues the append for the next batch and waits for its answer.
func (b *AppendBatcher) Append(ctx context.Context, events []domain.Event, outbox []commands.OutboxMessage) error {
	call := &appendCall{ctx: ctx, events: events, outbox: outbox, done: make(chan error, 1)}
	select {
	case b.queue <- call:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.stop:
		return b.store.Append(ctx, events, outbox)
	}
	select {
	case err := <-call.done:
		return err
	case <-ctx.Done():
		// The batch may still commit; the caller's retry then meets its own keys (a duplicate).
		return ctx.Err()
	}
}

func (b *AppendBatcher) run() {
	defer b.wg.Done()
	collectBatches(b.queue, b.stop, b.maxBatch, b.commit)
}

func (b *AppendBatcher) commit(batch []*appendCall) {
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.done <- err
			continue
		}
		live = append(live, c)
	}
	if len(live) == 1 {
		live[0].done <- b.store.Append(live[0].ctx, live[0].events, live[0].outbox)
		return
	}
	if len(live) == 0 {
		return
	}
	var events []domain.Event
	var outbox []commands.OutboxMessage
	for _, c := range live {
		events = append(events, c.events...)
		outbox = append(outbox, c.outbox...)
	}
	ctx := context.Background()
	var w writeBatch
	err := appendEvents(ctx, &w, events)
	if err == nil {
		err = publishOutbox(ctx, &w, outbox)
	}
	if err == nil {
		err = w.send(ctx, b.store.pool)
	}
	if err == nil {
		for _, c := range live {
			c.done <- nil
		}
		return
	}
	for _, c := range live {
		c.done <- b.store.Append(c.ctx, c.events, c.outbox)
	}
}

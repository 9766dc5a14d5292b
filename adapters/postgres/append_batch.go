package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// AppendBatcher is an EventStore whose concurrent appends share transactions (group commit),
// as the workers' attempt-start and outcome records do: many small transactions cost a commit
// each, a batch costs one. Every caller is answered after the commit that holds its events. A
// batch whose transaction fails (a version or idempotency conflict of one of its appends) is
// replayed append by append, so each caller gets exactly the answer it would have had alone.
type AppendBatcher struct {
	store    *EventStore
	queue    chan *appendCall
	maxBatch int
	wg       sync.WaitGroup
	stop     chan struct{}
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
	b := &AppendBatcher{store: store, queue: make(chan *appendCall), maxBatch: maxBatch, stop: make(chan struct{})}
	for range max(committers, 1) {
		b.wg.Add(1)
		go b.run()
	}
	return b
}

// Close stops the committers after the batches in progress.
func (b *AppendBatcher) Close() {
	close(b.stop)
	b.wg.Wait()
}

// Load reads a stream; reads are not batched.
func (b *AppendBatcher) Load(ctx context.Context, deliveryID string) ([]domain.Event, error) {
	return b.store.Load(ctx, deliveryID)
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
	err := pgx.BeginFunc(context.Background(), b.store.pool, func(tx pgx.Tx) error {
		if len(events) > 0 {
			if err := appendEvents(context.Background(), tx, events); err != nil {
				return err
			}
		}
		return publishOutbox(context.Background(), tx, outbox)
	})
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

package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
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
func (b *AppendBatcher) Load(ctx context.Context, deliveryID string) (_ []domain.Event, err error) {
	ctx, span := tracing.Start(ctx, "load: wait for shared read")
	defer func() {
		tracing.Fail(span, err)
		span.End()
	}()
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
	ctx, span := context.Background(), tracing.NoSpan
	if links := tracing.Links(live, func(c *loadCall) context.Context { return c.ctx }); len(links) > 0 {
		ctx, span = tracing.StartLinked("load: shared read", links, trace.WithAttributes(tracing.BatchSize.Int(len(live))))
	}
	streams, err := b.store.LoadMany(ctx, ids)
	tracing.Fail(span, err)
	span.End()
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

// Append queues the append for the next batch and waits for its answer. Traced, the wait is a
// span of the caller's trace, which the shared transaction's span links to.
func (b *AppendBatcher) Append(ctx context.Context, events []domain.Event, outbox []commands.OutboxMessage) (err error) {
	ctx, span := tracing.Start(ctx, "append: wait for group commit")
	defer func() {
		tracing.Fail(span, err)
		span.End()
	}()
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
	// Appends that claim a stream version or key an earlier append of this batch claims (two
	// copies of one message) would fail the batch: they go alone, after it.
	live, later := splitClaims(live)
	defer func() {
		for _, c := range later {
			c.done <- b.store.Append(c.ctx, c.events, c.outbox)
		}
	}()
	if len(live) == 1 {
		live[0].done <- b.store.Append(live[0].ctx, live[0].events, live[0].outbox)
		return
	}
	// A batch fails whole when one of its appends meets a taken version or key (a worker and the
	// relay both recording "queued", say). Answer the appends that conflict, and commit the rest
	// together again: replaying every append alone costs a commit each, and a batch of 60 took
	// a quarter of a second, in which every worker waited.
	for round := 0; round < maxBatchRounds && len(live) > 1; round++ {
		err := b.write(live)
		if err == nil {
			for _, c := range live {
				c.done <- nil
			}
			return
		}
		rest, ok := b.answerConflicts(live, err)
		if !ok {
			break
		}
		live = rest
	}
	for _, c := range live {
		c.done <- b.store.Append(c.ctx, c.events, c.outbox)
	}
}

// streamSlot is one version of one stream: an append claims it, and only one can hold it.
type streamSlot struct {
	id      string
	version int
}

// splitClaims keeps the calls whose stream versions and keys no earlier call of the batch
// claims, and returns the others apart.
func splitClaims(calls []*appendCall) (first, later []*appendCall) {
	slots, keys := map[streamSlot]bool{}, map[string]bool{}
	for _, c := range calls {
		clash := false
		for _, e := range c.events {
			if slots[streamSlot{e.DeliveryID, e.Version}] || keys[e.Key] {
				clash = true
			}
		}
		if clash {
			later = append(later, c)
			continue
		}
		for _, e := range c.events {
			slots[streamSlot{e.DeliveryID, e.Version}], keys[e.Key] = true, true
		}
		first = append(first, c)
	}
	return first, later
}

// maxBatchRounds bounds the retries of a batch whose appends keep conflicting.
const maxBatchRounds = 3

// write commits the appends of calls in one transaction.
func (b *AppendBatcher) write(calls []*appendCall) (err error) {
	var events []domain.Event
	var outbox []commands.OutboxMessage
	for _, c := range calls {
		events = append(events, c.events...)
		outbox = append(outbox, c.outbox...)
	}
	ctx, span := context.Background(), tracing.NoSpan
	if links := tracing.Links(calls, func(c *appendCall) context.Context { return c.ctx }); len(links) > 0 {
		ctx, span = tracing.StartLinked("append: group commit", links, trace.WithAttributes(tracing.BatchSize.Int(len(calls))))
	}
	defer func() {
		tracing.Fail(span, err)
		span.End()
	}()
	var w writeBatch
	if err := errors.Join(appendEvents(ctx, &w, events), publishOutbox(ctx, &w, outbox)); err != nil {
		return err
	}
	return w.send(ctx, b.store.pool)
}

// eventsTaken finds which of the given stream versions and idempotency keys are recorded: two
// index lookups (an OR across them would be a scan of the whole table). A key is looked up with
// its event's delivery, the events' unique key (delivery_id, idempotency_key).
const eventsTaken = `SELECT e.delivery_id::text, e.version, e.idempotency_key
FROM unnest($1::uuid[], $2::int[]) AS s(id, version)
JOIN events e ON e.delivery_id = s.id AND e.version = s.version
UNION
SELECT e.delivery_id::text, e.version, e.idempotency_key
FROM unnest($1::uuid[], $3::text[]) AS k(id, key)
JOIN events e ON e.idempotency_key = k.key AND e.delivery_id = k.id`

// answerConflicts answers, after a unique violation, every call whose events meet a recorded
// version or key, as EventStore.Append would have (ErrDuplicate when all its keys are recorded,
// ErrVersionConflict otherwise), and returns the others. ok is false when that cannot be told
// (another error, or no call conflicts any more): the caller replays the calls one by one.
func (b *AppendBatcher) answerConflicts(calls []*appendCall, err error) (rest []*appendCall, ok bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateUniqueViolation {
		return nil, false
	}
	var ids, keys []string
	var versions []int32
	for _, c := range calls {
		for _, e := range c.events {
			ids, versions, keys = append(ids, e.DeliveryID), append(versions, int32(e.Version)), append(keys, e.Key)
		}
	}
	stored, kerr := keysStored(ids, keys)
	if kerr != nil {
		return nil, false
	}
	rows, qerr := b.store.pool.Query(context.Background(), eventsTaken, ids, versions, stored)
	if qerr != nil {
		return nil, false
	}
	takenSlots, takenKeys := map[streamSlot]bool{}, map[string]bool{}
	for rows.Next() {
		var s streamSlot
		var key string
		if err := rows.Scan(&s.id, &s.version, &key); err != nil {
			rows.Close()
			return nil, false
		}
		takenSlots[s], takenKeys[keyLoaded(s.id, key)] = true, true
	}
	if rows.Err() != nil {
		return nil, false
	}
	for _, c := range calls {
		keysTaken, conflict := 0, false
		for _, e := range c.events {
			if takenKeys[e.Key] {
				keysTaken++
				conflict = true
			}
			if takenSlots[streamSlot{e.DeliveryID, e.Version}] {
				conflict = true
			}
		}
		switch {
		case !conflict:
			rest = append(rest, c)
		case keysTaken == len(c.events):
			c.done <- commands.ErrDuplicate
		default:
			c.done <- fmt.Errorf("append to %s at version %d: %w", c.events[0].DeliveryID, c.events[0].Version, commands.ErrVersionConflict)
		}
	}
	return rest, len(rest) < len(calls)
}

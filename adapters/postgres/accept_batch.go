package postgres

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/tracing"
)

// AcceptBatcher records concurrent accept requests in shared transactions (group commit): one
// round of locks, one insert per table and one fsync for a whole batch, while each caller still
// gets its own answer. A transaction per request caps accept throughput at the database's commit
// rate; batching lifts the cap without weakening the contract, because a caller is answered only
// after the transaction holding its rows has committed.
type AcceptBatcher struct {
	store    *EventStore
	queue    chan *acceptCall
	maxBatch int
	wg       sync.WaitGroup
	stop     chan struct{}
}

var (
	_ commands.AcceptStore       = (*AcceptBatcher)(nil)
	_ commands.RecipientGuarding = (*AcceptBatcher)(nil)
)

// GuardsRecipients implements commands.RecipientGuarding: a batch checks its records' guards in
// its shared transaction, and when one finds a blocked recipient each request is written alone,
// so that only the blocked one is refused (EventStore.RecordAccept).
func (b *AcceptBatcher) GuardsRecipients() bool { return b.store.GuardsRecipients() }

type acceptCall struct {
	ctx  context.Context
	rec  commands.AcceptRecord
	done chan acceptAnswer
}

type acceptAnswer struct {
	response []byte
	replayed bool
	err      error
	// commit is the span of the shared transaction that answered, when traced.
	commit trace.SpanContext
}

// Group commit defaults: a few committers overlap one batch's fsync with the next one's work.
const (
	DefaultAcceptCommitters = 2
	DefaultAcceptBatch      = 128
)

// NewAcceptBatcher starts committers goroutines that take up to maxBatch waiting requests each.
// Close stops them.
func NewAcceptBatcher(store *EventStore, committers, maxBatch int) *AcceptBatcher {
	if committers < 1 {
		committers = DefaultAcceptCommitters
	}
	if maxBatch < 1 {
		maxBatch = DefaultAcceptBatch
	}
	b := &AcceptBatcher{store: store, queue: make(chan *acceptCall), maxBatch: maxBatch, stop: make(chan struct{})}
	for range committers {
		b.wg.Add(1)
		go b.run()
	}
	return b
}

// Close stops the committers after the batches in progress.
func (b *AcceptBatcher) Close() {
	close(b.stop)
	b.wg.Wait()
}

// RecordAccept queues the request for the next batch and waits for its answer. Traced, the wait
// is a span of the request's trace ("accept: wait for group commit") linked to the span of the
// transaction that committed it, which links back to every request it served.
func (b *AcceptBatcher) RecordAccept(ctx context.Context, rec commands.AcceptRecord) (response []byte, replayed bool, err error) {
	ctx, span := tracing.Start(ctx, "accept: wait for group commit")
	defer func() {
		tracing.Fail(span, err)
		span.End()
	}()
	call := &acceptCall{ctx: ctx, rec: rec, done: make(chan acceptAnswer, 1)}
	select {
	case b.queue <- call:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case <-b.stop:
		return b.store.RecordAccept(ctx, rec)
	}
	select {
	case a := <-call.done:
		if a.commit.IsValid() {
			span.AddLink(trace.Link{SpanContext: a.commit})
		}
		return a.response, a.replayed, a.err
	case <-ctx.Done():
		// The batch may still commit; a retry with the same key then gets the stored answer.
		return nil, false, ctx.Err()
	}
}

func (b *AcceptBatcher) run() {
	defer b.wg.Done()
	collectBatches(b.queue, b.stop, b.maxBatch, b.commit)
}

const acceptRequestLockMany = `SELECT pg_try_advisory_xact_lock(hashtextextended(k, 0))
FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i) ORDER BY i`

// acceptRequestGetMany reads the keys' answers within their idempotency windows (since, see
// acceptRequestsAbsent).
const acceptRequestGetMany = `SELECT r.tenant, r.request_key, r.request_hash, r.response
FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS u(tenant, request_key, since)
CROSS JOIN LATERAL (SELECT * FROM accept_requests r WHERE r.tenant = u.tenant AND r.request_key = u.request_key
  AND r.created_at >= u.since ORDER BY r.created_at DESC LIMIT 1) AS r`

const acceptRequestPutMany = `INSERT INTO accept_requests (tenant, request_key, request_hash, response)
SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[])`

func acceptLockKey(tenant, key string) string {
	return strconv.Itoa(len(tenant)) + ":" + tenant + "/" + key
}

// commit records a batch in one transaction. If the shared transaction fails, each request is
// retried alone, so one bad request cannot fail its neighbours.
func (b *AcceptBatcher) commit(batch []*acceptCall) {
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.done <- acceptAnswer{err: err}
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		resp, replayed, err := b.store.RecordAccept(live[0].ctx, live[0].rec)
		live[0].done <- acceptAnswer{response: resp, replayed: replayed, err: err}
		return
	}
	ctx, span := context.Background(), tracing.NoSpan
	if links := tracing.Links(live, func(c *acceptCall) context.Context { return c.ctx }); len(links) > 0 {
		ctx, span = tracing.StartLinked("accept: group commit", links, trace.WithAttributes(tracing.BatchSize.Int(len(live))))
	}
	defer span.End()
	answers, err := b.commitShared(ctx, live)
	tracing.Fail(span, err)
	if err != nil {
		for _, c := range live {
			resp, replayed, err := b.store.RecordAccept(c.ctx, c.rec)
			c.done <- acceptAnswer{response: resp, replayed: replayed, err: err}
		}
		return
	}
	for i, c := range live {
		answers[i].commit = span.SpanContext()
		c.done <- answers[i]
	}
}

// commitShared writes the batch's requests as new in one round trip (newAccepts), the first of
// each key; a later one is in flight behind it. Only when the database refuses a key that is in
// flight elsewhere or recorded does the batch take commitChecked, at two more round trips.
func (b *AcceptBatcher) commitShared(ctx context.Context, calls []*acceptCall) ([]acceptAnswer, error) {
	answers := make([]acceptAnswer, len(calls))
	seen := map[string]bool{}
	recs := make([]commands.AcceptRecord, 0, len(calls))
	for i, c := range calls {
		k := acceptLockKey(c.rec.Tenant, c.rec.RequestKey)
		if seen[k] {
			answers[i] = acceptAnswer{err: commands.ErrRequestInFlight}
			continue
		}
		seen[k] = true
		answers[i] = acceptAnswer{response: c.rec.Response}
		recs = append(recs, c.rec)
	}
	w, err := b.store.newAccepts(ctx, recs)
	if err == nil {
		if err = w.send(ctx, b.store.pool); err == nil {
			return answers, nil
		}
		if !keyTaken(err) {
			return nil, errors.Join(errors.New("shared accept transaction"), err)
		}
	}
	// As in EventStore.RecordAccept: the checked path answers, as it did before the fast path.
	return b.commitChecked(ctx, calls)
}

// commitChecked records a batch after reading its keys.
func (b *AcceptBatcher) commitChecked(ctx context.Context, calls []*acceptCall) ([]acceptAnswer, error) {
	answers := make([]acceptAnswer, len(calls))
	lockKeys := make([]string, len(calls))
	tenants, keys := make([]string, len(calls)), make([]string, len(calls))
	for i, c := range calls {
		lockKeys[i] = acceptLockKey(c.rec.Tenant, c.rec.RequestKey)
		tenants[i], keys[i] = c.rec.Tenant, c.rec.RequestKey
	}
	// BEGIN, the locks and the read travel together; a row read counts only where its lock was
	// taken. The writes travel with COMMIT.
	type stored struct{ hash, response []byte }
	existing := map[string]stored{}
	var locked []bool
	reads := []*pgx.QueuedQuery{
		{SQL: acceptRequestLockMany, Arguments: []any{lockKeys}},
		{SQL: acceptRequestGetMany, Arguments: []any{tenants, keys, b.store.acceptSinces(tenants)}},
	}
	conn, err := beginWith(ctx, b.store.pool, reads, func(results pgx.BatchResults) error {
		rows, err := results.Query()
		if err != nil {
			return err
		}
		if locked, err = pgx.CollectRows(rows, pgx.RowTo[bool]); err != nil {
			return err
		}
		if rows, err = results.Query(); err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var tenant, key string
			var s stored
			if err := rows.Scan(&tenant, &key, &s.hash, &s.response); err != nil {
				return err
			}
			existing[acceptLockKey(tenant, key)] = s
		}
		return rows.Err()
	})
	if err != nil {
		return nil, errors.Join(errors.New("shared accept transaction"), err)
	}

	seen := map[string]bool{}
	var payloads payloadRows
	var newTenants, newKeys []string
	var newHashes, newResponses [][]byte
	var events = calls[0].rec.Events[:0:0]
	var outbox []commands.OutboxMessage
	for i, c := range calls {
		k := lockKeys[i]
		switch s, found := existing[k]; {
		case !locked[i] || seen[k]:
			// Another transaction, or an earlier request of this batch, holds the key.
			answers[i] = acceptAnswer{err: commands.ErrRequestInFlight}
		case found && string(s.hash) == string(c.rec.RequestHash):
			answers[i] = acceptAnswer{response: s.response, replayed: true}
		case found:
			answers[i] = acceptAnswer{err: commands.ErrRequestMismatch}
		default:
			apart, err := payloads.apart(c.rec)
			if err != nil {
				rollback(ctx, conn)
				return nil, errors.Join(errors.New("shared accept transaction"), err)
			}
			answers[i] = acceptAnswer{response: c.rec.Response}
			events = append(events, apart...)
			outbox = append(outbox, c.rec.Outbox...)
			newTenants = append(newTenants, c.rec.Tenant)
			newKeys = append(newKeys, c.rec.RequestKey)
			newHashes = append(newHashes, c.rec.RequestHash)
			newResponses = append(newResponses, c.rec.Response)
		}
		seen[k] = true
	}
	var w writeBatch
	var guarded []commands.AcceptRecord
	for i, c := range calls {
		if answers[i].err == nil && !answers[i].replayed {
			guarded = append(guarded, c.rec)
		}
	}
	queueGuard(ctx, &w, guarded)
	if err := errors.Join(appendEvents(ctx, &w, events), publishOutbox(ctx, &w, outbox)); err != nil {
		rollback(ctx, conn)
		return nil, errors.Join(errors.New("shared accept transaction"), err)
	}
	payloads.write(ctx, &w)
	if len(newKeys) > 0 {
		_, _ = w.Exec(ctx, acceptRequestPutMany, newTenants, newKeys, newHashes, newResponses)
	}
	if err := commitWith(ctx, conn, &w); err != nil {
		return nil, errors.Join(errors.New("shared accept transaction"), err)
	}
	return answers, nil
}

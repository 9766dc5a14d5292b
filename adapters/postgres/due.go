package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// dueUpsert records the latest due time of each delivery (migration due_work), never letting an
// older event's row replace a newer one's.
const dueUpsert = `INSERT INTO due_work (delivery_id, tenant, kind, due_at, version)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::int[])
ON CONFLICT (delivery_id) DO UPDATE SET tenant = EXCLUDED.tenant, kind = EXCLUDED.kind,
  due_at = EXCLUDED.due_at, version = EXCLUDED.version
WHERE due_work.version < EXCLUDED.version`

// writeDue queues the due rows of events on tx: every write of events goes through appendEvents,
// so a due time is in PostgreSQL exactly when the event that sets it is.
func writeDue(ctx context.Context, tx execer, events []domain.Event) error {
	latest := map[string]int{} // delivery → index into the columns
	var ids, tenants, kinds []string
	var ats []time.Time
	var versions []int32
	for _, e := range events {
		due, ok := domain.DueOf(e)
		if !ok {
			continue
		}
		if i, seen := latest[e.DeliveryID]; seen {
			// One statement may not touch a row twice: keep the stream's latest due time.
			if int(versions[i]) < e.Version {
				tenants[i], kinds[i], ats[i], versions[i] = e.Tenant, string(due.Kind), due.At, int32(e.Version)
			}
			continue
		}
		latest[e.DeliveryID] = len(ids)
		ids, tenants, kinds = append(ids, e.DeliveryID), append(tenants, e.Tenant), append(kinds, string(due.Kind))
		ats, versions = append(ats, due.At), append(versions, int32(e.Version))
	}
	if len(ids) == 0 {
		return nil
	}
	if len(ids) > 1 {
		// In delivery order, as eventColumnsOf orders the events: two writes lock rows in one
		// direction only.
		order := make([]int, len(ids))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(ids[a], ids[b]) })
		ids, tenants, kinds, ats, versions = permute(ids, order), permute(tenants, order), permute(kinds, order),
			permute(ats, order), permute(versions, order)
	}
	_, err := tx.Exec(ctx, dueUpsert, ids, tenants, kinds, ats, versions)
	return err
}

// permute returns xs in the order order gives.
func permute[T any](xs []T, order []int) []T {
	out := make([]T, len(xs))
	for i, j := range order {
		out[i] = xs[j]
	}
	return out
}

// dueTakeOne locks the earliest row due: a send at its time, a retry or deferral once sendBy's
// grace has passed too ($2). Rows another pass holds are skipped, not waited for, and so are
// those this round already failed on ($3).
const dueTakeOne = `SELECT delivery_id::text, tenant, kind, due_at, version FROM due_work
WHERE due_at <= $1 AND (kind = 'send' OR due_at <= $2) AND delivery_id <> ALL($3::uuid[])
ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED`

const dueDelete = `DELETE FROM due_work WHERE delivery_id = $1 AND version = $2`

// dueTakeMany locks up to $4 of the earliest rows due, as dueTakeOne does one.
const dueTakeMany = `SELECT delivery_id::text, tenant, kind, due_at, version FROM due_work
WHERE due_at <= $1 AND (kind = 'send' OR due_at <= $2) AND delivery_id <> ALL($3::uuid[])
ORDER BY due_at LIMIT $4 FOR UPDATE SKIP LOCKED`

const dueDeleteMany = `DELETE FROM due_work d USING unnest($1::uuid[], $2::int[]) AS r(id, version)
WHERE d.delivery_id = r.id AND d.version = r.version`

// dueTxRows is the most rows one transaction hands out. A transaction a row made the commit's
// flush the price of each scheduled send: a stream of sends falling due at a few hundred a second
// outran the pass (the schedule phase of ledger bench, docs/benchmarks.md). Many rows a
// transaction share one flush; a batch that cannot commit is taken again a row at a time, so
// one row's failure still leaves only that row.
const dueTxRows = 100

// dueRetireStale deletes, in one statement, up to $2 retry and deferral rows due by $1 whose
// delivery has recorded an event since the one that set them: the delayed copy came back (or the
// delivery moved on otherwise), so there is nothing to hand out. Under a sustained rate of
// deferrals most rows end this way, and one statement keeps the table small where a
// transaction per row could fall behind. Rows another pass holds are left to it.
const dueRetireStale = `DELETE FROM due_work WHERE delivery_id IN (
  SELECT d.delivery_id FROM due_work d
  WHERE d.due_at <= $1 AND d.kind <> 'send'
    AND EXISTS (SELECT 1 FROM events e WHERE e.delivery_id = d.delivery_id AND e.version = d.version + 1)
  LIMIT $2 FOR UPDATE SKIP LOCKED)`

// dueRetireBatch is the most stale rows one round deletes at once.
const dueRetireBatch = 5000

// DueStore hands out the due rows (commands.DueStore).
type DueStore struct {
	pool   *pgxpool.Pool
	events *EventStore
}

var _ commands.DueStore = (*DueStore)(nil)

// NewDueStore returns the due rows' store over pool.
func NewDueStore(pool *pgxpool.Pool) *DueStore {
	return &DueStore{pool: pool, events: NewEventStore(pool)}
}

// TakeDue implements commands.DueStore: stale retry and deferral rows are retired in one
// statement first (they would hand out nothing), then a transaction per batch of up to
// dueTxRows rows holds their locks while step decides each, and commits the decisions with the
// rows' deletion; a batch that cannot commit is taken again one row per transaction.
func (s *DueStore) TakeDue(ctx context.Context, sendBy, resendBy time.Time, limit int, step commands.DueStep) (int, error) {
	tag, err := s.pool.Exec(ctx, dueRetireStale, resendBy, dueRetireBatch)
	if err != nil {
		return 0, fmt.Errorf("retire stale due rows: %w", err)
	}
	retired := int(tag.RowsAffected())
	taken := 0
	failed := []string{}
	var errs []error
	for taken+len(failed) < limit {
		rows, handled, stepFailed, stepErrs, err := s.takeMany(ctx, sendBy, resendBy, failed, min(dueTxRows, limit-taken-len(failed)), step)
		if rows == 0 && err == nil {
			break
		}
		if err == nil {
			taken += handled
			failed, errs = append(failed, stepFailed...), append(errs, stepErrs...)
			continue
		}
		if ctx.Err() != nil {
			return retired + taken, ctx.Err()
		}
		// The batch did not commit (say a cancel took a delivery's next version first): take its
		// rows again one at a time, so that only the row that fails stays.
		for range max(rows, 1) {
			ok, id, err := s.takeOne(ctx, sendBy, resendBy, failed, step)
			if !ok && err == nil {
				break
			}
			if err != nil {
				if ctx.Err() != nil {
					return retired + taken, ctx.Err()
				}
				if id == "" {
					return retired + taken, err
				}
				failed = append(failed, id)
				errs = append(errs, err)
				continue
			}
			taken++
		}
	}
	return retired + taken, errors.Join(errs...)
}

// takeMany takes up to n of the earliest due rows in one transaction: step decides each, and
// what they call for commits with their deletion at once. A row whose step fails is left (its
// delivery in failed, with the error). It returns how many rows it read and how many of them it
// handled; an error (with nothing committed) means the batch as a whole could not commit.
func (s *DueStore) takeMany(ctx context.Context, sendBy, resendBy time.Time, skip []string, n int, step commands.DueStep) (rows, handled int, failed []string, errs []error, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, 0, nil, nil, fmt.Errorf("take due rows: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	read, err := tx.Query(ctx, dueTakeMany, sendBy, resendBy, slices.Clone(skip), n)
	if err != nil {
		return 0, 0, nil, nil, fmt.Errorf("take due rows: %w", err)
	}
	due, err := pgx.CollectRows(read, func(r pgx.CollectableRow) (commands.DueRow, error) {
		var row commands.DueRow
		var kind string
		err := r.Scan(&row.DeliveryID, &row.Tenant, &kind, &row.At, &row.Version)
		row.Kind, row.At = domain.DueKind(kind), row.At.UTC()
		return row, err
	})
	if err != nil {
		return 0, 0, nil, nil, fmt.Errorf("take due rows: %w", err)
	}
	if len(due) == 0 {
		return 0, 0, nil, nil, nil
	}
	ids := make([]string, len(due))
	for i, row := range due {
		ids[i] = row.DeliveryID
	}
	// The rows' streams in one query: a query a row was the pass's next limit after the commits.
	histories, err := s.events.LoadMany(ctx, ids)
	if err != nil {
		return 0, 0, nil, nil, fmt.Errorf("take due rows: %w", err)
	}
	for i := range due {
		due[i].History = histories[due[i].DeliveryID]
	}
	var events []domain.Event
	var outbox []commands.OutboxMessage
	var versions []int32
	ids = ids[:0]
	for _, row := range due {
		e, o, err := step(ctx, row)
		if err != nil {
			failed = append(failed, row.DeliveryID)
			errs = append(errs, fmt.Errorf("due %s of %s: %w", row.Kind, row.DeliveryID, err))
			continue
		}
		events, outbox = append(events, e...), append(outbox, o...)
		ids, versions = append(ids, row.DeliveryID), append(versions, int32(row.Version))
	}
	if len(ids) == 0 {
		return len(due), 0, failed, errs, nil
	}
	err = appendEvents(ctx, tx, events)
	if err == nil {
		err = publishOutbox(ctx, tx, outbox)
	}
	if err == nil {
		_, err = tx.Exec(ctx, dueDeleteMany, ids, versions)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return len(due), 0, nil, nil, fmt.Errorf("due rows of %d deliveries: %w", len(ids), err)
	}
	return len(due), len(ids), failed, errs, nil
}

// takeOne takes the earliest due row in a transaction of its own. It reports whether there was
// one, and on a failure the delivery it failed on ("" when no row was read).
func (s *DueStore) takeOne(ctx context.Context, sendBy, resendBy time.Time, skip []string, step commands.DueStep) (bool, string, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, "", fmt.Errorf("take due row: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	var row commands.DueRow
	var kind string
	err = tx.QueryRow(ctx, dueTakeOne, sendBy, resendBy, slices.Clone(skip)).Scan(&row.DeliveryID, &row.Tenant, &kind, &row.At, &row.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("take due row: %w", err)
	}
	row.Kind, row.At = domain.DueKind(kind), row.At.UTC()
	events, outbox, err := step(ctx, row)
	if err != nil {
		return true, row.DeliveryID, fmt.Errorf("due %s of %s: %w", row.Kind, row.DeliveryID, err)
	}
	err = appendEvents(ctx, tx, events)
	if err == nil {
		err = publishOutbox(ctx, tx, outbox)
	}
	if err == nil {
		_, err = tx.Exec(ctx, dueDelete, row.DeliveryID, row.Version)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil && len(events) > 0 {
		err = s.events.translate(ctx, err, events)
	}
	if err != nil {
		return true, row.DeliveryID, fmt.Errorf("due %s of %s: %w", row.Kind, row.DeliveryID, err)
	}
	return true, row.DeliveryID, nil
}

// eventsOfNotification lists a tenant's notification's deliveries (events_notification_of_stream).
const eventsOfNotification = `SELECT delivery_id::text FROM events
WHERE tenant = $1 AND data->>'notification_id' = $2 AND version = 1 ORDER BY delivery_id`

// DeliveriesOf implements commands.NotificationDeliveries.
func (s *EventStore) DeliveriesOf(ctx context.Context, tenant, notificationID string) ([]string, error) {
	rows, err := s.pool.Query(ctx, eventsOfNotification, tenant, notificationID)
	if err != nil {
		return nil, fmt.Errorf("deliveries of notification %s: %w", notificationID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("deliveries of notification %s: %w", notificationID, err)
	}
	if len(ids) == 0 {
		return nil, commands.ErrNotFound
	}
	return ids, nil
}

var _ commands.NotificationDeliveries = (*EventStore)(nil)

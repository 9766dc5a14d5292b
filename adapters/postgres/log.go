package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// LogRange selects the events recorded in [Since, Until). A zero bound is open.
type LogRange struct {
	Since time.Time
	Until time.Time
}

// The export is one statement, so one snapshot: every event committed when it starts, in log
// order. Unlike a follower it keeps no checkpoint, so it need not stop below the oldest running
// transaction (which, anywhere in the cluster, would hide events that have long committed).
// ORDER BY names the table's columns, not the text output column transaction_id. Accepted
// events come with their payload, as Load gives them: the payload of their notification and
// accept time (ledger_delivery_time, migration 0019, reads it from the delivery id).
const (
	eventsExport = eventsExportFrom + `
WHERE ($1::timestamptz IS NULL OR e.recorded_at >= $1)
  AND ($2::timestamptz IS NULL OR e.recorded_at < $2)
ORDER BY e.transaction_id, e.position`
	eventsCount = `SELECT count(*) FROM events
WHERE ($1::timestamptz IS NULL OR recorded_at >= $1)
  AND ($2::timestamptz IS NULL OR recorded_at < $2)`
)

// eventsExportFrom is the export's select list over the events table (or one partition of it,
// exportOf), with the accepted events' payloads put back.
const eventsExportFrom = `SELECT e.delivery_id::text, e.tenant, e.version, e.type, e.idempotency_key,
	CASE WHEN p.expired_at IS NOT NULL THEN e.data || jsonb_build_object('payload_expired', true, 'payload_size', p.size)
	     WHEN p.payload IS NULL THEN e.data
	     ELSE (e.data - 'payload_sha256') || jsonb_build_object('payload', p.payload) END,
	e.recorded_at, e.position, e.transaction_id::text
FROM events e LEFT JOIN notification_payloads p
	ON e.version = 1 AND e.data ? 'payload_sha256' AND p.notification_id = e.data->>'notification_id'
	AND p.accepted_at = ledger_delivery_time(e.delivery_id)`

// exportOf is the export of every event of one table shaped like events (a detached partition),
// in log order.
func exportOf(table string) string {
	return strings.Replace(eventsExportFrom, "FROM events e", "FROM "+table+" e", 1) + `
ORDER BY e.transaction_id, e.position`
}

// ExportLog calls fn for every event recorded in r and committed when the export starts, in log
// order. It streams: rows are decoded as they arrive, so the memory used does not grow with the
// range. An error from fn stops the export and is returned.
func (s *EventStore) ExportLog(ctx context.Context, r LogRange, fn func(projections.LoggedEvent) error) error {
	rows, err := s.pool.Query(ctx, eventsExport, nullTime(r.Since), nullTime(r.Until))
	if err != nil {
		return fmt.Errorf("export log: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		le, err := scanLogged(rows)
		if err != nil {
			return fmt.Errorf("export log: %w", err)
		}
		if err := fn(le); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("export log: %w", err)
	}
	return nil
}

// CountLog returns how many events were recorded in r (for an export's progress).
func (s *EventStore) CountLog(ctx context.Context, r LogRange) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, eventsCount, nullTime(r.Since), nullTime(r.Until)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count log: %w", err)
	}
	return n, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func scanLogged(rows pgx.CollectableRow) (projections.LoggedEvent, error) {
	var le projections.LoggedEvent
	var typ, txid string
	err := rows.Scan(&le.DeliveryID, &le.Tenant, &le.Version, &typ, &le.Key, &le.Data, &le.RecordedAt, &le.Position, &txid)
	if err != nil {
		return le, err
	}
	le.Key = keyLoaded(le.DeliveryID, le.Key)
	le.Type = domain.EventType(typ)
	le.RecordedAt = le.RecordedAt.UTC()
	le.At.Position = le.Position
	le.At.TransactionID, err = strconv.ParseUint(txid, 10, 64)
	return le, err
}

// NotifyWaker returns a channel that receives (coalesced) a signal whenever an appending
// transaction that wrote outbox messages commits. Followers of the log use it to wake before
// their poll interval; it is a hint, not a guarantee (appends without outbox messages do not
// signal), so they must still poll. The listener stops with ctx.
func NotifyWaker(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) <-chan struct{} {
	if logger == nil {
		logger = slog.Default()
	}
	return NewOutboxWaker(ctx, pool, logger).Subscribe(ctx)
}

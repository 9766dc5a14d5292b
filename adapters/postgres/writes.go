package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// execer runs a statement: a transaction does it at once, a writeBatch queues it.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// writeBatch collects the statements of one write (events, outbox rows, the relay's wake-up) and
// sends them in a single round trip. pgx ends a batch with one Sync, so PostgreSQL runs it as one
// implicit transaction: it all commits, or none of it does. A write that needs no answers from
// the database before it is complete costs one round trip instead of one per statement plus
// BEGIN and COMMIT, and at thousands of writes a second the round trips are most of the cost.
type writeBatch struct {
	batch pgx.Batch
}

var _ execer = (*writeBatch)(nil)

// Exec queues a statement; its result comes with send.
func (w *writeBatch) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	w.batch.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// send runs the queued statements as one transaction and returns the first error.
func (w *writeBatch) send(ctx context.Context, db interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}) error {
	n := w.batch.Len()
	if n == 0 {
		return nil
	}
	results := db.SendBatch(ctx, &w.batch)
	for i := range n {
		if _, err := results.Exec(); err != nil {
			_ = results.Close()
			return fmt.Errorf("statement %d of %d: %w", i+1, n, err)
		}
	}
	return results.Close()
}

var _ interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
} = (*pgxpool.Pool)(nil)

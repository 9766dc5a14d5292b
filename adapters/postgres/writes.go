package postgres

import (
	"context"
	"errors"
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
//
// A write's statements read no table (inserts of parameter arrays, pg_notify), so their plans
// cannot go stale as the tables grow: a writeBatch lets them reuse a generic plan (see
// planGenerically). Do not queue a statement that reads a table on one, but for the probes of
// a key that the accept's write makes (acceptRequestsAbsent, recipientsUnblocked): a generic
// plan of an equality on a unique index's key (the accept_requests partitions' primary key,
// suppressions_active) is that index's scan even on an empty table without statistics, where
// PostgreSQL assumes ten pages (checked by hand with force_generic_plan on PostgreSQL 15).
type writeBatch struct {
	batch pgx.Batch
}

var _ execer = (*writeBatch)(nil)

// planGenerically opens every writeBatch: for the rest of its transaction, a prepared statement
// may run on a generic plan once PostgreSQL has found one as good as planning each execution,
// which the pool's connections otherwise do (force_custom_plan, see Connect, which protects the
// lookups). Planning an insert of parameter arrays costs about as much as running it, so the
// batched writes skip it (figures: docs/benchmarks.md, "Figures once kept in code comments").
const planGenerically = `SET LOCAL plan_cache_mode = auto`

// Exec queues a statement; its result comes with send.
func (w *writeBatch) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if w.batch.Len() == 0 {
		w.batch.Queue(planGenerically)
	}
	w.batch.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// batchSender sends a pgx batch: a pool, a pooled connection or a transaction.
type batchSender interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// send runs the queued statements as one transaction and returns the first error.
func (w *writeBatch) send(ctx context.Context, db batchSender) error {
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

// beginWith opens a transaction on a pooled connection, sending BEGIN together with the
// transaction's reads; read consumes their results. Close the transaction with commitWith or
// rollback. With pgx.Tx, BEGIN and COMMIT would each cost a round trip of their own.
func beginWith(ctx context.Context, pool *pgxpool.Pool, reads []*pgx.QueuedQuery, read func(pgx.BatchResults) error) (*pgxpool.Conn, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.QueuedQueries = append(batch.QueuedQueries, reads...)
	results := conn.SendBatch(ctx, batch)
	_, err = results.Exec()
	if err == nil {
		err = read(results)
	}
	if err = errors.Join(err, results.Close()); err != nil {
		conn.Release() // the pool closes a connection left inside a transaction
		return nil, err
	}
	return conn, nil
}

// commitWith sends w's statements and COMMIT in one round trip and gives the connection back. If
// a statement fails, the statements after it, COMMIT included, are not run.
func commitWith(ctx context.Context, conn *pgxpool.Conn, w *writeBatch) error {
	defer conn.Release()
	_, _ = w.Exec(ctx, "COMMIT")
	return w.send(ctx, conn)
}

// rollback ends the transaction without writing and gives the connection back.
func rollback(ctx context.Context, conn *pgxpool.Conn) {
	_, _ = conn.Exec(ctx, "ROLLBACK")
	conn.Release()
}

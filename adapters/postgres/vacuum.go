package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// vacuumTables are the ledger's tables that are updated or deleted from in place, so that every
// change leaves a dead row version behind: the views the projector steps a delivery through
// (each event of a delivery moves its status row's state, which the view's indexes hold, so no
// update is HOT and each adds an entry to every index), the due times the due pass hands out and
// deletes, and the bookkeeping rows moved by every batch.
var vacuumTables = []string{
	"status_view",
	"dlq_view",
	"due_work",
	"counters_view",
	"projection_checkpoints",
	"watermill_offsets_ledger_outbox",
}

// Vacuum thresholds: a table is vacuumed when it holds at least vacuumMinDead dead row versions
// and at least vacuumFraction of its live ones, half of autovacuum's default scale (0.2): the
// status view's rows die young (a delivery's few updates come within a second of its accept), so
// a vacuum soon after finds the dead versions of a recent stretch of pages and lets the next
// accepts reuse the room.
const (
	vacuumMinDead  = 1000
	vacuumFraction = 0.1
)

// vacuumDead lists the tables (partitions, for a partitioned one) past the thresholds. Like
// statisticsStale it asks the statistics functions for the few tables directly.
const vacuumDead = `SELECT c.oid::regclass::text
FROM unnest($1::text[]) AS t(name)
JOIN pg_class p ON p.oid = to_regclass(t.name)
JOIN pg_class c ON c.oid = p.oid AND p.relkind = 'r'
  OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = p.oid) AND p.relkind = 'p'
WHERE pg_stat_get_dead_tuples(c.oid) >= $2
  AND pg_stat_get_dead_tuples(c.oid) >= $3 * pg_stat_get_live_tuples(c.oid)
ORDER BY pg_stat_get_dead_tuples(c.oid) DESC`

// VacuumDead runs VACUUM on the ledger's updated tables that hold many dead row versions (see
// vacuumTables), and returns their names.
//
// Autovacuum does this where it runs. Where it is off (some CI machines and managed set-ups
// turn it off) nothing would: the status view kept 350 bytes of heap and 320 of index entries a
// delivery for a row of about 180 bytes, each dead version and its index entries held until the
// partition left. Each VACUUM skips a table another one holds (SKIP_LOCKED: several processes
// run this, and the retention pass detaches partitions under the same lock level), and never
// truncates the table's end, which would take a lock that stops the projector's writes.
func VacuumDead(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	return vacuumDeadOf(ctx, pool, vacuumTables)
}

// vacuumDeadOf is VacuumDead over the tables named.
func vacuumDeadOf(ctx context.Context, pool *pgxpool.Pool, tables []string) ([]string, error) {
	rows, err := pool.Query(ctx, vacuumDead, tables, vacuumMinDead, vacuumFraction)
	if err != nil {
		return nil, fmt.Errorf("read dead row counts: %w", err)
	}
	dead, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read dead row counts: %w", err)
	}
	var vacuumed []string
	for _, table := range dead {
		// A regclass's text is the table's name, quoted and qualified as SQL needs it. VACUUM
		// runs outside a transaction block, as one statement.
		if _, err := pool.Exec(ctx, "VACUUM (SKIP_LOCKED, TRUNCATE false, INDEX_CLEANUP ON) "+table); err != nil {
			return vacuumed, fmt.Errorf("vacuum %s: %w", table, err)
		}
		vacuumed = append(vacuumed, table)
	}
	return vacuumed, nil
}

// KeepVacuumed runs VacuumDead at every interval until ctx ends.
func KeepVacuumed(ctx context.Context, pool *pgxpool.Pool, interval time.Duration, logger *slog.Logger) error {
	return every(ctx, interval, func() {
		vacuumed, err := VacuumDead(ctx, pool)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("vacuuming updated tables", "err", err)
		case len(vacuumed) > 0:
			logger.Debug("vacuumed tables", "tables", vacuumed)
		}
	})
}

package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statisticsTables are the tables whose plans depend on how many rows a key matches (a stream
// load by delivery ids, an accept-request lookup by keys, the relay's outbox read), with the
// columns those plans need: sampling only them keeps an ANALYZE cheap (the whole events table,
// with its jsonb payloads, took 0.6 s at 60,000 rows).
var statisticsTables = map[string]string{
	"events":                    "(delivery_id, idempotency_key, transaction_id)",
	"accept_requests":           "(tenant, request_key)",
	`"` + outboxTableName + `"`: "(shard, transaction_id)",
}

// Statistics thresholds: a table is analyzed again when it changed by as many rows as it holds
// (it doubled), far lazier than autovacuum (50 rows + 10 %). The number that matters, how many
// rows a key matches, is kept as a fraction of the table and scales with it; and every ANALYZE
// makes every connection re-read the table's statistics, which stalls loads when it runs often.
const (
	statisticsMinChanges = 1000
	statisticsFraction   = 1.0
)

// statisticsStale lists the tables changed by more than the thresholds since their last ANALYZE,
// whoever ran it (autovacuum included). It asks the statistics functions for the few tables
// directly: the pg_stat_user_tables view computes its figures for every table of the database
// first, which is slow in a database holding many schemas.
//
// A partitioned table (events, migration 0019) counts no changes of its own: its partitions do,
// and each is analyzed apart, with the columns of its table. The plans that matter read one
// partition or each in turn (a stream load prunes to its delivery's partition), and an ANALYZE
// of the parent would sample every partition again.
const statisticsStale = `SELECT c.oid::regclass::text, t.name
FROM unnest($1::text[]) AS t(name)
JOIN pg_class p ON p.oid = to_regclass(t.name)
JOIN pg_class c ON c.oid = p.oid AND p.relkind = 'r'
  OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = p.oid) AND p.relkind = 'p'
WHERE pg_stat_get_mod_since_analyze(c.oid) > $2
  AND pg_stat_get_mod_since_analyze(c.oid) >= $3 * pg_stat_get_live_tuples(c.oid)`

// AnalyzeStale runs ANALYZE on the ledger's hot tables that changed much since they were last
// analyzed (see statisticsFraction), and returns their names.
//
// The planner needs a table's statistics to know that a delivery id matches a handful of events:
// without them it assumes a fixed fraction of the table, and a load of 64 streams becomes a
// sequential scan of the whole events table, growing with the log, as does an accept-request lookup. Autovacuum keeps statistics where it runs; where it is
// off or has not yet woken (a new schema filling fast), nothing would.
func AnalyzeStale(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	return analyzeStale(ctx, pool, statisticsTables)
}

// analyzeStale is AnalyzeStale over the tables given, by name, with the columns to sample.
func analyzeStale(ctx context.Context, pool *pgxpool.Pool, statisticsTables map[string]string) ([]string, error) {
	names := make([]string, 0, len(statisticsTables))
	for name := range statisticsTables {
		names = append(names, name)
	}
	rows, err := pool.Query(ctx, statisticsStale, names, statisticsMinChanges, statisticsFraction)
	if err != nil {
		return nil, fmt.Errorf("read table statistics: %w", err)
	}
	type stale struct{ Table, Name string }
	tables, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stale])
	if err != nil {
		return nil, fmt.Errorf("read table statistics: %w", err)
	}
	if len(tables) == 0 {
		return nil, nil
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	// A small sample is enough to count the distinct values of a key: 3,000 rows instead of the
	// default 30,000, a tenth of the time. Each ANALYZE is a transaction of its own: it takes a
	// transaction id when it writes its statistics, and while that is open the gap-safe readers
	// (relay, projector) cannot read past it.
	if _, err := conn.Exec(ctx, "SET default_statistics_target = 10"); err != nil {
		return nil, err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "RESET default_statistics_target") }()
	var analyzed []string
	for _, t := range tables {
		// A regclass's text is the table's name, quoted and qualified as SQL needs it.
		if _, err := conn.Exec(ctx, "ANALYZE "+t.Table+" "+statisticsTables[t.Name]); err != nil {
			return analyzed, fmt.Errorf("analyze %s: %w", t.Table, err)
		}
		analyzed = append(analyzed, t.Table)
	}
	return analyzed, nil
}

// KeepStatistics runs AnalyzeStale at every interval until ctx ends.
func KeepStatistics(ctx context.Context, pool *pgxpool.Pool, interval time.Duration, logger *slog.Logger) error {
	return every(ctx, interval, func() {
		analyzed, err := AnalyzeStale(ctx, pool)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("keeping table statistics", "err", err)
		case len(analyzed) > 0:
			logger.Debug("analyzed tables", "tables", analyzed)
		}
	})
}

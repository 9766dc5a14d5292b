// Package postgres is the ledger's PostgreSQL adapter: the event store, the accept-request
// store, the transactional outbox and the schema migrations. SQL lives here and nowhere else;
// driver errors are translated into the errors of the commands package at this edge.
package postgres

import (
	"context"
	"fmt"

	"github.com/deliveryledger/ledger/tracing"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConnectOption adjusts the connections of a pool.
type ConnectOption func(*pgxpool.Config)

// AsyncCommit makes the pool's commits return before their WAL reaches the disk
// (synchronous_commit=off): a database crash can lose the last few hundred milliseconds of them,
// in commit order, and nothing else. Only for writes whose loss is harmless and which otherwise
// cost a disk flush each: the relay's outbox offsets (a lost advance republishes the batch, which
// consumers dedupe) and its queued records (a worker records a missing one when it takes the
// message). An outbox read also flushes: it locks the offset row, so every poll is a commit.
func AsyncCommit() ConnectOption {
	return func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["synchronous_commit"] = "off" }
}

// Connect opens a pool. A non-empty schema is put first on every connection's search_path, so
// that tests (and several deployments) can share one database.
func Connect(ctx context.Context, url, schema string, maxConns int32, opts ...ConnectOption) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	// Plan every execution of a prepared statement for the table as it is now. pgx prepares each
	// statement once per connection, and PostgreSQL switches a prepared statement to a generic
	// plan after five executions and keeps it until the table's statistics change. A plan made
	// while the ledger's tables were new and small is a sequential scan, and where nothing runs
	// ANALYZE (autovacuum off, or not yet woken) it stays one while the table grows, and every
	// stream load reads the whole table. A URL that sets plan_cache_mode wins.
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if tracing.Enabled() {
		cfg.ConnConfig.Tracer = tracing.DBTracer{}
	}
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("reach database: %w", err)
	}
	return pool, nil
}

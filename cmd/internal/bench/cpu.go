package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTimes is the CPU (user + system) spent so far by the benchmark's own process (the ledger
// under test, with the load generator and the sink: an upper bound for the ledger alone), by
// every PostgreSQL process and by every RabbitMQ (beam.smp) process of the machine.
type cpuTimes struct {
	self, postgres, rabbitmq time.Duration
}

func readCPU() cpuTimes {
	var c cpuTimes
	c.self, _ = procCPU("/proc/self/stat")
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		comm, t := procComm(f)
		switch comm {
		case "postgres":
			c.postgres += t
		case "beam.smp":
			c.rabbitmq += t
		}
	}
	return c
}

func procCPU(path string) (time.Duration, bool) {
	_, t := procComm(path)
	return t, t > 0
}

// procComm reads a process's name and its user + system time from its stat file.
func procComm(path string) (string, time.Duration) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0
	}
	fields := strings.Fields(s[end+1:]) // state is fields[0]: utime and stime are fields 11, 12
	if len(fields) < 13 {
		return "", 0
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return s[open+1 : end], time.Duration(u+st) * clockTick
}

// pgWork is what the benchmark's database has done so far, read at either end of a phase:
// its commits (pg_stat_database.xact_commit, read-only transactions and single statements
// included, as its backends have reported them, each at most once a second), the transactions
// that wrote (transaction ids handed out, from the snapshot's xmax: cluster-wide, and the phase
// runs alone), and the statements run in it (pg_stat_statements, when the server preloads it;
// transaction control left out).
type pgWork struct {
	commits, writes int64
	// statements is -1 when pg_stat_statements is not loaded; evictions counts the entries it
	// has dropped (a difference across an eviction undercounts, so it is not reported).
	statements, evictions int64
}

const pgWorkGet = `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
	pg_snapshot_xmax(pg_current_snapshot())::text::bigint`

// statementsGet reads pg_stat_statements in the schema its extension was created in (%[1]s).
const statementsGet = `SELECT coalesce(sum(calls), 0)::bigint, (SELECT dealloc FROM %[1]s.pg_stat_statements_info)
	FROM %[1]s.pg_stat_statements
	WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND query !~* '^\s*(begin|commit|rollback|start transaction|end)\M'`

// pgWorkSoFar reads pgWork. The statements are counted only where pg_stat_statements is
// preloaded (shared_preload_libraries; make bench sets it): the extension is created in the
// database if it is missing.
func pgWorkSoFar(ctx context.Context, pool *pgxpool.Pool) (pgWork, error) {
	w := pgWork{statements: -1}
	if err := pool.QueryRow(ctx, pgWorkGet).Scan(&w.commits, &w.writes); err != nil {
		return w, fmt.Errorf("database work so far: %w", err)
	}
	var loaded bool
	if err := pool.QueryRow(ctx, `SELECT 'pg_stat_statements' = ANY(string_to_array(current_setting('shared_preload_libraries'), ', '))
		OR 'pg_stat_statements' = ANY(string_to_array(current_setting('shared_preload_libraries'), ','))`).Scan(&loaded); err != nil || !loaded {
		return w, nil
	}
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public`); err != nil {
		return w, nil // not ours to install (no privilege): counted without statements
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension WHERE extname = 'pg_stat_statements'`).Scan(&schema); err != nil {
		return w, fmt.Errorf("statements so far: %w", err)
	}
	if err := pool.QueryRow(ctx, fmt.Sprintf(statementsGet, schema)).Scan(&w.statements, &w.evictions); err != nil {
		return w, fmt.Errorf("statements so far: %w", err)
	}
	return w, nil
}

// pgWorkPer is the work between from and to per delivery: commits, writing transactions and
// statements (negative when they could not be counted).
func pgWorkPer(from, to pgWork, deliveries int) (commits, writes, statements float64) {
	n := float64(deliveries)
	statements = -1
	if from.statements >= 0 && to.statements >= 0 && from.evictions == to.evictions {
		statements = float64(to.statements-from.statements) / n
	}
	return float64(to.commits-from.commits) / n, float64(to.writes-from.writes) / n, statements
}

// perDelivery records the CPU spent between from and to per delivery, in milliseconds, under
// phase in rep.CPUPerDelivery.
func perDelivery(rep *Report, phase string, from, to cpuTimes, deliveries int) map[string]float64 {
	if deliveries <= 0 {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(deliveries) }
	m := map[string]float64{
		"ledger_and_load": ms(to.self - from.self),
		"postgres":        ms(to.postgres - from.postgres),
		"rabbitmq":        ms(to.rabbitmq - from.rabbitmq),
	}
	m["total"] = m["ledger_and_load"] + m["postgres"] + m["rabbitmq"]
	for k, v := range m {
		rep.CPUPerDelivery[phase+"_"+k] = v
	}
	return m
}

// tablesBytesList lists the tables of a schema with what each keeps (table, indexes and TOAST). A
// partitioned table (the views, ...) is listed once with the sum of its partitions (its own size
// is zero), and its partitions are not listed apart; pg_partition_tree has no rows for a plain one.
const tablesBytesList = `SELECT c.relname,
	coalesce((SELECT sum(pg_total_relation_size(t.relid)) FROM pg_partition_tree(c.oid) t), pg_total_relation_size(c.oid))::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition`

// tableBytesGet is what one table keeps, its partitions' sum for a partitioned one.
const tableBytesGet = `SELECT coalesce((SELECT sum(pg_total_relation_size(t.relid)) FROM pg_partition_tree($1::regclass) t),
	pg_total_relation_size($1::regclass))::bigint`

// storagePerDelivery records what each table of schema keeps per delivery, in bytes (table,
// indexes and TOAST), in rep.BytesPerDelivery.
func storagePerDelivery(ctx context.Context, rep *Report, pool *pgxpool.Pool, schema string, deliveries int) error {
	if deliveries <= 0 {
		return nil
	}
	rows, err := pool.Query(ctx, tablesBytesList, schema)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			return err
		}
		if strings.HasPrefix(name, "watermill_offsets") || name == "schema_migrations" {
			continue
		}
		rep.BytesPerDelivery[name] = float64(size) / float64(deliveries)
	}
	return rows.Err()
}

// eventsBytesPerEvent is what the events table of schema keeps per event: "total"
// (pg_total_relation_size: the table, its TOAST and every index), "table" (the table and its
// TOAST, pg_table_size) and each index by name (pg_relation_size), in the order of the index
// names, each summed over the partitions. Every write of an event pays for each index: this says what each costs in bytes.
func eventsBytesPerEvent(ctx context.Context, pool *pgxpool.Pool, schema string) (events int64, sizes []namedSize, err error) {
	table := pgx.Identifier{schema, "events"}.Sanitize()
	var total, heap int64
	// A partitioned table's own sizes are nought: its partitions' are summed (pg_partition_tree).
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce((SELECT sum(pg_total_relation_size(relid))::bigint FROM pg_partition_tree($1::regclass)), pg_total_relation_size($1::regclass)),
		coalesce((SELECT sum(pg_table_size(relid))::bigint FROM pg_partition_tree($1::regclass)), pg_table_size($1::regclass)) FROM `+table,
		table).Scan(&events, &total, &heap); err != nil {
		return 0, nil, fmt.Errorf("size of %s: %w", table, err)
	}
	if events == 0 {
		return 0, nil, nil
	}
	sizes = []namedSize{{"total", float64(total) / float64(events)}, {"table", float64(heap) / float64(events)}}
	rows, err := pool.Query(ctx, `SELECT c.relname, coalesce((SELECT sum(pg_relation_size(relid))::bigint FROM pg_partition_tree(c.oid)), pg_relation_size(c.oid))
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass ORDER BY 1`, table)
	if err != nil {
		return 0, nil, fmt.Errorf("sizes of the indexes of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			return 0, nil, err
		}
		sizes = append(sizes, namedSize{name, float64(size) / float64(events)})
	}
	return events, sizes, rows.Err()
}

// namedSize is a size in bytes per something, with what it is of.
type namedSize struct {
	name  string
	bytes float64
}

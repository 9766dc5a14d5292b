package postgres_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/projections"
)

// eventsIndex is one index the events table may have: its definition (pg_indexes.indexdef
// without the schema) and what needs it. Every write of an event pays for each of them.
type eventsIndex struct {
	def string
	// why names the constraint or the queries (EventsQueries) that need the index.
	why string
	// queries must each plan a scan of the index.
	queries []string
}

// eventsIndexes is every index the events table may have (docs/design.md, "Indexes on events").
// An index lands only with an entry here that names the query or constraint that pays for it.
var eventsIndexes = map[string]eventsIndex{
	"events_log_order": {
		def: `CREATE INDEX events_log_order ON ONLY events USING btree (transaction_id, "position")`,
		why: "the log order that every follower reads (ReadLog: the projector; the views' lag and " +
			"pending counts); a Merge Append of one scan per partition since the table is partitioned " +
			"(0019). Not unique: position is a sequence's, and a unique index of a partitioned table " +
			"must hold the partition key, 16 bytes an entry no reader needs (0027)",
		queries: []string{"eventsReadLog", "checkpointLagGet", "tenantPendingGet"},
	},
	"events_stream_version_key": {
		def: `CREATE UNIQUE INDEX events_stream_version_key ON ONLY events USING btree (delivery_id, version)`,
		why: "the events' key (0027): one event per stream version, for optimistic concurrency; AppendEach's and the due pass's " +
			"version checks. The stream loads (Load, LoadMany, the views' stream reads) read this " +
			"index or events_idempotency_key_key, both led by the delivery id (0024): the planner's choice",
		queries: []string{"eventsTaken"},
	},
	"events_idempotency_key_key": {
		def: `CREATE UNIQUE INDEX events_idempotency_key_key ON ONLY events USING btree (delivery_id, idempotency_key)`,
		why: "idempotency: one event per operation key (every key names its delivery, the partition " +
			"key: 0019); translate's and answerConflicts' probes of the keys a failed write met",
		queries: []string{"eventsExistingKeys", "eventsTaken"},
	},
	"events_provider_operation": {
		def:     `CREATE INDEX events_provider_operation ON ONLY events USING btree (((data ->> 'provider'::text)), ((data ->> 'provider_operation_id'::text))) WHERE (type = 'delivery.provider_accepted'::text)`,
		why:     "FindOperation: a receipt or a lookup names the provider's message, not the delivery",
		queries: []string{"operationFind"},
	},
	"events_tenant_of_stream": {
		def: `CREATE UNIQUE INDEX events_tenant_of_stream ON ONLY events USING btree (delivery_id, tenant) WHERE (version = 1)`,
		why: "LoadOf: another tenant's id costs the probe an unknown one costs " +
			"(TestLoadOfDoesTheSameWorkForAForeignAndAnUnknownID); events_stream_version_key " +
			"would read the foreign stream's heap page to find its tenant",
		queries: []string{"eventsByDeliveryOf"},
	},
	"events_notification_of_stream": {
		def:     `CREATE INDEX events_notification_of_stream ON ONLY events USING btree (tenant, ((data ->> 'notification_id'::text))) WHERE (version = 1)`,
		why:     "DeliveriesOf: a notification's cancel, exact where the status view may lag",
		queries: []string{"eventsOfNotification"},
	},
}

// TestEventsIndexesAreTheJustifiedOnes: the events table has exactly the indexes of
// eventsIndexes, as defined there. A new index fails it until its entry says what needs it.
func TestEventsIndexesAreTheJustifiedOnes(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	rows, err := schema.Pool.Query(context.Background(),
		`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'events'`, schema.Name)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		// pgtest's schema names need no quotes.
		got[name] = strings.Replace(def, " ON ONLY "+schema.Name+".events ", " ON ONLY events ", 1)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for name, def := range got {
		want, ok := eventsIndexes[name]
		switch {
		case !ok:
			t.Errorf("index %s is not in eventsIndexes: say which query or constraint needs it, or drop it\n%s", name, def)
		case def != want.def:
			t.Errorf("index %s is\n\t%s\nwant\n\t%s", name, def, want.def)
		}
	}
	for name := range eventsIndexes {
		if _, ok := got[name]; !ok {
			t.Errorf("index %s of eventsIndexes is missing", name)
		}
	}
}

// eventsIndexesFill writes 2,000 deliveries' histories of four events each, an SMS's up to its
// provider's acceptance, in three tenants, and analyzes the table.
const eventsIndexesFill = `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
SELECT overlay(md5(i::text) placing lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0') || '7' from 1 for 13)::uuid, 't' || i % 3, v.version, v.type, '/' || v.key,
       CASE v.version WHEN 1 THEN jsonb_build_object('notification_id', 'n' || i, 'channel', 'sms')
                      WHEN 4 THEN jsonb_build_object('attempt', 1, 'provider', 'twilio', 'provider_operation_id', 'SM' || i)
                      ELSE '{"attempt": 1}' END,
       now()
FROM generate_series(1, 2000) AS i
CROSS JOIN (VALUES (1, 'delivery.accepted', 'accepted'), (2, 'delivery.queued', 'queued/1'),
  (3, 'delivery.attempt_started', 'attempt/1/started'), (4, 'delivery.provider_accepted', 'attempt/1/accepted')) AS v(version, type, key)`

// TestEventsQueriesUseTheirIndexes: each query that justifies an index in eventsIndexes plans a
// scan of it (sequential scans off: on a small table one would be as cheap). The log's readers
// read the primary key, which since migration 0018 is the log order itself.
func TestEventsQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	ctx := context.Background()
	if _, err := schema.Pool.Exec(ctx, eventsIndexesFill); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Pool.Exec(ctx, "ANALYZE events"); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := schema.Pool.QueryRow(ctx, `SELECT delivery_id::text FROM events WHERE version = 1 AND data->>'notification_id' = 'n1'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	key := "/accepted" // as stored (0024)
	args := map[string][]any{
		"eventsReadLog":        {"0", int64(0), 100},
		"checkpointLagGet":     {"status"},
		"tenantPendingGet":     {"status", "t1", 1000},
		"eventsByDelivery":     {id},
		"eventsByDeliveries":   {[]string{id}},
		"eventsExistingKeys":   {[]string{key}, []string{id}},
		"eventsTaken":          {[]string{id}, []int32{1}, []string{key}},
		"operationFind":        {"twilio", "SM1"},
		"eventsByDeliveryOf":   {id, "t1"},
		"eventsOfNotification": {"t1", "n1"},
	}
	// The partitions' indexes of each index of events (migration 0019 partitions the table).
	parts := map[string][]string{}
	rows, err := schema.Pool.Query(ctx, `SELECT p.relname, c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relnamespace = to_regnamespace($1) AND p.relkind = 'I'`, schema.Name)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var parent, child string
		if err := rows.Scan(&parent, &child); err != nil {
			t.Fatal(err)
		}
		parts[parent] = append(parts[parent], child)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for name, index := range eventsIndexes {
		for _, q := range index.queries {
			query, ok := postgres.EventsQueries[q]
			if !ok || args[q] == nil {
				t.Fatalf("%s: no query %s, or no arguments for it", name, q)
			}
			plan := explain(t, schema, query, args[q]...)
			if !slices.ContainsFunc(plan, func(line string) bool {
				// "Index Scan using NAME on events_p...", "Bitmap Index Scan on NAME  (cost...":
				// NAME is the index of a partition, attached to the index of events.
				return slices.ContainsFunc(parts[name], func(n string) bool {
					return strings.Contains(line, " using "+n+" ") || strings.Contains(line, " on "+n+" ")
				})
			}) {
				t.Errorf("%s does not scan %s:\n%s", q, name, strings.Join(plan, "\n"))
			}
		}
	}
}

// explain returns the lines of query's plan with args, with sequential scans off.
func explain(t *testing.T, schema *pgtest.Schema, query string, args ...any) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := schema.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("explain %.60s: %v", query, err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain %.60s: %v", query, err)
	}
	return plan
}

// TestTenantPendingReadsTheLogOrder: a tenant's read of a caught-up view counts its events past
// the checkpoint along the log order's key, sequential scans allowed: the planner cannot know
// the checkpoint, and without the query's ORDER BY it chose to read the whole table as soon as
// it guessed more of the tenant's events past it than MaxPending (here 40,000 events of two
// tenants; at 800,000 events of ten, the same).
func TestTenantPendingReadsTheLogOrder(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	ctx := context.Background()
	if _, err := schema.Pool.Exec(ctx, `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
		SELECT overlay(md5((g / 4)::text) placing lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0') || '7' from 1 for 13)::uuid, 't' || g % 2, g % 4 + 1, 'delivery.queued', g::text, '{"attempt": 1}', now()
		FROM generate_series(0, 39999) g`); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`UPDATE projection_checkpoints SET (transaction_id, position) =
			(SELECT transaction_id, position FROM events ORDER BY transaction_id DESC, position DESC LIMIT 1)`,
		`ANALYZE events`,
	} {
		if _, err := schema.Pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := schema.Pool.Query(ctx, "EXPLAIN "+postgres.EventsQueries["tenantPendingGet"], "status", "t1", projections.MaxPending)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(plan, "\n"); !strings.Contains(text, "_transaction_id_position_idx ") || strings.Contains(text, "Seq Scan on events") {
		t.Fatalf("the pending count does not read the log order's key:\n%s", text)
	}
}

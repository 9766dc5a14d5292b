package postgres_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// TestAnalyzeStaleKeepsTheStreamLoadOnTheIndex: with no statistics the planner reads the whole
// events table to load a few dozen streams; once AnalyzeStale has run (as the ledger does every
// few seconds where autovacuum does not), the same load uses the index.
func TestAnalyzeStaleKeepsTheStreamLoadOnTheIndex(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	ctx := context.Background()
	if _, err := schema.Pool.Exec(ctx, `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
		SELECT overlay(md5((g / 4)::text) placing lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0') || '7' from 1 for 13)::uuid, 't', g % 4 + 1, 'delivery.accepted', g::text, '{}', now() FROM generate_series(0, 39999) g`); err != nil {
		t.Fatal(err)
	}
	// The plan of a load of 64 streams, with the ids written out as the ledger's custom plans
	// see them.
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	plan := func() string {
		var out string
		rows, err := schema.Pool.Query(ctx, `EXPLAIN SELECT * FROM events WHERE delivery_id = ANY ('{`+strings.Join(ids, ",")+`}'::uuid[]) ORDER BY delivery_id, version`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			out += line + "\n"
		}
		return out
	}
	before := plan()
	// Table statistics reach pg_stat_user_tables when the writing backend reports them (within
	// seconds): look until the insert shows.
	var analyzed []string
	// events is partitioned (migration 0019): its partitions are analyzed, each apart.
	partition := func(name string) bool { return strings.HasPrefix(name, "events_p") }
	for deadline := time.Now().Add(20 * time.Second); !slices.ContainsFunc(analyzed, partition); time.Sleep(200 * time.Millisecond) {
		var err error
		if analyzed, err = postgres.AnalyzeStale(ctx, schema.Pool); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("analyzed %v, want a partition of events among them", analyzed)
		}
	}
	after := plan()
	// The index of each partition is named after its columns. Two lead with the delivery id (the
	// stream version's and, since 0024, the idempotency key's): either serves the load.
	byDelivery := func(plan string) bool {
		return strings.Contains(plan, "_delivery_id_version_key") || strings.Contains(plan, "_delivery_id_idempotency_key_key")
	}
	if byDelivery(before) {
		t.Fatalf("without statistics the load already uses an index of the delivery id; the test shows nothing:\n%.300s", before)
	}
	if !byDelivery(after) {
		t.Fatalf("after ANALYZE the load does not use an index of the delivery id:\n%.300s", after)
	}
}

// TestAnalyzeStaleCountsThePartitions: a partitioned table's own statistics counters stay at zero;
// AnalyzeStale finds its partitions stale by their own changes and analyzes each.
func TestAnalyzeStaleCountsThePartitions(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`CREATE TABLE things (id uuid NOT NULL, n int NOT NULL) PARTITION BY RANGE (id)`,
		`CREATE TABLE things_a PARTITION OF things FOR VALUES FROM (MINVALUE) TO ('80000000-0000-0000-0000-000000000000')`,
		`CREATE TABLE things_b PARTITION OF things FOR VALUES FROM ('80000000-0000-0000-0000-000000000000') TO (MAXVALUE)`,
		`INSERT INTO things SELECT md5(g::text)::uuid, g FROM generate_series(1, 5000) g`,
	} {
		if _, err := schema.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	tables := map[string]string{"things": "(id)"}
	var analyzed []string
	// A partitioned table is analyzed partition by partition (each counts its own changes).
	for deadline := time.Now().Add(20 * time.Second); !slices.Contains(analyzed, `things_a`) || !slices.Contains(analyzed, `things_b`); time.Sleep(200 * time.Millisecond) {
		var err error
		if analyzed, err = postgres.AnalyzeStaleOf(ctx, schema.Pool, tables); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("analyzed %v, want things_a and things_b", analyzed)
		}
	}
}

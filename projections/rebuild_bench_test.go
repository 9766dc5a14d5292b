package projections_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/projections"
)

// benchDeliveries is how many deliveries the rebuild measurement generates: 4.45 events each on
// average, so a little over a million events.
const benchDeliveries = 225_000

// benchScripts are the lifecycles of the generated deliveries, by d % 100: 70% delivered at the
// first attempt, 15% after one retry, 10% dead (permanent failure), 5% unknown. Each step is
// (version, type, data); the data follows the domain's event types, so the projections decode
// and fold it like real history.
const benchGenerate = `
WITH steps(script, version, type) AS (VALUES
	('A', 1, 'delivery.accepted'), ('A', 2, 'delivery.queued'), ('A', 3, 'delivery.attempt_started'), ('A', 4, 'delivery.delivered'),
	('B', 1, 'delivery.accepted'), ('B', 2, 'delivery.queued'), ('B', 3, 'delivery.attempt_started'), ('B', 4, 'delivery.retry_scheduled'),
	('B', 5, 'delivery.queued'), ('B', 6, 'delivery.attempt_started'), ('B', 7, 'delivery.delivered'),
	('C', 1, 'delivery.accepted'), ('C', 2, 'delivery.queued'), ('C', 3, 'delivery.attempt_started'), ('C', 4, 'delivery.dead_lettered'),
	('D', 1, 'delivery.accepted'), ('D', 2, 'delivery.queued'), ('D', 3, 'delivery.attempt_started'), ('D', 4, 'delivery.outcome_unknown')
),
deliveries AS (
	SELECT d, overlay(md5('bench-delivery-' || d) placing lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0') || '7' from 1 for 13)::uuid AS id,
		CASE WHEN d % 100 < 70 THEN 'A' WHEN d % 100 < 85 THEN 'B' WHEN d % 100 < 95 THEN 'C' ELSE 'D' END AS script,
		timestamptz '2026-01-01 00:00:00+00' + d * interval '10 milliseconds' AS t0
	FROM generate_series($1::int, $2::int) AS d
)
INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
SELECT x.id, 'tenant-' || (x.d % 10), s.version, s.type,
	CASE s.type
		WHEN 'delivery.accepted' THEN '/accepted'
		WHEN 'delivery.queued' THEN '/queued/' || (s.version / 3 + 1)
		WHEN 'delivery.attempt_started' THEN '/attempt/' || (s.version / 3) || '/started'
		ELSE '/attempt/' || (s.version / 3) || '/outcome' END,
	CASE s.type
		WHEN 'delivery.accepted' THEN jsonb_build_object(
			'notification_id', md5('bench-notification-' || x.d)::uuid,
			'channel', CASE WHEN x.d % 7 = 0 THEN 'sms' ELSE 'webhook' END,
			'recipient', 'https://r' || (x.d % 50) || '.example.com/hook',
			'payload', jsonb_build_object('order', x.d, 'text', 'your parcel is on its way'),
			'priority', (ARRAY['normal', 'normal', 'high', 'low'])[x.d % 4 + 1],
			'max_attempts', 3, 'idempotency_key', 'req-' || x.d)
		WHEN 'delivery.queued' THEN jsonb_build_object('attempt', s.version / 3 + 1)
		WHEN 'delivery.attempt_started' THEN jsonb_build_object('attempt', s.version / 3, 'provider', 'webhook')
		WHEN 'delivery.delivered' THEN jsonb_build_object('attempt', s.version / 3, 'provider', 'webhook',
			'status_code', 200, 'latency_ms', 12.5, 'provider_operation_id', 'op-' || x.d)
		WHEN 'delivery.retry_scheduled' THEN jsonb_build_object('attempt', 1, 'provider', 'webhook',
			'error_class', 'transient', 'error', 'service unavailable', 'status_code', 503, 'latency_ms', 30.1,
			'next_attempt_at', to_char((x.t0 + interval '35 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
		WHEN 'delivery.dead_lettered' THEN jsonb_build_object('attempt', 1, 'provider', 'webhook',
			'error_class', 'permanent', 'error', 'no such hook', 'status_code', 404, 'latency_ms', 8.2)
		ELSE jsonb_build_object('attempt', 1, 'provider', 'webhook', 'error_class', 'unknown',
			'error', 'timeout after the request was written', 'latency_ms', 10000)
	END,
	x.t0 + s.version * interval '1 second'
FROM deliveries x JOIN steps s ON s.script = x.script
-- Streams interleave as they would in real traffic: a thousand deliveries move together.
ORDER BY x.d / 1000, s.version, x.d`

// TestRebuildThroughput measures a rebuild of each view on a log of a million events, next to a
// raw INSERT ... SELECT of the same rows. It takes minutes, so it runs only when
// LEDGER_REBUILD_BENCH=1:
//
//	LEDGER_REBUILD_BENCH=1 go test ./projections -run TestRebuildThroughput -v -timeout 30m
func TestRebuildThroughput(t *testing.T) {
	if os.Getenv("LEDGER_REBUILD_BENCH") != "1" {
		t.Skip("set LEDGER_REBUILD_BENCH=1 to measure rebuild throughput on a million events")
	}
	b := setup(t)
	ctx := context.Background()
	deliveries := benchDeliveries
	if v, err := strconv.Atoi(os.Getenv("LEDGER_REBUILD_BENCH_DELIVERIES")); err == nil && v > 0 {
		deliveries = v
	}

	// Ten transactions, so the log has several transaction ids.
	start := time.Now()
	const parts = 10
	for i := range parts {
		from, to := i*deliveries/parts+1, (i+1)*deliveries/parts
		if _, err := b.pool.Exec(ctx, benchGenerate, from, to); err != nil {
			t.Fatal(err)
		}
	}
	generated := time.Since(start)
	total := b.totalEvents(t)
	if _, err := b.pool.Exec(ctx, `VACUUM ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	report := func(what string, n int, d time.Duration) {
		t.Logf("%-58s %9d rows in %8s = %9.0f rows/s", what, n, d.Round(time.Millisecond), float64(n)/d.Seconds())
	}
	report("generate the log (INSERT ... SELECT generate_series, indexed)", total, generated)

	// The baseline: the same rows copied by the database alone into a plain table.
	if _, err := b.pool.Exec(ctx, `CREATE TABLE events_copy (LIKE events)`); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := b.pool.Exec(ctx, `INSERT INTO events_copy SELECT * FROM events`); err != nil {
		t.Fatal(err)
	}
	report("raw INSERT ... SELECT of the log into a plain table", total, time.Since(start))

	for _, p := range projections.All() {
		res, err := projections.Rebuild(ctx, b.views, b.store, p, projections.RebuildConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Applied != int64(total) {
			t.Fatalf("rebuild %s applied %d of %d events", p.Name(), res.Applied, total)
		}
		report(fmt.Sprintf("rebuild %s (batches of %d, switch %s)", p.Name(), projections.DefaultRebuildBatchSize,
			res.SwitchDuration.Round(time.Millisecond)), total, res.Elapsed)
	}
	for _, p := range projections.All() {
		start = time.Now()
		res, err := projections.Verify(ctx, b.views, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Total != 0 {
			t.Fatalf("verify %s: %d differences, first %v", p.Name(), res.Total, res.Differences[0])
		}
		report("verify "+p.Name(), total, time.Since(start))
	}
	t.Logf("deliveries %d, status rows %d, dlq rows %d", deliveries,
		b.count(t, `SELECT count(*) FROM status_view`), b.count(t, `SELECT count(*) FROM dlq_view`))
}

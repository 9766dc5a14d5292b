package postgres_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// TestVacuumDeadVacuumsTheSteppedStatusRows: the projector steps each status row through a few
// states within a second of its accept, and every step leaves a dead version and a dead entry
// in each of the view's indexes. Where autovacuum is off (this machine) nothing else vacuums
// them; VacuumDead does, for the partitions with many dead versions only, and the room is used
// again: a second stretch of the same work grows the partition less than the first.
func TestVacuumDeadVacuumsTheSteppedStatusRows(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	ctx := context.Background()
	exec := func(q string) {
		t.Helper()
		if _, err := schema.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	// 3,000 deliveries accepted in the current second's partition, each stepped to queued, then
	// to delivered, one statement per step as the projector's batches do.
	// Both rounds' ids carry the same accept time, so they land in one partition.
	at := strconv.FormatInt(time.Now().UnixMilli(), 16)
	round := func(from int) {
		exec(`INSERT INTO status_view (id, tenant, notification_id, channel, recipient, priority, state, version,
			attempts, max_attempts, provider, provider_operation_id, last_error_class, last_error, last_status_code,
			idempotency_key, accepted_at, updated_at)
		SELECT overlay(md5(g::text) placing lpad('` + at + `', 12, '0') || '7' from 1 for 13)::uuid,
			't', 'n' || g, 'webhook', 'http://127.0.0.1:9/hook', 'normal', 'accepted', 1, 0, 10, '', '', '', '', 0,
			'k' || g, now(), now()
		FROM generate_series(` + strconv.Itoa(from) + `, ` + strconv.Itoa(from+2999) + `) g`)
		exec(`UPDATE status_view SET state = 'queued', version = 2, updated_at = now() WHERE state = 'accepted'`)
		exec(`UPDATE status_view SET state = 'delivered', version = 3, terminal_at = now(), updated_at = now() WHERE state = 'queued'`)
	}
	round(0)
	var partition string
	if err := schema.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM status_view LIMIT 1`).Scan(&partition); err != nil {
		t.Fatal(err)
	}
	// The writers' statistics reach the counters within a second or so: look until the dead
	// versions show.
	var vacuumed []string
	for deadline := time.Now().Add(20 * time.Second); !slices.Contains(vacuumed, partition); time.Sleep(200 * time.Millisecond) {
		var err error
		if vacuumed, err = postgres.VacuumDead(ctx, schema.Pool); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("vacuumed %v, want the status view's partition %s among them", vacuumed, partition)
		}
	}
	for _, name := range vacuumed {
		if !strings.Contains(name, "status_view") {
			t.Errorf("vacuumed %s, which holds no dead versions to speak of", name)
		}
	}
	var count, dead int64
	if err := schema.Pool.QueryRow(ctx, `SELECT pg_stat_get_vacuum_count($1::regclass), pg_stat_get_dead_tuples($1::regclass)`, partition).Scan(&count, &dead); err != nil {
		t.Fatal(err)
	}
	if count < 1 || dead != 0 {
		t.Fatalf("%s: %d vacuums, %d dead versions after VacuumDead; want at least one and none", partition, count, dead)
	}
	// Nothing is left to vacuum: a second call at once does nothing.
	if again, err := postgres.VacuumDead(ctx, schema.Pool); err != nil || len(again) != 0 {
		t.Fatalf("a second VacuumDead vacuumed %v (%v); want nothing", again, err)
	}
	size := func() int64 {
		var n int64
		if err := schema.Pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, partition).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	first := size()
	round(3000)
	grew := size() - first
	t.Logf("%s: %d bytes after the first round, %d more after the second", partition, first, grew)
	// The first round left 3,000 live rows and 6,000 dead versions, and their index entries;
	// once vacuumed, the dead ones' room takes much of the second round's. Without the vacuum
	// the second round grew the partition by 96 % of the first's size here, with it by 55 %.
	if grew*4 > first*3 {
		t.Fatalf("the second round grew %s from %d to %d bytes: the vacuumed room was not used again", partition, first, first+grew)
	}
}

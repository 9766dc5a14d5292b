package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// TestEnsurePartitionsCoversTheClockAhead: partitions of a table keyed by delivery id are cut on
// multiples of the width from the last one's upper bound, cover now plus ahead, take a row of
// each time into the partition of that time, and a second round creates nothing.
func TestEnsurePartitionsCoversTheClockAhead(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE things (id uuid NOT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id)`); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 10, 0, 7, 0, time.UTC)
	tables := []postgres.PartitionedTable{{Name: "things", Key: postgres.KeyDeliveryID}}
	cfg := postgres.PartitionConfig{Width: 10 * time.Second, Ahead: 25 * time.Second}
	created, err := postgres.EnsurePartitionsOf(ctx, db.Pool, tables, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	// [10:00:00, 10:00:10), ..., up to one that reaches past 10:00:32.
	if len(created) != 4 || !created[0].From.Equal(now.Truncate(10*time.Second)) || !created[3].To.Equal(now.Truncate(10*time.Second).Add(40*time.Second)) {
		t.Fatalf("created %+v", created)
	}
	again, err := postgres.EnsurePartitionsOf(ctx, db.Pool, tables, cfg, now)
	if err != nil || len(again) != 0 {
		t.Fatalf("second round created %+v (%v)", again, err)
	}
	at := now.Add(15 * time.Second)
	id := postgres.UUIDv7Floor(at)[:14] + "7abc-8def-0123456789ab"
	if _, err := db.Pool.Exec(ctx, `INSERT INTO things (id) VALUES ($1)`, id); err != nil {
		t.Fatal(err)
	}
	var part string
	if err := db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM things`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if want := created[2].Name; part != want {
		t.Fatalf("row of %s went to %s, want %s", at, part, want)
	}
	if got, ok := postgres.UUIDv7Time(id); !ok || !got.Equal(at) {
		t.Fatalf("UUIDv7Time(%s) = %s, %v", id, got, ok)
	}
	listed, err := postgres.Partitions(ctx, db.Pool, "things")
	if err != nil || len(listed) != 4 || listed[1] != created[1] {
		t.Fatalf("listed %+v (%v)", listed, err)
	}
	// A later round continues from the last bound.
	later, err := postgres.EnsurePartitionsOf(ctx, db.Pool, tables, cfg, now.Add(20*time.Second))
	if err != nil || len(later) != 2 || !later[0].From.Equal(created[3].To) {
		t.Fatalf("later round created %+v (%v)", later, err)
	}
}

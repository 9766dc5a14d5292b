package amqp_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// secondWideOutbox replaces a fresh schema's outbox partitions (empty) by second-wide ones from
// now's boundary, so that a test crosses several.
func secondWideOutbox(t *testing.T, schema *pgtest.Schema) {
	t.Helper()
	ctx := context.Background()
	table := "watermill_" + postgres.OutboxTopicOf(0)
	parts, err := postgres.Partitions(ctx, schema.Pool, table)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if _, err := schema.Pool.Exec(ctx, `DROP TABLE `+p.Name); err != nil {
			t.Fatal(err)
		}
	}
	tables := []postgres.PartitionedTable{{Name: table, Key: postgres.KeyTimestamp, Width: time.Second}}
	if _, err := postgres.EnsurePartitionsOf(ctx, schema.Pool, tables, postgres.PartitionConfig{Width: time.Second, Ahead: 30 * time.Second}, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// TestRelayAcrossRotatedOutboxPartitions: rows written across several second-wide outbox
// partitions, while the rotation drops the partitions the relay has passed and the broker is cut
// for 1.5 s (the rows of that time wait in partitions the clock leaves), all reach the queue, in
// the order written, and the outbox ends with no rows and no partition of the past.
func TestRelayAcrossRotatedOutboxPartitions(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	secondWideOutbox(t, schema)
	store := postgres.NewEventStore(schema.Pool)
	queue := declareQueue(t)
	proxy := newBrokerProxy(t)
	startRelay(t, schema, proxy.Rewrite(amqptest.URL()), nil, nil)
	ctx := context.Background()

	var ids []string
	dropped := 0
	start := time.Now()
	cut := false
	for i := 0; time.Since(start) < 3500*time.Millisecond && i < 100; i++ {
		switch since := time.Since(start); {
		case !cut && since > 500*time.Millisecond && since < 2*time.Second:
			proxy.Cut()
			cut = true
		case cut && since > 2*time.Second:
			proxy.Restore()
			cut = false
		}
		ids = append(ids, appendOutbox(t, store, queue, nil, 5, len(ids))...)
		d, err := postgres.RotateOutbox(ctx, schema.Pool)
		if err != nil {
			t.Logf("rotation: %v", err)
		}
		dropped += len(d)
		time.Sleep(150 * time.Millisecond) // spreads the writes over the partitions of 3.5 s
	}
	proxy.Restore()
	conn := amqptest.Dial(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		d, err := postgres.RotateOutbox(ctx, schema.Pool)
		if err != nil {
			t.Logf("rotation: %v", err)
		}
		dropped += len(d)
		var rows, past int
		if err := schema.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM watermill_ledger_outbox),
			(SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			 WHERE i.inhparent = 'watermill_ledger_outbox'::regclass
			 AND split_part(c.relname, '_', 5)::bigint <= extract(epoch FROM clock_timestamp()))`).Scan(&rows, &past); err != nil {
			t.Fatal(err)
		}
		if rows == 0 && past == 0 && amqptest.QueueDepth(t, conn, queue) >= len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15 s: %d outbox rows, %d partitions of the past, %d of %d messages queued",
				rows, past, amqptest.QueueDepth(t, conn, queue), len(ids))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if dropped < 3 {
		t.Fatalf("the rotation dropped %d partitions over 3.5 s of second-wide ones, want 3 or more", dropped)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var got []string
	seen := map[string]bool{}
	for range 2 * len(ids) {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		var body struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(d.Body, &body); err != nil {
			t.Fatal(err)
		}
		if !seen[body.ID] { // at-least-once: a batch cut mid-way is published again
			got = append(got, body.ID)
			seen[body.ID] = true
		}
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("the queue holds %d distinct messages, want the %d written, in order", len(got), len(ids))
	}
}

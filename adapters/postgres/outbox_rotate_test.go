package postgres_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
)

// outboxTable is the outbox's table, every shard's rows.
var outboxTable = "watermill_" + postgres.OutboxTopic

// outboxOfWidth replaces a fresh schema's outbox partitions (empty) by partitions of width, from
// now's boundary, so that a test crosses several in seconds.
func outboxOfWidth(t *testing.T, db *pgtest.Schema, width time.Duration) {
	t.Helper()
	ctx := context.Background()
	parts, err := postgres.Partitions(ctx, db.Pool, outboxTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if _, err := db.Pool.Exec(ctx, `DROP TABLE `+p.Name); err != nil {
			t.Fatal(err)
		}
	}
	keepOutboxAhead(t, db, width)
}

// keepOutboxAhead creates the outbox partitions of width the next seconds need.
func keepOutboxAhead(t *testing.T, db *pgtest.Schema, width time.Duration) {
	t.Helper()
	tables := []postgres.PartitionedTable{{Name: outboxTable, Key: postgres.KeyTimestamp, Width: width}}
	if _, err := postgres.EnsurePartitionsOf(context.Background(), db.Pool, tables,
		postgres.PartitionConfig{Width: width, Ahead: 20 * width}, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// relayed is what a running outbox subscriber has handed out, in order: the inner message ids of
// the forwarder's envelopes (or the row's uuid for a row that is no envelope).
type relayed struct {
	mu  sync.Mutex
	ids []string
}

func (r *relayed) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// subscribeOutbox runs the relay's outbox subscriber under consumer group "relay", acking every
// message, until the test ends.
func subscribeOutbox(t *testing.T, db *pgtest.Schema) *relayed {
	t.Helper()
	return subscribeOutboxShard(t, db, 0, nil)
}

// subscribeOutboxShard is subscribeOutbox for one shard, woken by waker (nil: its own).
func subscribeOutboxShard(t *testing.T, db *pgtest.Schema, shard int, waker *postgres.OutboxWaker) *relayed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	sub, err := postgres.NewOutboxSubscriber(ctx, db.Pool, postgres.OutboxSubscriberConfig{ConsumerGroup: "relay", Shard: shard,
		Waker: waker, Logger: logger}, watermill.NopLogger{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	msgs, err := sub.Subscribe(ctx, postgres.OutboxTopicOf(shard))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &relayed{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			var envelope struct {
				UUID string `json:"uuid"`
			}
			id := m.UUID
			if json.Unmarshal(m.Payload, &envelope) == nil && envelope.UUID != "" {
				id = envelope.UUID
			}
			r.mu.Lock()
			r.ids = append(r.ids, id)
			r.mu.Unlock()
			m.Ack()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = sub.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("outbox subscriber did not stop")
		}
	})
	return r
}

// appendMessage appends a new delivery's events with one outbox message and returns its id.
func appendMessage(t *testing.T, b *storeBundle) string {
	t.Helper()
	_, events := acceptedEvents(t)
	msg := commands.OutboxMessage{ID: uuid.NewString(), Topic: "ledger.webhook", PartitionKey: events[0].DeliveryID, Payload: []byte(`{}`)}
	if err := b.store.Append(context.Background(), events, []commands.OutboxMessage{msg}); err != nil {
		t.Fatal(err)
	}
	return msg.ID
}

// appendOldMessage writes an outbox row as a writer of before the shards did (the schema below
// migration 0026 has no shard column), and returns the enveloped message's id.
func appendOldMessage(t *testing.T, db *pgtest.Schema) string {
	t.Helper()
	id := uuid.NewString()
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO `+outboxTable+` (uuid, payload, metadata, transaction_id)
		VALUES (gen_random_uuid()::text, json_build_object('uuid', $1::text, 'destination_topic', 'ledger.webhook'), '{}', pg_current_xact_id())`, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// outboxRows counts the outbox's rows.
func outboxRows(t *testing.T, db *pgtest.Schema) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+outboxTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// pastPartitions lists the outbox partitions whose upper bound the server's clock has passed.
func pastPartitions(t *testing.T, db *pgtest.Schema) []string {
	t.Helper()
	parts, err := postgres.Partitions(context.Background(), db.Pool, outboxTable)
	if err != nil {
		t.Fatal(err)
	}
	var clock time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT clock_timestamp() AT TIME ZONE 'UTC'`).Scan(&clock); err != nil {
		t.Fatal(err)
	}
	var past []string
	for _, p := range parts {
		if !p.To.After(clock) {
			past = append(past, p.Name)
		}
	}
	return past
}

// rotateUntil rotates the outbox until done says so, failing the test after timeout; it returns
// every partition dropped. A round that fails (another test's transaction held the cluster's
// horizon back too long) is tried again.
func rotateUntil(t *testing.T, db *pgtest.Schema, timeout time.Duration, done func() bool) []postgres.Partition {
	t.Helper()
	var dropped []postgres.Partition
	deadline := time.Now().Add(timeout)
	for {
		d, err := postgres.RotateOutbox(context.Background(), db.Pool)
		if err != nil {
			t.Logf("rotation: %v", err)
		}
		dropped = append(dropped, d...)
		if done() {
			return dropped
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotation not done after %s; dropped %v", timeout, dropped)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOutboxRotationDropsRelayedPartitions: messages written across several second-wide outbox
// partitions, while the rotation runs, are all relayed once, in the order written, and every
// partition the relay has passed and the clock has left is dropped, with its rows.
func TestOutboxRotationDropsRelayedPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	outboxOfWidth(t, b.schema, time.Second)
	got := subscribeOutbox(t, b.schema)
	var want []string
	holding := map[string]bool{} // partitions that held a row
	start := time.Now()
	var dropped []postgres.Partition
	for i := 0; time.Since(start) < 3500*time.Millisecond && i < 100; i++ {
		want = append(want, appendMessage(t, b))
		var part string
		if err := b.schema.Pool.QueryRow(context.Background(), `SELECT tableoid::regclass::text FROM `+outboxTable+`
			WHERE payload->>'uuid' = $1`, want[len(want)-1]).Scan(&part); err != nil {
			t.Fatal(err)
		}
		holding[part] = true
		d, err := postgres.RotateOutbox(context.Background(), b.schema.Pool)
		if err != nil {
			t.Logf("rotation: %v", err)
		}
		dropped = append(dropped, d...)
		time.Sleep(150 * time.Millisecond) // spreads the writes over the partitions of 3.5 s
	}
	if len(holding) < 3 {
		t.Fatalf("the rows sit in %d partitions, want 3 or more", len(holding))
	}
	dropped = append(dropped, rotateUntil(t, b.schema, 10*time.Second, func() bool {
		return outboxRows(t, b.schema) == 0 && len(pastPartitions(t, b.schema)) == 0
	})...)
	if ids := got.list(); !slices.Equal(ids, want) {
		t.Fatalf("relayed %d messages %v, want the %d written, in order: %v", len(ids), ids, len(want), want)
	}
	names := map[string]bool{}
	for _, p := range dropped {
		names[p.Name] = true
	}
	for part := range holding {
		if !names[part] {
			t.Errorf("partition %s held relayed rows and was not dropped (dropped %v)", part, dropped)
		}
	}
}

// markRelay sets consumer group's mark on the outbox row of message id (the relay has handed out
// every row up to it).
func markRelay(t *testing.T, db *pgtest.Schema, group, id string) {
	t.Helper()
	tag, err := db.Pool.Exec(context.Background(), `INSERT INTO watermill_offsets_`+postgres.OutboxTopicOf(0)+`
		(consumer_group, offset_acked, last_processed_transaction_id)
		SELECT $1, "offset", transaction_id FROM `+outboxTable+` WHERE payload->>'uuid' = $2
		ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked,
			last_processed_transaction_id = excluded.last_processed_transaction_id`, group, id)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("mark %s at %s: %v (%d rows)", group, id, err, tag.RowsAffected())
	}
}

// outboxPartitionOf names the outbox partition holding message id.
func outboxPartitionOf(t *testing.T, db *pgtest.Schema, id string) string {
	t.Helper()
	var part string
	if err := db.Pool.QueryRow(context.Background(), `SELECT tableoid::regclass::text FROM `+outboxTable+`
		WHERE payload->>'uuid' = $1`, id).Scan(&part); err != nil {
		t.Fatalf("partition of %s: %v", id, err)
	}
	return part
}

// waitPast waits until the server's clock has left partition part.
func waitPast(t *testing.T, db *pgtest.Schema, part string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(pastPartitions(t, db), part) {
		if time.Now().After(deadline) {
			t.Fatalf("partition %s still current after 10 s", part)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exists says whether the outbox still has partition part.
func exists(t *testing.T, db *pgtest.Schema, part string) bool {
	t.Helper()
	var ok bool
	if err := db.Pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, part).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestOutboxRotationKeepsUnrelayedRows: a partition is kept while a row of it is past the mark
// of any consumer group of the outbox, or while no group has relayed anything; it goes once
// every group has passed all its rows.
func TestOutboxRotationKeepsUnrelayedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	outboxOfWidth(t, b.schema, time.Second)
	first := appendMessage(t, b)
	p1 := outboxPartitionOf(t, b.schema, first)
	waitPast(t, b.schema, p1)
	second := appendMessage(t, b)
	p2 := outboxPartitionOf(t, b.schema, second)
	waitPast(t, b.schema, p2)

	rotate := func() {
		t.Helper()
		if _, err := postgres.RotateOutbox(context.Background(), b.schema.Pool); err != nil {
			t.Fatal(err)
		}
	}
	rotate() // no consumer group: nothing is relayed
	if !exists(t, b.schema, p1) || !exists(t, b.schema, p2) || outboxRows(t, b.schema) != 2 {
		t.Fatalf("with no relay, the rotation dropped a partition holding rows")
	}
	markRelay(t, b.schema, "relay", second)
	markRelay(t, b.schema, "audit", first)
	rotate() // "audit" has passed the first row only
	if exists(t, b.schema, p1) || !exists(t, b.schema, p2) {
		t.Fatalf("after both groups passed %s only: %s kept %v, %s kept %v; want the first dropped, the second kept",
			first, p1, exists(t, b.schema, p1), p2, exists(t, b.schema, p2))
	}
	markRelay(t, b.schema, "audit", second)
	rotate()
	if exists(t, b.schema, p2) || outboxRows(t, b.schema) != 0 {
		t.Fatalf("partition %s kept after every group passed its rows", p2)
	}
}

// TestOutboxRotationWaitsForALateCommit: a row whose transaction began in a partition that the
// clock has left, and is still open, is neither lost nor stranded: the rotation drops nothing
// while the transaction runs (the relay's mark cannot say whether the row will come), and once it
// commits the relay hands it out, before the rows committed after it were written, and only then
// does its partition go.
func TestOutboxRotationWaitsForALateCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	outboxOfWidth(t, b.schema, time.Second)
	got := subscribeOutbox(t, b.schema)
	ctx := context.Background()

	late := uuid.NewString()
	tx, err := b.schema.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `INSERT INTO `+outboxTable+` (uuid, payload, metadata, transaction_id)
		VALUES ($1::text, json_build_object('uuid', $1::text), '{}', pg_current_xact_id())`, late); err != nil {
		t.Fatal(err)
	}
	var lateOf string
	if err := tx.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+outboxTable+` WHERE uuid = $1`, late).Scan(&lateOf); err != nil {
		t.Fatal(err)
	}
	waitPast(t, b.schema, lateOf)
	after := appendMessage(t, b)
	afterOf := outboxPartitionOf(t, b.schema, after)
	waitPast(t, b.schema, afterOf)

	short, cancel := context.WithTimeout(ctx, time.Second)
	dropped, err := postgres.RotateOutbox(short, b.schema.Pool)
	cancel()
	if err == nil || len(dropped) != 0 {
		t.Fatalf("with a transaction open in %s the rotation dropped %v (%v), want it waiting", lateOf, dropped, err)
	}
	if !exists(t, b.schema, lateOf) || !exists(t, b.schema, afterOf) {
		t.Fatalf("a partition went while a transaction that wrote into it was open")
	}
	if n := len(got.list()); n != 0 {
		t.Fatalf("the relay handed out %d messages while an older transaction was open", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rotateUntil(t, b.schema, 10*time.Second, func() bool {
		return !exists(t, b.schema, lateOf) && !exists(t, b.schema, afterOf)
	})
	if ids := got.list(); !slices.Equal(ids, []string{late, after}) {
		t.Fatalf("relayed %v, want the late commit %s, then %s", ids, late, after)
	}
}

// outboxBytes is the size on disk of the outbox's whole partition tree, indexes included.
func outboxBytes(t *testing.T, db *pgtest.Schema) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
		FROM pg_partition_tree($1::regclass)`, outboxTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOutboxSizeStaysBoundedUnderRotation: round after round of relayed messages, the outbox's
// size on disk does not grow with their count (the row-by-row prune of before left every
// relayed row's dead tuple behind until a vacuum, and its pages after it).
func TestOutboxSizeStaysBoundedUnderRotation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const width = time.Second
	outboxOfWidth(t, b.schema, width)
	got := subscribeOutbox(t, b.schema)
	ctx := context.Background()
	const rounds, perRound = 6, 300
	var sizes []int64
	for round := range rounds {
		if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO `+outboxTable+` (uuid, payload, metadata, transaction_id)
			SELECT gen_random_uuid()::text, json_build_object('pad', repeat('x', 1000)), '{}', pg_current_xact_id()
			FROM generate_series(1, $1)`, perRound); err != nil {
			t.Fatal(err)
		}
		want := (round + 1) * perRound
		rotateUntil(t, b.schema, 15*time.Second, func() bool {
			return len(got.list()) == want && outboxRows(t, b.schema) == 0
		})
		keepOutboxAhead(t, b.schema, width)
		sizes = append(sizes, outboxBytes(t, b.schema))
	}
	t.Logf("outbox bytes after each round of %d messages: %v", perRound, sizes)
	// One round's rows take about 400 KB; the tree without rows is its empty partitions.
	if last, first := sizes[len(sizes)-1], sizes[1]; last > first+64*1024 {
		t.Fatalf("the outbox grew from %d to %d bytes over %d rounds of %d relayed messages: %v", first, last, rounds-2, perRound, sizes)
	}
}

// insertFarEast writes an outbox row from a session nine hours ahead of UTC, and returns how far
// its created_at is from the UTC clock.
func insertFarEast(t *testing.T, db *pgtest.Schema) time.Duration {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var skew float64
	if _, err := tx.Exec(ctx, `SET LOCAL TimeZone = 'Asia/Tokyo'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `INSERT INTO `+outboxTable+` (uuid, payload, metadata, transaction_id)
		VALUES (gen_random_uuid()::text, '{}', '{}', pg_current_xact_id())
		RETURNING extract(epoch FROM created_at - (clock_timestamp() AT TIME ZONE 'UTC'))::float8`).Scan(&skew); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return time.Duration(skew * float64(time.Second))
}

// TestOutboxPartitioningKeepsRowsAndOffsets: migrating the outbox to partitions and back keeps
// every row, its offset and the relay's mark, and the offsets go on from where they were. The
// rows of before, written in a session's own zone, all fit; the rows of after are in UTC
// whatever the session's zone.
func TestOutboxPartitioningKeepsRowsAndOffsets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	version := pgtest.MigrationVersion(t, "partition_outbox")
	shape := func() (kind string, rows int, offsets string) {
		t.Helper()
		if err := b.schema.Pool.QueryRow(ctx, `SELECT c.relkind::text, (SELECT count(*) FROM `+outboxTable+`),
			(SELECT string_agg("offset"::text, ',' ORDER BY "offset") FROM `+outboxTable+`)
			FROM pg_class c WHERE c.oid = to_regclass($1)`, outboxTable).Scan(&kind, &rows, &offsets); err != nil {
			t.Fatal(err)
		}
		return kind, rows, offsets
	}
	migrate := func(to int) {
		t.Helper()
		if _, err := postgres.Migrate(ctx, b.schema.Pool, to, nil); err != nil {
			t.Fatalf("migrate to %d: %v", to, err)
		}
		if to != -1 {
			return
		}
		// As a process does at its start: a write needs the partition of its time.
		if _, err := postgres.EnsurePartitions(ctx, b.schema.Pool, postgres.PartitionConfig{Width: time.Hour}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	migrate(version - 1)
	first := appendOldMessage(t, b.schema)
	appendOldMessage(t, b.schema)
	markRelay(t, b.schema, "relay", first)
	if skew := insertFarEast(t, b.schema); skew < 8*time.Hour {
		t.Fatalf("below the migration a row from UTC+9 is %s off UTC, want 9h (the session's zone)", skew)
	}
	kind, rows, before := shape()
	if kind != "r" || rows != 3 {
		t.Fatalf("below the migration the outbox is %q with %d rows", kind, rows)
	}
	migrate(-1)
	kind, rows, offsets := shape()
	if kind != "p" || rows != 3 || offsets != before {
		t.Fatalf("partitioned: the outbox is %q with %d rows at offsets %s, want a partitioned table with 3 at %s", kind, rows, offsets, before)
	}
	if skew := insertFarEast(t, b.schema); skew < -time.Minute || skew > time.Minute {
		t.Fatalf("a row from UTC+9 is %s off UTC", skew)
	}
	_, _, offsets = shape()
	if want := before + ","; len(offsets) <= len(want) || offsets[:len(want)] != want {
		t.Fatalf("offsets after one more message: %s, want %s and one above", offsets, before)
	}
	var marked string
	if err := b.schema.Pool.QueryRow(ctx, `SELECT payload->>'uuid' FROM `+outboxTable+` m JOIN watermill_offsets_`+postgres.OutboxTopicOf(0)+` o
		ON (m.transaction_id, m."offset") = (o.last_processed_transaction_id, o.offset_acked)`).Scan(&marked); err != nil || marked != first {
		t.Fatalf("the relay's mark names %q (%v), want %s", marked, err, first)
	}
	_, _, three := shape()
	migrate(version - 1)
	if kind, rows, offsets := shape(); kind != "r" || rows != 4 || offsets != three {
		t.Fatalf("back down: the outbox is %q with %d rows at offsets %s, want a plain table with 4 at %s", kind, rows, offsets, three)
	}
	migrate(-1)
}

// TestOutboxPartitionsHaveTheirOwnWidth: the partitions made for the ledger's tables at a width
// of an hour are, for the outbox, of its own width (ten minutes), and cover the default ahead of
// that width; under a narrower width (compressed time) the outbox takes it, with as few
// partitions ahead as the history, so that it keeps seconds of rows, not ten minutes of them.
func TestOutboxPartitionsHaveTheirOwnWidth(t *testing.T) {
	t.Parallel()
	b := setup(t) // partitions of an hour, as pgtest makes them
	ctx := context.Background()
	parts, err := postgres.Partitions(ctx, b.schema.Pool, outboxTable)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 3 || parts[len(parts)-1].To.Before(time.Now().Add(3*postgres.OutboxPartitionWidth)) {
		t.Fatalf("outbox partitions %v do not cover three widths ahead", parts)
	}
	for _, p := range parts[2:] { // the first two end on the migration's and the width's bounds
		if w := p.To.Sub(p.From); w != postgres.OutboxPartitionWidth {
			t.Errorf("outbox partition %s is %s wide, want %s", p.Name, w, postgres.OutboxPartitionWidth)
		}
	}
	if got := postgres.OutboxRotationInterval(postgres.PartitionConfig{Width: 24 * time.Hour}); got != time.Minute {
		t.Errorf("rotation every %s under day-wide partitions, want a minute", got)
	}

	// Narrower: the retention's 2 s partitions. The partitions cut ahead of the last hour-wide
	// one follow from its bound, so cut them from a time past it.
	last := parts[len(parts)-1].To
	created, err := postgres.EnsurePartitions(ctx, b.schema.Pool, postgres.PartitionConfig{Width: 2 * time.Second}, last)
	if err != nil {
		t.Fatal(err)
	}
	outbox := 0
	for _, p := range created {
		if p.Table != outboxTable {
			continue
		}
		outbox++
		if w := p.To.Sub(p.From); w != 2*time.Second {
			t.Errorf("outbox partition %s is %s wide under 2s partitions, want 2s", p.Name, w)
		}
	}
	// Three widths and half a minute ahead of the time given: 18 partitions.
	if outbox != 18 {
		t.Errorf("cut %d outbox partitions of 2s ahead, want 18", outbox)
	}
	if got := postgres.OutboxRotationInterval(postgres.PartitionConfig{Width: 2 * time.Second}); got != time.Second {
		t.Errorf("rotation every %s under 2s partitions, want every second", got)
	}
}

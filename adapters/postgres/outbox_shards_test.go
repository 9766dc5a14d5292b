package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
)

// appendPair appends a new delivery's events with one outbox message, then a second message of
// the same delivery in a transaction of its own, and returns both ids in order.
func appendPair(t *testing.T, b *storeBundle) [2]string {
	t.Helper()
	_, events := acceptedEvents(t)
	id := events[0].DeliveryID
	first := commands.OutboxMessage{ID: uuid.NewString(), Topic: "ledger.webhook", PartitionKey: id, Payload: []byte(`{}`)}
	if err := b.store.Append(context.Background(), events, []commands.OutboxMessage{first}); err != nil {
		t.Fatal(err)
	}
	second := commands.OutboxMessage{ID: uuid.NewString(), Topic: "ledger.webhook", PartitionKey: id, Payload: []byte(`{}`)}
	if err := b.store.Append(context.Background(), nil, []commands.OutboxMessage{second}); err != nil {
		t.Fatal(err)
	}
	return [2]string{first.ID, second.ID}
}

// shardsOf reads the shard of every outbox row, by its enveloped message id.
func shardsOf(t *testing.T, db *pgtest.Schema) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT payload->>'uuid', shard FROM ledger_outbox_all`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var shard int
		if err := rows.Scan(&id, &shard); err != nil {
			t.Fatal(err)
		}
		out[id] = shard
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func setShards(t *testing.T, db *pgtest.Schema, n int) {
	t.Helper()
	if _, err := postgres.SetOutboxShards(context.Background(), db.Pool, n); err != nil {
		t.Fatal(err)
	}
}

// TestOutboxShardsKeepADeliveryTogether: with the count at 4 a delivery's messages, written in
// transactions of their own, share a shard, and deliveries spread over the shards; the count is
// the database's, taken by the next write after a change; a count out of range is refused.
func TestOutboxShardsKeepADeliveryTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if n, err := postgres.OutboxShards(ctx, b.schema.Pool); err != nil || n != 1 {
		t.Fatalf("a fresh database's outbox has %d shards (%v), want 1", n, err)
	}
	setShards(t, b.schema, 4)
	if changed, err := postgres.SetOutboxShards(ctx, b.schema.Pool, 4); err != nil || changed {
		t.Fatalf("recording the same count again: changed %v (%v), want no change", changed, err)
	}
	var pairs [][2]string
	for range 40 {
		pairs = append(pairs, appendPair(t, b))
	}
	shards := shardsOf(t, b.schema)
	used := map[int]bool{}
	for _, p := range pairs {
		s0, ok0 := shards[p[0]]
		s1, ok1 := shards[p[1]]
		if !ok0 || !ok1 || s0 != s1 || s0 < 0 || s0 >= 4 {
			t.Fatalf("a delivery's messages are in shards %d (%v) and %d (%v), want one shard below 4", s0, ok0, s1, ok1)
		}
		used[s0] = true
	}
	if len(used) < 3 {
		t.Fatalf("40 deliveries used shards %v, want them spread over the 4", used)
	}
	setShards(t, b.schema, 1)
	after := appendPair(t, b)
	if shards := shardsOf(t, b.schema); shards[after[0]] != 0 || shards[after[1]] != 0 {
		t.Fatalf("after the count went back to 1 a delivery's messages are in shards %d and %d, want 0", shards[after[0]], shards[after[1]])
	}
	for _, bad := range []int{0, -1, postgres.MaxOutboxShards + 1} {
		if _, err := postgres.SetOutboxShards(ctx, b.schema.Pool, bad); err == nil {
			t.Errorf("a count of %d was recorded", bad)
		}
	}
}

// TestOutboxShardSubscribersEachMoveTheirOwnRows: one subscriber per shard (one listener for
// all) hands out every row once, each by the subscriber of its shard, a delivery's messages in
// the order they were written.
func TestOutboxShardSubscribersEachMoveTheirOwnRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setShards(t, b.schema, 3)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	waker := postgres.NewOutboxWaker(ctx, b.schema.Pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	subs := make([]*relayed, 3)
	for i := range subs {
		subs[i] = subscribeOutboxShard(t, b.schema, i, waker)
	}
	var pairs [][2]string
	for range 30 {
		pairs = append(pairs, appendPair(t, b))
	}
	shards := shardsOf(t, b.schema)
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := 0
		for _, s := range subs {
			n += len(s.list())
		}
		if n >= 60 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // anything handed out twice would show now
	seen := map[string]int{}
	for i, s := range subs {
		ids := s.list()
		for _, id := range ids {
			seen[id]++
			if shards[id] != i {
				t.Errorf("message %s of shard %d was handed out by the subscriber of shard %d", id, shards[id], i)
			}
		}
		for _, p := range pairs {
			a, b := slices.Index(ids, p[0]), slices.Index(ids, p[1])
			if (a < 0) != (b < 0) || a > b {
				t.Errorf("shard %d handed out a delivery's messages at %d and %d, want both, in order", i, a, b)
			}
		}
	}
	for _, p := range pairs {
		for _, id := range p {
			if seen[id] != 1 {
				t.Errorf("message %s handed out %d times, want once", id, seen[id])
			}
		}
	}
	if pending, err := postgres.OutboxShardsPending(context.Background(), b.schema.Pool, "relay"); err != nil || len(pending) != 0 {
		t.Fatalf("after every shard was relayed the pending shards are %v (%v), want none", pending, err)
	}
}

// TestOutboxShardsPendingNamesTheShardsWithRowsLeft: a shard with rows and no offset, or rows past
// its offset, is pending under its relay's group; one whose offset passed its last row is not.
func TestOutboxShardsPendingNamesTheShardsWithRowsLeft(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setShards(t, b.schema, 4)
	last := map[int]string{}
	for range 20 {
		p := appendPair(t, b)
		last[shardsOf(t, b.schema)[p[1]]] = p[1]
	}
	var want []int
	for s := range last {
		want = append(want, s)
	}
	slices.Sort(want)
	pending := func() []int {
		t.Helper()
		got, err := postgres.OutboxShardsPending(context.Background(), b.schema.Pool, "relay")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := pending(); !slices.Equal(got, want) {
		t.Fatalf("pending shards %v with no offset, want %v", got, want)
	}
	done := want[len(want)-1]
	markRelay(t, b.schema, postgres.OutboxGroup("relay", done), last[done])
	if got := pending(); !slices.Equal(got, want[:len(want)-1]) {
		t.Fatalf("pending shards %v after shard %d's offset passed its rows, want %v", got, done, want[:len(want)-1])
	}
	if got, err := postgres.OutboxShardsPending(context.Background(), b.schema.Pool, "audit"); err != nil || !slices.Equal(got, want) {
		t.Fatalf("another group's pending shards %v (%v), want %v: offsets are per group", got, err, want)
	}
}

// TestOutboxRotationHoldsEachShardToItsOwnOffset: a partition holding rows of two shards goes
// only once each shard's offset has passed its rows; the offset of one shard says nothing of
// the other's.
func TestOutboxRotationHoldsEachShardToItsOwnOffset(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setShards(t, b.schema, 2)
	outboxOfWidth(t, b.schema, time.Second)
	last := map[int]string{}
	parts := map[string]bool{}
	for i := 0; len(last) < 2 && i < 50; i++ {
		p := appendPair(t, b)
		last[shardsOf(t, b.schema)[p[1]]] = p[1]
		parts[outboxPartitionOf(t, b.schema, p[0])] = true
		parts[outboxPartitionOf(t, b.schema, p[1])] = true
	}
	if len(last) < 2 {
		t.Fatalf("50 deliveries all went to one shard of 2")
	}
	for part := range parts {
		waitPast(t, b.schema, part)
	}
	rotate := func() {
		t.Helper()
		if _, err := postgres.RotateOutbox(context.Background(), b.schema.Pool); err != nil {
			t.Fatal(err)
		}
	}
	kept := func() int {
		t.Helper()
		n := 0
		for part := range parts {
			if exists(t, b.schema, part) {
				n++
			}
		}
		return n
	}
	markRelay(t, b.schema, "relay", last[0])
	rotate()
	if kept() == 0 || outboxRows(t, b.schema) == 0 {
		t.Fatalf("with shard 1 not relayed the rotation dropped every partition")
	}
	markRelay(t, b.schema, postgres.OutboxGroup("relay", 1), last[1])
	rotate()
	if n := kept(); n != 0 || outboxRows(t, b.schema) != 0 {
		t.Fatalf("%d partitions kept after both shards' offsets passed their rows", n)
	}
}

// TestOutboxReadsAreIndexProbesBehindABacklog: behind a backlog of 3,000 rows in each of two
// shards, a shard's relay read, the pending shards' probe and the rotation's check read the
// primary key in ranges and stop early: no sequential or bitmap scan of the outbox, no sort,
// and never more rows from it than a batch. watermill-sql's own read, with its offset as an OR
// of two conditions, was a bitmap scan of the whole backlog and a sort at every poll.
func TestOutboxReadsAreIndexProbesBehindABacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	setShards(t, b.schema, 2)
	if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO `+outboxTable+` (uuid, payload, metadata, transaction_id, shard)
		SELECT gen_random_uuid()::text, '{}', '{}', pg_current_xact_id(), g % 2 FROM generate_series(1, 6000) g`); err != nil {
		t.Fatal(err)
	}
	// The relay of shard 0 has moved its first 100 rows; shard 1 has no offset yet.
	if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO watermill_offsets_ledger_outbox (consumer_group, offset_acked, last_processed_transaction_id)
		SELECT 'relay', "offset", transaction_id FROM `+outboxTable+` WHERE shard = 0 ORDER BY transaction_id, "offset" OFFSET 99 LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.schema.Pool.Exec(ctx, `ANALYZE `+outboxTable); err != nil {
		t.Fatal(err)
	}
	var held string // the partition holding the backlog
	if err := b.schema.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+outboxTable+` LIMIT 1`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	read := postgres.OutboxSchema.SelectQuery(postgres.OutboxTopicOf(0), "relay", postgres.OutboxOffsets)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"relay read":     {read.Query, read.Args},
		"pending":        {postgres.OutboxShardsPendingQuery, []any{"relay", postgres.MaxOutboxShards}},
		"rotation check": {postgres.OutboxPartitionUnrelayed(held), nil},
	} {
		tx, err := b.schema.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+q.sql, q.args...)
		var lines []string
		if err == nil {
			lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatalf("%s: explain: %v", name, err)
		}
		text := strings.Join(lines, "\n")
		for i, line := range lines {
			// A sort of the outbox's rows (a Merge Append of index scans names its key too, but
			// sorts nothing).
			if strings.Contains(line, "Sort Key:") && strings.Contains(line, "transaction_id") &&
				i+1 < len(lines) && strings.Contains(lines[i+1], "Sort Method") {
				t.Errorf("%s sorts the backlog:\n%s", name, text)
			}
			for _, bad := range []string{"Seq Scan on " + held, "Bitmap Heap Scan"} {
				// The rotation's branch for an outbox with no group at all is an EXISTS over the
				// partition (its first row ends it); with a group it is never run.
				if strings.Contains(line, bad) && !strings.Contains(line, "never executed") {
					t.Errorf("%s reads the backlog whole (%s):\n%s", name, bad, text)
				}
			}
		}
		for _, line := range lines {
			if !strings.Contains(line, "Index") || !strings.Contains(line, "_pkey") {
				continue
			}
			if m := actualRows.FindStringSubmatch(line); m != nil {
				if n, _ := strconv.Atoi(m[1]); n > 100 {
					t.Errorf("%s read %d rows from the outbox's key, more than a batch:\n%s", name, n, text)
				}
			}
		}
	}
	if got := read.Query; !strings.Contains(got, "LIMIT 100") {
		t.Errorf("the relay read takes no batch of 100:\n%s", got)
	}
}

var actualRows = regexp.MustCompile(`actual rows=(\d+)`)

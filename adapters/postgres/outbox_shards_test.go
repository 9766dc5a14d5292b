package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

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

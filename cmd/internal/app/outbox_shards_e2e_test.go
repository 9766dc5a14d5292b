package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/domain"
)

// TestRelayFollowsTheOutboxShardCount: a ledger started with --outbox-shards 3 records the count,
// spreads its deliveries over the shards and relays each shard; when the database's count
// changes under it (down to 1, then up to 4), the writers take it at once and the relay role
// starts the new shard's relay by itself: every delivery is delivered once.
func TestRelayFollowsTheOutboxShardCount(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "", func(c *Config) { c.OutboxShards = 3 })
	ctx := context.Background()
	if n, err := postgres.OutboxShards(ctx, b.schema.Pool); err != nil || n != 3 {
		t.Fatalf("the database records %d shards (%v), want the 3 configured", n, err)
	}
	shardOf := func(id string) int {
		t.Helper()
		var shard int
		if err := b.schema.Pool.QueryRow(ctx, `SELECT shard FROM ledger_outbox_all
			WHERE convert_from(decode(payload->>'payload', 'base64'), 'UTF8') LIKE '%' || $1 || '%'`, id).Scan(&shard); err != nil {
			t.Fatalf("the outbox row of %s: %v", id, err)
		}
		return shard
	}
	var ids []string
	send := func(key string) (string, int) {
		t.Helper()
		a := b.notify(t, key, b.sink.URL+"/"+key)
		id := a.Deliveries[0].ID
		ids = append(ids, id)
		return id, shardOf(id)
	}
	used := map[int]bool{}
	for i := range 12 {
		_, shard := send(fmt.Sprintf("three-%d", i))
		used[shard] = true
	}
	if len(used) < 2 {
		t.Fatalf("12 deliveries went to shards %v of 3", used)
	}
	for _, id := range ids {
		b.waitState(t, id, domain.StateDelivered, 20*time.Second)
	}

	if _, err := postgres.SetOutboxShards(ctx, b.schema.Pool, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, shard := send(fmt.Sprintf("one-%d", i)); shard != 0 {
			t.Fatalf("with the count at 1 a delivery went to shard %d", shard)
		}
	}
	if _, err := postgres.SetOutboxShards(ctx, b.schema.Pool, 4); err != nil {
		t.Fatal(err)
	}
	fourth := false
	for i := 0; !fourth && i < 60; i++ {
		_, shard := send(fmt.Sprintf("four-%d", i))
		fourth = shard == 3
	}
	if !fourth {
		t.Fatalf("60 deliveries with the count at 4 and none in shard 3")
	}
	for _, id := range ids {
		b.waitState(t, id, domain.StateDelivered, 20*time.Second)
		if n := b.sink.count(id); n != 1 {
			t.Errorf("delivery %s: webhook called %d times, want 1", id, n)
		}
	}
	if pending, err := postgres.OutboxShardsPending(ctx, b.schema.Pool, relayConsumerGroup); err != nil || len(pending) != 0 {
		t.Fatalf("shards %v still hold rows the relay has not moved (%v)", pending, err)
	}
}

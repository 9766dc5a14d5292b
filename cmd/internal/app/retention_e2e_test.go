package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/domain"
)

// TestRetentionArchivesDeliveredHistoryThroughTheLedger: with retention on (keep 4s, partitions
// of 2s), a delivered webhook's history leaves the hot store for the archive by the running
// ledger's own pass: its status and events answer 410 archived naming the segment, the archive
// holds its four events and verifies, and the same Idempotency-Key repeated afterwards is a new
// request (the idempotency window is keep).
func TestRetentionArchivesDeliveredHistoryThroughTheLedger(t *testing.T) {
	t.Parallel()
	schema := pgtest.NewWithPartitions(t, postgres.PartitionConfig{Width: 2 * time.Second, Ahead: 20 * time.Second})
	dir := filepath.Join(t.TempDir(), "archive")
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	file := fmt.Sprintf("retention: {keep: 4s, partition: 2s, archive_dir: %s}\nchannels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n", dir)
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, schema)
	cfg.ConfigFile = path
	b := startApp(t, schema, cfg)

	body := map[string]any{"payload": map[string]any{"text": "hello"},
		"recipients": []map[string]string{{"channel": "webhook", "recipient": b.sink.URL + "/hook"}}}
	first := b.acceptNotification(t, "keep-1", body)
	id := first.Deliveries[0].ID
	b.waitState(t, id, domain.StateDelivered, 20*time.Second)

	deadline := time.Now().Add(40 * time.Second)
	var gone struct {
		Status  int    `json:"status"`
		Reason  string `json:"reason"`
		Segment string `json:"segment"`
	}
	for {
		resp, raw := b.do(t, "GET", "/v1/deliveries/"+id, "", nil)
		if resp.StatusCode == http.StatusGone {
			if err := json.Unmarshal(raw, &gone); err != nil {
				t.Fatal(err)
			}
			break
		}
		if resp.StatusCode != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("delivery %s: %d %s, want 200 until it is archived, then 410", id, resp.StatusCode, raw)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if gone.Reason != "archived" || gone.Segment == "" {
		t.Fatalf("410 answer %+v", gone)
	}
	if resp, raw := b.do(t, "GET", "/v1/deliveries/"+id+"/events", "", nil); resp.StatusCode != http.StatusGone {
		t.Fatalf("events of an archived delivery: %d %s", resp.StatusCode, raw)
	}
	store, err := archive.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := store.Verify(t.Context(), gone.Segment)
	if err != nil || m.Events != 4 || m.Deliveries != 1 {
		t.Fatalf("segment %s: %+v (%v)", gone.Segment, m, err)
	}
	lines, _, err := archive.History(t.Context(), store, id)
	if err != nil || len(lines) != 4 || lines[3].Type != domain.EventDelivered {
		t.Fatalf("archived history of %s: %+v (%v)", id, lines, err)
	}

	// The stored answer left with the partition: the key is new again.
	deadline = time.Now().Add(20 * time.Second)
	for {
		var left bool
		if err := schema.Pool.QueryRow(t.Context(), `SELECT NOT EXISTS (SELECT 1 FROM accept_requests WHERE request_key = 'keep-1')`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the accept answer of keep-1 is still stored")
		}
		time.Sleep(200 * time.Millisecond)
	}
	again := b.acceptNotification(t, "keep-1", body)
	if again.Deliveries[0].ID == id {
		t.Fatalf("a key repeated after keep answered the archived delivery %s", id)
	}
	b.waitState(t, again.Deliveries[0].ID, domain.StateDelivered, 20*time.Second)
}

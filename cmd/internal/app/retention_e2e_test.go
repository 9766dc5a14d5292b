package app

import (
	"encoding/json"
	"errors"
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
	// The answer names the segment from the moment the partition is detached, a little before
	// its manifest is written.
	m, err := store.Verify(t.Context(), gone.Segment)
	for until := time.Now().Add(10 * time.Second); errors.Is(err, archive.ErrNotFound) && time.Now().Before(until); {
		time.Sleep(100 * time.Millisecond)
		m, err = store.Verify(t.Context(), gone.Segment)
	}
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

// TestPayloadExpiryKeepsTheDigest: with retention.payloads 2s, a dead webhook's payload body
// leaves: its status says payload_expired, its accepted event keeps payload_sha256 and the
// size and drops the body, the stored row holds no body, and a replay is refused 409 naming
// payload; a delivery of another tenant whose period is longer keeps its body.
func TestPayloadExpiryKeepsTheDigest(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	file := "retention: {payloads: 2s, partition: 1h, tenants: {globex: {payloads: 1h}}}\nchannels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, schema)
	cfg.ConfigFile = path
	b := startApp(t, schema, cfg)
	b.sink.script(func(*http.Request, int) (int, http.Header) { return http.StatusNotFound, nil })

	body := map[string]any{"payload": map[string]any{"text": "hello"},
		"recipients": []map[string]string{{"channel": "webhook", "recipient": b.sink.URL + "/hook"}}}
	id := b.acceptNotification(t, "expire-1", body).Deliveries[0].ID
	b.waitState(t, id, domain.StateDead, 20*time.Second)
	globex := *b
	globex.key = "globex-key"
	kept := globex.acceptNotification(t, "expire-2", body).Deliveries[0].ID
	globex.waitState(t, kept, domain.StateDead, 20*time.Second)

	deadline := time.Now().Add(30 * time.Second)
	for {
		_, raw := b.do(t, "GET", "/v1/deliveries/"+id, "", nil)
		var v struct {
			PayloadExpired bool `json:"payload_expired"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		if v.PayloadExpired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s: payload not expired: %s", id, raw)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var accepted domain.Accepted
	if err := json.Unmarshal(b.history(t, id)[0].Data, &accepted); err != nil {
		t.Fatal(err)
	}
	if len(accepted.Payload) != 0 || !accepted.PayloadExpired || len(accepted.PayloadSHA256) != 64 || accepted.PayloadSize != len(`{"text": "hello"}`) {
		t.Fatalf("accepted event after expiry: %+v", accepted)
	}
	var held int
	if err := schema.Pool.QueryRow(t.Context(), `SELECT count(*) FROM notification_payloads WHERE payload IS NOT NULL`).Scan(&held); err != nil || held != 1 {
		t.Fatalf("bodies held: %d (%v), want globex's alone", held, err)
	}
	resp, raw := b.do(t, "POST", "/v1/deliveries/"+id+"/replay", "", map[string]any{})
	var p struct {
		Field string `json:"field"`
	}
	if json.Unmarshal(raw, &p); resp.StatusCode != http.StatusConflict || p.Field != "payload" {
		t.Fatalf("replay of an expired payload: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := globex.do(t, "POST", "/v1/deliveries/"+kept+"/replay", "", map[string]any{}); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("replay of a kept payload: %d %s", resp.StatusCode, raw)
	}
}

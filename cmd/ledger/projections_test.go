package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// appendStory appends a delivery that is accepted at `at`, queued a second later, and (when
// deliver) started and delivered a second after that.
func appendStory(t *testing.T, store *postgres.EventStore, tenant string, at time.Time, deliver bool) string {
	t.Helper()
	at = at.UTC().Truncate(time.Microsecond)
	// A UUIDv7 of the accept time, as the accept command makes it: the views are partitioned by it.
	id := commands.DeliveryID(uuid.NewString(), commands.Recipient{}, at)
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: tenant, NotificationID: uuid.NewString(),
		Channel: "webhook", Recipient: "https://example.com/h", Payload: json.RawMessage(`{"n":1}`),
		Priority: domain.PriorityNormal, MaxAttempts: 3, RequestKey: "k-" + id}, at)
	if err != nil {
		t.Fatal(err)
	}
	more, err := d.Queue(at.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	events = append(events, more...)
	if deliver {
		for _, step := range []func() ([]domain.Event, error){
			func() ([]domain.Event, error) { return d.StartAttempt("webhook", at.Add(2*time.Second)) },
			func() ([]domain.Event, error) {
				return d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeDelivered, Provider: "webhook", StatusCode: 200},
					domain.DefaultRetryPolicy(), at.Add(2*time.Second), 0)
			},
		} {
			es, err := step()
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, es...)
		}
	}
	if err := store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitReadable waits until the log's followers can read every committed event: they stop at the
// cluster's oldest running transaction, which may be another test's.
func waitReadable(t *testing.T, schema *pgtest.Schema) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var hidden int
		if err := schema.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM events WHERE transaction_id >= pg_snapshot_xmin(pg_current_snapshot())`).Scan(&hidden); err != nil {
			t.Fatal(err)
		}
		if hidden == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events still above the oldest running transaction after 20s", hidden)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ledgerCmd runs the CLI and returns its exit code and output.
func ledgerCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestProjectionsRebuildVerifyAndStatusCommands(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	var ids []string
	for i := range 12 {
		ids = append(ids, appendStory(t, store, "acme", time.Now().Add(-time.Hour), i%2 == 0))
	}
	db := "--database-url=" + schema.URL
	waitReadable(t, schema)

	// Nothing projected yet: rebuilding each view builds it from the log.
	for _, name := range []string{"status", "dlq", "counters"} {
		code, out, errOut := ledgerCmd(t, "projections", "rebuild", db, "--batch-size=5", name)
		if code != 0 || !strings.Contains(out, "rebuilt "+name+": ") {
			t.Fatalf("rebuild %s: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
	}
	code, out, errOut := ledgerCmd(t, "projections", "verify", db, "all")
	if code != 0 || strings.Count(out, "no difference") != 3 {
		t.Fatalf("verify all: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = ledgerCmd(t, "projections", "status", db)
	if code != 0 || !strings.Contains(out, "status") || !strings.Contains(out, "counters") {
		t.Fatalf("status: exit %d, %q", code, out)
	}

	if _, err := schema.Pool.Exec(context.Background(), `UPDATE status_view SET recipient = 'https://evil.example.com' WHERE id = $1`, ids[3]); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = ledgerCmd(t, "projections", "verify", db, "status")
	if code == 0 || !strings.Contains(out, ids[3]+": recipient: live \"https://evil.example.com\", expected \"https://example.com/h\"") {
		t.Fatalf("verify after tampering: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := ledgerCmd(t, "projections", "rebuild", db, "nosuch"); code == 0 || !strings.Contains(errOut, "unknown projection") {
		t.Fatalf("rebuild of an unknown view: exit %d, %q", code, errOut)
	}
}

func TestExportWritesATimeRangeAsJSONLines(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	t0 := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	before := appendStory(t, store, "acme", t0.Add(-time.Hour), true)
	inside := appendStory(t, store, "acme", t0, true)                       // 4 events, t0 .. t0+2s
	partly := appendStory(t, store, "globex", t0.Add(9*time.Second), false) // accepted at t0+9s, queued at t0+10s
	_ = before

	out := filepath.Join(t.TempDir(), "audit.jsonl")
	code, _, errOut := ledgerCmd(t, "export", "--database-url="+schema.URL,
		"--since="+t0.Format(time.RFC3339), "--until="+t0.Add(10*time.Second).Format(time.RFC3339), "--out="+out)
	if code != 0 {
		t.Fatalf("export: exit %d, %s", code, errOut)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type line struct {
		Position   int64           `json:"position"`
		DeliveryID string          `json:"delivery_id"`
		Tenant     string          `json:"tenant"`
		Version    int             `json:"version"`
		Type       string          `json:"type"`
		State      string          `json:"state"`
		RecordedAt time.Time       `json:"recorded_at"`
		Data       json.RawMessage `json:"data"`
	}
	var lines []line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	want := []struct {
		id, typ, state string
		version        int
	}{
		{inside, "delivery.accepted", "accepted", 1},
		{inside, "delivery.queued", "queued", 2},
		{inside, "delivery.attempt_started", "processing", 3},
		{inside, "delivery.delivered", "delivered", 4},
		{partly, "delivery.accepted", "accepted", 1},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %+v", len(lines), len(want), lines)
	}
	for i, w := range want {
		l := lines[i]
		if l.DeliveryID != w.id || l.Type != w.typ || l.State != w.state || l.Version != w.version || l.Position == 0 ||
			l.RecordedAt.Before(t0) || !l.RecordedAt.Before(t0.Add(10*time.Second)) || len(l.Data) == 0 {
			t.Fatalf("line %d: %+v, want %+v", i, l, w)
		}
		if i > 0 && l.Position <= lines[i-1].Position {
			t.Fatalf("line %d: position %d after %d", i, l.Position, lines[i-1].Position)
		}
	}
	if lines[4].Tenant != "globex" {
		t.Fatalf("tenant %q", lines[4].Tenant)
	}

	// To standard output, without bounds: the whole log.
	code, stdout, errOut := ledgerCmd(t, "export", "--database-url="+schema.URL)
	if code != 0 || strings.Count(stdout, "\n") != 4+4+2 {
		t.Fatalf("export of the whole log: exit %d, %d lines, %s", code, strings.Count(stdout, "\n"), errOut)
	}
	if code, _, errOut := ledgerCmd(t, "export", "--database-url="+schema.URL, "--since=yesterday"); code == 0 || !strings.Contains(errOut, "--since") {
		t.Fatalf("bad --since: exit %d, %q", code, errOut)
	}
}

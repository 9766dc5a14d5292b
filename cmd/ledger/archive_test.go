package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// archivedStories are n delivered deliveries of tenant accepted from at on, as a partition's
// events: accepted, queued, attempt_started, delivered.
func archivedStories(n int, tenant string, at time.Time, firstPosition int64) []projections.LoggedEvent {
	types := []domain.EventType{domain.EventAccepted, domain.EventQueued, domain.EventAttemptStarted, domain.EventDelivered}
	var log []projections.LoggedEvent
	pos := firstPosition
	for i := range n {
		accepted := at.Add(time.Duration(i) * time.Minute)
		id := commands.DeliveryID(fmt.Sprintf("%s-%d", tenant, i), commands.Recipient{Channel: "webhook", Recipient: "https://example.com/h"}, accepted)
		for v, typ := range types {
			log = append(log, projections.LoggedEvent{Event: domain.Event{DeliveryID: id, Tenant: tenant, Version: v + 1, Type: typ,
				Key: fmt.Sprintf("%s/%d", id, v+1), Data: json.RawMessage(fmt.Sprintf(`{"step": %d}`, v+1)),
				RecordedAt: accepted.Add(time.Duration(v) * time.Second), Position: pos},
				At: projections.LogPosition{TransactionID: uint64(pos), Position: pos}})
			pos++
		}
	}
	return log
}

// archiveOf puts each segment's events into a new archive directory and returns it.
func archiveOf(t *testing.T, segs map[archive.Segment][]projections.LoggedEvent) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "archive")
	d, err := archive.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for seg, events := range segs {
		_, err := d.Put(context.Background(), seg, func(emit func(projections.LoggedEvent) error) error {
			for _, e := range events {
				if err := emit(e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestArchiveVerifyAndShowCommands(t *testing.T) {
	t.Parallel()
	april := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	may := april.AddDate(0, 1, 0)
	aprilEvents := archivedStories(3, "acme", april.Add(time.Hour), 100)
	mayEvents := archivedStories(5, "globex", may.Add(time.Hour), 200)
	dir := archiveOf(t, map[archive.Segment][]projections.LoggedEvent{
		{ID: "events_2026_04", Partition: "events_2026_04", From: april, To: may}:                aprilEvents,
		{ID: "events_2026_05", Partition: "events_2026_05", From: may, To: may.AddDate(0, 1, 0)}: mayEvents,
	})

	for _, args := range [][]string{{"archive", "verify", dir}, {"archive", "verify", "--dir", dir}} {
		code, out, errOut := ledgerCmd(t, args...)
		if code != 0 || !strings.Contains(out, "events_2026_04\t12 events\tok\n") || !strings.Contains(out, "events_2026_05\t20 events\tok\n") ||
			!strings.HasSuffix(out, "2 segments, 32 events: all ok\n") {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}

	id := mayEvents[8].DeliveryID // the third delivery of May
	code, out, errOut := ledgerCmd(t, "archive", "show", id, "--dir", dir)
	want := fmt.Sprintf("delivery %s, tenant globex: 4 events, archived in [events_2026_05]\n", id) +
		"2026-05-01T01:02:00Z  v1  delivery.accepted  accepted  {\"step\":1}\n" +
		"2026-05-01T01:02:01Z  v2  delivery.queued  queued  {\"step\":2}\n" +
		"2026-05-01T01:02:02Z  v3  delivery.attempt_started  processing  {\"step\":3}\n" +
		"2026-05-01T01:02:03Z  v4  delivery.delivered  delivered  {\"step\":4}\n"
	if code != 0 || out != want {
		t.Fatalf("show: exit %d, stderr %q, stdout\n%s\nwant\n%s", code, errOut, out, want)
	}
	code, out, errOut = ledgerCmd(t, "archive", "show", "--json", "--dir="+dir, id)
	var lines []archive.Line
	for _, s := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var l archive.Line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("show --json: line %q: %v (exit %d, %s)", s, err, code, errOut)
		}
		lines = append(lines, l)
	}
	if code != 0 || len(lines) != 4 || lines[0].Position != 208 || lines[3].Type != domain.EventDelivered || lines[3].IdempotencyKey != id+"/4" {
		t.Fatalf("show --json: exit %d, %+v", code, lines)
	}

	unknown := commands.DeliveryID("nosuch", commands.Recipient{Channel: "webhook"}, may.Add(time.Hour))
	if code, _, errOut := ledgerCmd(t, "archive", "show", "--dir", dir, unknown); code != 1 || !strings.Contains(errOut, unknown) || !strings.Contains(errOut, dir) {
		t.Fatalf("show of an unknown delivery: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{
		{"archive", "show", id},                        // no --dir
		{"archive", "show", "--dir", dir},              // no id
		{"archive", "verify"},                          // no directory
		{"archive", "verify", dir, "--dir", dir + "x"}, // two
		{"archive"},
	} {
		if code, _, errOut := ledgerCmd(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage); %q", args, code, errOut)
		}
	}
	if code, _, errOut := ledgerCmd(t, "archive", "verify", filepath.Join(dir, "nosuch")); code != 1 || !strings.Contains(errOut, "nosuch") {
		t.Fatalf("verify of a missing directory: exit %d, %q", code, errOut)
	}
	if code, _, errOut := ledgerCmd(t, "archive", "show", "--help"); code != 0 || !strings.Contains(errOut, "-json") || !strings.Contains(errOut, "-dir") {
		t.Fatalf("show --help: exit %d, %q", code, errOut)
	}

	// A damaged segment fails the verify, and only that one.
	path := filepath.Join(dir, "events_2026_05.jsonl.zst")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0xff
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = ledgerCmd(t, "archive", "verify", dir)
	if code != 1 || !strings.Contains(out, "events_2026_04\t12 events\tok\n") || !strings.Contains(out, "events_2026_05\t20 events\tFAILED: ") ||
		!strings.Contains(out, "1 of 2 segments failed their check\n") || !strings.Contains(errOut, "fail their check") {
		t.Fatalf("verify of a damaged archive: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A manifest that does not decode is one more failed segment; the others are still checked.
	if err := os.WriteFile(filepath.Join(dir, "events_2026_03.manifest.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = ledgerCmd(t, "archive", "verify", dir)
	if code != 1 || !strings.Contains(out, "FAILED: segment events_2026_03: ") || !strings.Contains(out, "events_2026_04\t12 events\tok\n") ||
		!strings.Contains(out, "2 of 3 segments failed their check\n") {
		t.Fatalf("verify beside a manifest that does not decode: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestArchiveHoldsWhatExportWrites: a segment put from the database's events holds, byte for
// byte, the lines `ledger export` prints for them, and compares equal with the rows read again.
func TestArchiveHoldsWhatExportWrites(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	at := time.Now().Add(-time.Hour)
	for i := range 6 {
		appendStory(t, store, []string{"acme", "globex"}[i%2], at.Add(time.Duration(i)*time.Second), i%3 != 0)
	}
	waitReadable(t, schema)
	code, exported, errOut := ledgerCmd(t, "export", "--database-url="+schema.URL)
	if code != 0 || strings.Count(exported, "\n") != 4*4+2*2 {
		t.Fatalf("export: exit %d, %d lines, %s", code, strings.Count(exported, "\n"), errOut)
	}

	ctx := context.Background()
	d, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rows := func(emit func(projections.LoggedEvent) error) error {
		return store.ExportLog(ctx, postgres.LogRange{}, emit)
	}
	seg := archive.Segment{ID: "all", Partition: "events", From: at.Add(-time.Hour), To: at.Add(time.Hour)}
	m, err := d.Put(ctx, seg, rows)
	if err != nil {
		t.Fatal(err)
	}
	if m.Events != 20 || m.Deliveries != 6 || m.Counts["acme"] != 10 || m.Counts["globex"] != 10 {
		t.Fatalf("manifest %+v", m)
	}
	raw, err := os.ReadFile(filepath.Join(d.Root, m.File))
	if err != nil {
		t.Fatal(err)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	plain, err := dec.DecodeAll(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain, []byte(exported)) {
		t.Fatalf("the segment's lines differ from the export's:\n%s\nexport:\n%s", plain, exported)
	}
	if err := archive.CompareRows(ctx, d, m.ID, rows); err != nil {
		t.Fatalf("compare with the rows: %v", err)
	}
}

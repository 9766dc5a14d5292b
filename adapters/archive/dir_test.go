package archive_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// t0 is the start of the test segments' range.
var t0 = time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)

// story is the events of n deliveries accepted from at on, spread over tenants, each through
// accepted, queued, attempt_started and delivered, every third with a receipt (an event that
// keeps the state), interleaved in log order as concurrent deliveries are.
func story(n int, at time.Time, tenants ...string) []projections.LoggedEvent {
	types := []domain.EventType{domain.EventAccepted, domain.EventQueued, domain.EventAttemptStarted, domain.EventDelivered, domain.EventReceiptRecorded}
	streams := make([][]domain.Event, n)
	for i := range n {
		accepted := at.Add(time.Duration(i) * time.Second)
		id := commands.DeliveryID(fmt.Sprintf("n-%d", i), commands.Recipient{Channel: "webhook", Recipient: "https://example.com/h"}, accepted)
		tenant := tenants[i%len(tenants)]
		steps := 4
		if i%3 == 0 {
			steps = 5
		}
		for v := 1; v <= steps; v++ {
			// jsonb text as the database gives it: spaces after colons, characters that the
			// encoder escapes.
			data := fmt.Sprintf(`{"attempt": %d, "note": "<b>caf\u00e9 & co</b>", "n": [1, 2.50, {"x": null}]}`, v)
			streams[i] = append(streams[i], domain.Event{DeliveryID: id, Tenant: tenant, Version: v, Type: types[v-1],
				Key: fmt.Sprintf("%s/%d", id, v), Data: json.RawMessage(data),
				RecordedAt: accepted.Add(time.Duration(v)*time.Millisecond + 123*time.Microsecond)})
		}
	}
	var log []projections.LoggedEvent
	pos := int64(1000)
	for round := 0; ; round++ {
		added := false
		for i := range streams {
			if round < len(streams[i]) {
				e := streams[i][round]
				e.Position = pos
				log = append(log, projections.LoggedEvent{Event: e, At: projections.LogPosition{TransactionID: uint64(5000 + pos/3), Position: pos}})
				pos++
				added = true
			}
		}
		if !added {
			return log
		}
	}
}

// emitter is an events function over a slice.
func emitter(events []projections.LoggedEvent) func(emit func(projections.LoggedEvent) error) error {
	return func(emit func(projections.LoggedEvent) error) error {
		for _, e := range events {
			if err := emit(e); err != nil {
				return err
			}
		}
		return nil
	}
}

// encoded is a line as the file holds it.
func encoded(t *testing.T, l archive.Line) string {
	t.Helper()
	var b bytes.Buffer
	if err := archive.NewLineWriter(&b).Write(l); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// expectedLines is what a segment of events must hold, line by line.
func expectedLines(t *testing.T, events []projections.LoggedEvent) []string {
	t.Helper()
	var want []string
	for _, e := range events {
		l, err := archive.LineOf(e)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, encoded(t, l))
	}
	return want
}

type bundle struct {
	dir    *archive.Dir
	events []projections.LoggedEvent
	seg    archive.Segment
}

func setup(t *testing.T, deliveries int) *bundle {
	t.Helper()
	d, err := archive.NewDir(filepath.Join(t.TempDir(), "archive"))
	if err != nil {
		t.Fatal(err)
	}
	archive.SetClock(d, func() time.Time { return time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC) })
	return &bundle{dir: d, events: story(deliveries, t0.Add(time.Minute), "acme", "globex", "initech"),
		seg: archive.Segment{ID: "events_2026_04", Partition: "events_2026_04", From: t0, To: t0.AddDate(0, 1, 0)}}
}

// put archives the bundle's segment and fails the test on an error.
func (b *bundle) put(t *testing.T) archive.Manifest {
	t.Helper()
	m, err := b.dir.Put(context.Background(), b.seg, emitter(b.events))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// files lists the archive's root.
func (b *bundle) files(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(b.dir.Root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestPutWritesASegmentThatReadsBackAsTheExport(t *testing.T) {
	t.Parallel()
	b := setup(t, 900) // 3,900 events
	ctx := context.Background()
	m := b.put(t)

	want := expectedLines(t, b.events)
	counts := map[string]int64{}
	for _, e := range b.events {
		counts[e.Tenant]++
	}
	if m.ID != b.seg.ID || m.Partition != b.seg.Partition || !m.From.Equal(b.seg.From) || !m.To.Equal(b.seg.To) ||
		m.File != "events_2026_04.jsonl.zst" || m.Format != 1 || m.Events != int64(len(b.events)) || m.Deliveries != 900 ||
		!slices.Equal(m.Tenants, []string{"acme", "globex", "initech"}) || fmt.Sprint(m.Counts) != fmt.Sprint(counts) ||
		m.FirstPosition != b.events[0].Position || m.LastPosition != b.events[len(b.events)-1].Position ||
		!m.FirstRecordedAt.Equal(b.events[0].RecordedAt) || !m.LastRecordedAt.Equal(b.events[len(b.events)-1].RecordedAt) ||
		!m.CreatedAt.Equal(time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)) {
		t.Fatalf("manifest %+v", m)
	}
	if got := b.files(t); !slices.Equal(got, []string{"events_2026_04.jsonl.zst", "events_2026_04.manifest.json"}) {
		t.Fatalf("files %v: want the data and its manifest, no temporary file", got)
	}

	// The manifest's sums are those any tool computes.
	raw, err := os.ReadFile(filepath.Join(b.dir.Root, m.File))
	if err != nil {
		t.Fatal(err)
	}
	fileSum := sha256.Sum256(raw)
	if int64(len(raw)) != m.Bytes || hex.EncodeToString(fileSum[:]) != m.SHA256 {
		t.Fatalf("file: %d bytes sha256 %x; manifest %d bytes %s", len(raw), fileSum, m.Bytes, m.SHA256)
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
	linesSum := sha256.Sum256(plain)
	if hex.EncodeToString(linesSum[:]) != m.LinesSHA256 {
		t.Fatalf("lines sha256 %x, manifest %s", linesSum, m.LinesSHA256)
	}
	if string(plain) != strings.Join(want, "") {
		t.Fatal("the decompressed file is not the events' export lines")
	}
	var onDisk archive.Manifest
	if b, err := os.ReadFile(filepath.Join(b.dir.Root, "events_2026_04.manifest.json")); err != nil || json.Unmarshal(b, &onDisk) != nil ||
		onDisk.SHA256 != m.SHA256 || onDisk.Events != m.Events {
		t.Fatalf("manifest on disk %+v (%v), returned %+v", onDisk, err, m)
	}

	// Lines gives them back, in order.
	var got []string
	if err := b.dir.Lines(ctx, m.ID, func(l archive.Line) error {
		got = append(got, encoded(t, l))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Lines gave %d lines, want %d, or they differ", len(got), len(want))
	}
	if v, err := b.dir.Verify(ctx, m.ID); err != nil || v.SHA256 != m.SHA256 {
		t.Fatalf("verify: %+v, %v", v, err)
	}
	if ms, err := b.dir.Manifests(ctx); err != nil || len(ms) != 1 || ms[0].ID != m.ID {
		t.Fatalf("manifests %+v, %v", ms, err)
	}
	if err := archive.CompareRows(ctx, b.dir, m.ID, emitter(b.events)); err != nil {
		t.Fatalf("compare with the rows it was made of: %v", err)
	}

	t.Run("the zstd tool reads it", func(t *testing.T) {
		if _, err := exec.LookPath("zstd"); err != nil {
			t.Skip("no zstd command on this machine")
		}
		out, err := exec.Command("zstd", "-dc", filepath.Join(b.dir.Root, m.File)).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != strings.Join(want, "") {
			t.Fatalf("zstd -dc printed %d bytes, want the %d of the lines", len(out), len(plain))
		}
	})
}

func TestPutOfAnEmptySegmentVerifies(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	m := b.put(t)
	if m.Events != 0 || len(m.Tenants) != 0 {
		t.Fatalf("manifest %+v", m)
	}
	if _, err := b.dir.Verify(context.Background(), m.ID); err != nil {
		t.Fatal(err)
	}
}

func TestPutChecksTheFileItWroteAndLeavesNothingWhenItDiffers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(path string) error
	}{
		{"a flipped byte", func(path string) error { return flip(path, 0.5) }},
		{"a cut", func(path string) error { return cut(path, 100) }},
		// A whole valid frame more: zstd's own checksums pass, only the comparison with what was
		// written sees it.
		{"a frame more", func(path string) error {
			enc, _ := zstd.NewWriter(nil)
			frame := enc.EncodeAll([]byte(`{"position":1,"transaction_id":"1","delivery_id":"x","tenant":"acme","version":1,"type":"delivery.accepted","state":"accepted","recorded_at":"2026-04-01T00:00:00Z","idempotency_key":"k","data":{}}`+"\n"), nil)
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write(frame)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 200)
			archive.SetAfterWrite(b.dir, tc.damage)
			_, err := b.dir.Put(context.Background(), b.seg, emitter(b.events))
			if !errors.Is(err, archive.ErrCheckFailed) {
				t.Fatalf("put of a damaged file: %v, want ErrCheckFailed", err)
			}
			if got := b.files(t); len(got) != 0 {
				t.Fatalf("files left: %v", got)
			}
			if ms, err := b.dir.Manifests(context.Background()); err != nil || len(ms) != 0 {
				t.Fatalf("manifests %v, %v", ms, err)
			}
			// The retention pass tries again on a sound disk.
			archive.SetAfterWrite(b.dir, nil)
			b.put(t)
		})
	}
}

func TestPutLeavesNothingWhenTheEventsFail(t *testing.T) {
	t.Parallel()
	b := setup(t, 50)
	boom := errors.New("connection reset")
	_, err := b.dir.Put(context.Background(), b.seg, func(emit func(projections.LoggedEvent) error) error {
		for _, e := range b.events[:100] {
			if err := emit(e); err != nil {
				return err
			}
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("put: %v", err)
	}
	if got := b.files(t); len(got) != 0 {
		t.Fatalf("files left: %v", got)
	}
}

func TestPutOfAnArchivedSegmentIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, 20)
	first := b.put(t)
	called := false
	_, err := b.dir.Put(context.Background(), b.seg, func(func(projections.LoggedEvent) error) error {
		called = true
		return nil
	})
	if !errors.Is(err, archive.ErrExists) || called {
		t.Fatalf("second put: %v (events read: %v), want ErrExists before reading", err, called)
	}
	if m, err := b.dir.Verify(context.Background(), b.seg.ID); err != nil || m.SHA256 != first.SHA256 {
		t.Fatalf("the first segment after a second put: %+v, %v", m, err)
	}
}

func TestPutRefusesABadSegment(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	for _, seg := range []archive.Segment{
		{ID: "../escape", From: t0, To: t0.Add(time.Hour)},
		{ID: ".hidden", From: t0, To: t0.Add(time.Hour)},
		{ID: "", From: t0, To: t0.Add(time.Hour)},
		{ID: "a/b", From: t0, To: t0.Add(time.Hour)},
		{ID: "backwards", From: t0, To: t0.Add(-time.Hour)},
		{ID: "unbounded", From: t0},
	} {
		if _, err := b.dir.Put(context.Background(), seg, emitter(b.events)); err == nil {
			t.Errorf("put of %+v: no error", seg)
		}
	}
	if got := b.files(t); len(got) != 0 {
		t.Fatalf("files left: %v", got)
	}
}

func TestVerifyCatchesADamagedSegment(t *testing.T) {
	t.Parallel()
	editManifest := func(edit func(map[string]any)) func(b *bundle, m archive.Manifest) error {
		return func(b *bundle, m archive.Manifest) error {
			path := filepath.Join(b.dir.Root, m.ID+".manifest.json")
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var doc map[string]any
			if err := json.Unmarshal(raw, &doc); err != nil {
				return err
			}
			edit(doc)
			raw, _ = json.Marshal(doc)
			return os.WriteFile(path, raw, 0o600)
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(b *bundle, m archive.Manifest) error
		says   string
	}{
		{"a flipped byte", func(b *bundle, m archive.Manifest) error { return flip(filepath.Join(b.dir.Root, m.File), 0.3) }, ""},
		{"a flipped last byte", func(b *bundle, m archive.Manifest) error { return flip(filepath.Join(b.dir.Root, m.File), 1) }, ""},
		{"a truncated file", func(b *bundle, m archive.Manifest) error { return cut(filepath.Join(b.dir.Root, m.File), 1) }, "bytes"},
		{"a deleted file", func(b *bundle, m archive.Manifest) error { return os.Remove(filepath.Join(b.dir.Root, m.File)) }, "missing"},
		{"a file replaced by another segment's", func(b *bundle, m archive.Manifest) error {
			other, err := archive.NewDir(filepath.Join(filepath.Dir(b.dir.Root), "other"))
			if err != nil {
				return err
			}
			events := story(200, t0.Add(time.Minute), "acme", "globex", "initech")
			events[7].Data = json.RawMessage(`{"tampered": true}`)
			om, err := other.Put(context.Background(), b.seg, emitter(events))
			if err != nil {
				return err
			}
			return os.Rename(filepath.Join(other.Root, om.File), filepath.Join(b.dir.Root, m.File))
		}, ""},
		{"an edited event count", editManifest(func(doc map[string]any) { doc["events"] = doc["events"].(float64) - 1 }), "events"},
		{"an edited tenant count", editManifest(func(doc map[string]any) { doc["counts"].(map[string]any)["acme"] = 1.0 }), "counts"},
		{"an edited checksum", editManifest(func(doc map[string]any) { doc["sha256"] = strings.Repeat("0", 64) }), "sha256"},
		{"an edited last position", editManifest(func(doc map[string]any) { doc["last_position"] = 1.0 }), "last_position"},
		{"an edited tenant list", editManifest(func(doc map[string]any) { doc["tenants"] = []string{"acme"} }), "tenants"},
		{"a manifest that names another file", editManifest(func(doc map[string]any) { doc["file"] = "../../etc/passwd" }), "file"},
		{"a manifest that does not decode", func(b *bundle, m archive.Manifest) error {
			return os.WriteFile(filepath.Join(b.dir.Root, m.ID+".manifest.json"), []byte(`{"id":`), 0o600)
		}, "decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 200)
			m := b.put(t)
			if err := tc.damage(b, m); err != nil {
				t.Fatal(err)
			}
			_, err := b.dir.Verify(context.Background(), m.ID)
			if !errors.Is(err, archive.ErrCheckFailed) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("verify: %v, want ErrCheckFailed naming %q", err, tc.says)
			}
			// Reading the lines of a damaged segment ends in the same failure.
			if err := b.dir.Lines(context.Background(), m.ID, func(archive.Line) error { return nil }); !errors.Is(err, archive.ErrCheckFailed) {
				t.Fatalf("lines: %v, want ErrCheckFailed", err)
			}
		})
	}
	t.Run("an unknown segment", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		if _, err := b.dir.Verify(context.Background(), "nosuch"); !errors.Is(err, archive.ErrNotFound) {
			t.Fatalf("verify: %v, want ErrNotFound", err)
		}
	})
}

func TestCompareRowsFindsARowThatDiffers(t *testing.T) {
	t.Parallel()
	b := setup(t, 300)
	m := b.put(t)
	ctx := context.Background()
	changed := slices.Clone(b.events)
	changed[500].Data = json.RawMessage(`{"attempt": 99}`)
	for name, rows := range map[string][]projections.LoggedEvent{
		"a row's data":  changed,
		"a row fewer":   b.events[:len(b.events)-1],
		"a row more":    append(slices.Clone(b.events), story(1, t0, "acme")...),
		"no row at all": nil,
	} {
		if err := archive.CompareRows(ctx, b.dir, m.ID, emitter(rows)); !errors.Is(err, archive.ErrCheckFailed) {
			t.Errorf("%s: %v, want ErrCheckFailed", name, err)
		}
	}
	boom := errors.New("connection reset")
	if err := archive.CompareRows(ctx, b.dir, m.ID, func(emit func(projections.LoggedEvent) error) error {
		for _, e := range b.events[:10] {
			if err := emit(e); err != nil {
				return err
			}
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Errorf("rows that fail: %v, want their error", err)
	}
}

func TestHistoryReadsTheSegmentOfTheDeliveryTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	april := story(40, t0.Add(time.Hour), "acme", "globex")
	may := story(40, t0.AddDate(0, 1, 0).Add(time.Hour), "acme", "globex")
	for _, s := range []struct {
		seg    archive.Segment
		events []projections.LoggedEvent
	}{
		{archive.Segment{ID: "may", From: t0.AddDate(0, 1, 0), To: t0.AddDate(0, 2, 0)}, may},
		{archive.Segment{ID: "april", From: t0, To: t0.AddDate(0, 1, 0)}, april},
	} {
		if _, err := d.Put(ctx, s.seg, emitter(s.events)); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := d.Manifests(ctx)
	if err != nil || len(ms) != 2 || ms[0].ID != "april" || ms[1].ID != "may" {
		t.Fatalf("manifests by From: %+v, %v", ms, err)
	}
	id := may[7].DeliveryID
	if h := archive.Holding(ms, id); len(h) != 1 || h[0].ID != "may" {
		t.Fatalf("holding %s: %+v", id, h)
	}
	lines, from, err := archive.History(ctx, d, id)
	if err != nil || len(from) != 1 || from[0].ID != "may" {
		t.Fatalf("history: %d lines from %+v, %v", len(lines), from, err)
	}
	var versions []int
	for _, l := range lines {
		if l.DeliveryID != id {
			t.Fatalf("line of %s", l.DeliveryID)
		}
		versions = append(versions, l.Version)
	}
	if !slices.Equal(versions, []int{1, 2, 3, 4}) {
		t.Fatalf("versions %v", versions)
	}
	// An id whose time no segment holds is looked for everywhere.
	if h := archive.Holding(ms, commands.DeliveryID("n", commands.Recipient{Channel: "webhook"}, t0.AddDate(1, 0, 0))); len(h) != 2 {
		t.Fatalf("holding an id of next year: %+v", h)
	}
	if _, _, err := archive.History(ctx, d, commands.DeliveryID("nosuch", commands.Recipient{Channel: "webhook"}, t0.Add(time.Hour))); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("history of an unknown delivery: %v", err)
	}

	// A manifest that no longer decodes is named, and hides neither the others nor their
	// deliveries.
	if err := os.WriteFile(filepath.Join(d.Root, "april.manifest.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ms, err := d.Manifests(ctx); !errors.Is(err, archive.ErrCheckFailed) || !strings.Contains(err.Error(), "april") ||
		len(ms) != 1 || ms[0].ID != "may" {
		t.Fatalf("manifests with one damaged: %+v, %v", ms, err)
	}
	if _, _, err := archive.History(ctx, d, id); err != nil {
		t.Fatalf("history beside a damaged manifest: %v", err)
	}
	if _, _, err := archive.History(ctx, d, april[0].DeliveryID); !errors.Is(err, archive.ErrCheckFailed) {
		t.Fatalf("history of a delivery whose manifest is damaged: %v, want ErrCheckFailed", err)
	}
}

func TestDeliveryTimeReadsTheIDsMilliseconds(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 4, 1, 10, 11, 12, 345_000_000, time.UTC)
	got, ok := archive.DeliveryTime(commands.DeliveryID("n", commands.Recipient{Channel: "sms", Recipient: "+15550100"}, at.Add(678*time.Microsecond)))
	if !ok || !got.Equal(at) {
		t.Fatalf("time %s (%v), want %s", got, ok, at)
	}
	for _, id := range []string{"not-a-uuid", "a4a3c6f2-8d0e-4f0e-b3f4-8b2c1d9e7a61"} {
		if _, ok := archive.DeliveryTime(id); ok {
			t.Errorf("%s carries a time", id)
		}
	}
}

// flip inverts the byte at fraction at (0 to 1) of the file.
func flip(path string, at float64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i := min(int(float64(len(b))*at), len(b)-1)
	b[i] ^= 0xff
	return os.WriteFile(path, b, 0o600)
}

// cut removes the last n bytes of the file.
func cut(path string, n int64) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.Truncate(path, fi.Size()-n)
}

// TestPutRefusesAnEventItsLineCannotSayExactly: a line must decode to the event given. Invalid
// UTF-8 is written as U+FFFD, so the line read back says something else than the row did; the
// database never holds such text, but the check must not take it on trust.
func TestPutRefusesAnEventItsLineCannotSayExactly(t *testing.T) {
	t.Parallel()
	b := setup(t, 5)
	b.events[3].Key = "key-\xff"
	if _, err := b.dir.Put(context.Background(), b.seg, emitter(b.events)); !errors.Is(err, archive.ErrCheckFailed) ||
		!strings.Contains(err.Error(), "line 4 does not encode back to itself") {
		t.Fatalf("put: %v, want ErrCheckFailed at line 4", err)
	}
	if got := b.files(t); len(got) != 0 {
		t.Fatalf("files left: %v", got)
	}
}

package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// deliveredWebhook is the stream of a webhook delivered by its first attempt.
func deliveredWebhook(t *testing.T, id, key string, at time.Time) []domain.Event {
	t.Helper()
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: soakTenant, Channel: webhook.Name, Recipient: "http://127.0.0.1:1/hook",
		Payload: []byte(`{"n":1}`), Priority: domain.PriorityNormal, MaxAttempts: 5, RequestKey: key}, at)
	if err != nil {
		t.Fatal(err)
	}
	return appendSteps(t, events, []func() ([]domain.Event, error){
		func() ([]domain.Event, error) { return d.Queue(at) },
		func() ([]domain.Event, error) { return d.StartAttempt(webhook.Name, at) },
		func() ([]domain.Event, error) {
			return d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeDelivered}, domain.RetryPolicy{MaxAttempts: 5}, at, 0)
		},
	})
}

// archiveWith puts the streams into a new archive directory as one segment, as a retention pass
// would, and returns the directory.
func archiveWith(t *testing.T, from, to time.Time, streams ...[]domain.Event) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "archive")
	dir, err := archive.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var pos int64
	_, err = dir.Put(context.Background(), archive.Segment{ID: "events_p1_2", Partition: "events_p1_2", From: from, To: to},
		func(emit func(projections.LoggedEvent) error) error {
			for _, events := range streams {
				for _, e := range events {
					pos++
					e.Position = pos
					if err := emit(projections.LoggedEvent{Event: e, At: projections.LogPosition{TransactionID: uint64(pos), Position: pos}}); err != nil {
						return err
					}
				}
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestCheckCountsTheArchive: a delivery whose history is only in the archive counts as it would
// in the hot store (delivered, not lost); one in neither store is lost.
func TestCheckCountsTheArchive(t *testing.T) {
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	archivedID, hotID, lostID := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	root := archiveWith(t, at.Add(-time.Second), at.Add(time.Second), deliveredWebhook(t, archivedID, "k-archived", at))

	reader := newArchiveReader(root)
	if err := reader.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	hot := map[string][]domain.Event{hotID: deliveredWebhook(t, hotID, "k-hot", at)}
	ids := []string{archivedID, hotID, lostID}
	streams, archived := mergeArchived(hot, reader, ids)
	if archived[archivedID] != "events_p1_2" || len(archived) != 1 {
		t.Fatalf("archived = %v, want only %s in events_p1_2", archived, archivedID)
	}
	v := check(evidence{ids: map[string]string{"k-archived": archivedID, "k-hot": hotID, "k-lost": lostID},
		streams: streams, archived: archived, segments: len(reader.manifests())})

	if v.Lost() != 1 || v.Missing != 1 {
		t.Errorf("lost = %d (missing %d), want 1: the delivery in neither store", v.Lost(), v.Missing)
	}
	if v.Delivered != 2 {
		t.Errorf("delivered = %d, want 2: the archived delivery counts as the hot one", v.Delivered)
	}
	if r := v.Retention; r.Archived != 1 || r.Hot != 1 || r.Segments != 1 {
		t.Errorf("retention = %+v, want archived=1 hot=1 segments=1", r)
	}
	if _, ok := v.examples[lostID]; !ok {
		t.Errorf("the lost delivery is not among the examples: %v", v.examples)
	}
	if why, ok := v.examples[archivedID]; ok && strings.Contains(why, "missing") {
		t.Errorf("the archived delivery is named missing: %s", why)
	}
	lost := false
	for _, f := range v.Failures {
		lost = lost || strings.HasPrefix(f, "lost: 1 ")
	}
	if !lost {
		t.Errorf("no failure says one delivery was lost: %v", v.Failures)
	}
}

// TestArchiveReaderWithoutArchive: before the first segment the directory does not exist, and
// the reader holds nothing.
func TestArchiveReaderWithoutArchive(t *testing.T) {
	reader := newArchiveReader(filepath.Join(t.TempDir(), "archive"))
	if err := reader.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := reader.lookup(uuid.NewString()); ok || len(reader.manifests()) != 0 {
		t.Error("an archive that does not exist holds something")
	}
}

func TestArchivedRowsOnly(t *testing.T) {
	archived := map[string]bool{"a": true, "b": true}
	for _, tc := range []struct {
		name, out string
		want      bool
	}{
		{"extra rows of archived deliveries", "status: a: live a row, expected (no row)\nstatus: 2 differences at 10/5\nledger: views differ", true},
		{"a row of a hot delivery", "status: c: live a row, expected (no row)\nstatus: 1 differences at 10/5", false},
		{"a differing column", "status: a: state: live queued, expected delivered\nstatus: 1 differences at 10/5", false},
		{"more than the archived rows", "status: a: live a row, expected (no row)\nstatus: 3 differences at 10/5 (first 1 shown)", false},
	} {
		if _, ok := archivedRowsOnly(tc.out, archived); ok != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, ok, tc.want)
		}
	}
}

// TestCheckArchivedLog: an archived stream no accepted request answered with is named.
func TestCheckArchivedLog(t *testing.T) {
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	known, stray := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	root := archiveWith(t, at.Add(-time.Second), at.Add(time.Second), deliveredWebhook(t, known, "k-known", at), deliveredWebhook(t, stray, "k-stray", at))
	reader := newArchiveReader(root)
	if err := reader.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	v := &verdict{}
	checkArchivedLog(v, reader, map[string]string{"k-known": known})
	if len(v.Failures) != 1 || !strings.Contains(v.Failures[0], "1 archived streams") {
		t.Errorf("failures = %v, want one naming the stray stream", v.Failures)
	}
	if _, ok := v.examples[stray]; !ok {
		t.Errorf("the stray stream is not among the examples: %v", v.examples)
	}
}

// TestCheckArchivedHistoryIsWhole: an archived stream that lacks its first events, or ends in a
// state that is not terminal, fails the run.
func TestCheckArchivedHistoryIsWhole(t *testing.T) {
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	cut, open := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	openStream := deliveredWebhook(t, open, "k-open", at)
	root := archiveWith(t, at.Add(-time.Second), at.Add(time.Second), deliveredWebhook(t, cut, "k-cut", at)[1:], openStream[:len(openStream)-1])
	reader := newArchiveReader(root)
	if err := reader.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	ids := []string{cut, open}
	streams, archived := mergeArchived(nil, reader, ids)
	v := &verdict{}
	checkRetention(v, evidence{ids: map[string]string{"k-cut": cut, "k-open": open}, streams: streams, archived: archived})
	if len(v.Failures) != 1 || !strings.HasPrefix(v.Failures[0], "2 archived deliveries") {
		t.Errorf("failures = %v, want one naming both archived deliveries", v.Failures)
	}
	for _, id := range ids {
		if _, ok := v.examples[id]; !ok {
			t.Errorf("%s is not among the examples: %v", id, v.examples)
		}
	}
}

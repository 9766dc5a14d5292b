package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/domain"
)

// Retention as the soak runs it: partitions a second wide leave the hot store once their
// deliveries are terminal and ten seconds old, and payload bodies leave after six. The keep is
// longer than what the soak still does to a settled delivery (a cancel at most a few seconds
// after its send_at, the replay of a dead webhook, a producer's retry of an unanswered accept),
// so that archiving changes no answer the checks expect, and short enough that partitions leave,
// under the kills, all through a short run. Narrow partitions leave more often: a partition that
// holds one unknown outcome (not terminal) stays.
const (
	retentionKeep      = 10 * time.Second
	retentionPayloads  = 6 * time.Second
	retentionPartition = time.Second
	// archiveWait bounds the final wait for a delivery found in neither store: a retention pass
	// between its detach and its manifest holds the partition out of the hot store for a moment
	// (or attaches it again).
	archiveWait = 30 * time.Second
)

// archiveReader reads the soak's archive directory as the retention pass fills it. A segment is
// written once and never changes once its manifest exists, so each is read once, when it first
// appears, and its streams kept.
type archiveReader struct {
	root string

	mu sync.Mutex
	// segments are the manifests read so far, by id.
	segments map[string]archive.Manifest
	// streams are the archived streams by delivery id, segmentOf the segment of each.
	streams   map[string][]domain.Event
	segmentOf map[string]string
}

func newArchiveReader(root string) *archiveReader {
	return &archiveReader{root: root, segments: map[string]archive.Manifest{}, streams: map[string][]domain.Event{},
		segmentOf: map[string]string{}}
}

// refresh reads the segments that appeared since the last refresh. A directory not created yet
// (no pass has archived anything) holds nothing.
func (a *archiveReader) refresh(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	dir, err := archive.OpenDir(a.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	ms, err := dir.Manifests(ctx)
	if err != nil {
		return fmt.Errorf("read the archive: %w", err)
	}
	for _, m := range ms {
		if _, ok := a.segments[m.ID]; ok {
			continue
		}
		streams := map[string][]domain.Event{}
		if err := dir.Lines(ctx, m.ID, func(l archive.Line) error {
			streams[l.DeliveryID] = append(streams[l.DeliveryID], lineEvent(l))
			return nil
		}); err != nil {
			return fmt.Errorf("read archive segment %s: %w", m.ID, err)
		}
		for id, events := range streams {
			a.streams[id], a.segmentOf[id] = events, m.ID
		}
		a.segments[m.ID] = m
	}
	return nil
}

// lookup returns the archived stream of delivery id and its segment.
func (a *archiveReader) lookup(id string) ([]domain.Event, string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	events, ok := a.streams[id]
	return events, a.segmentOf[id], ok
}

// manifests returns the segments read so far.
func (a *archiveReader) manifests() []archive.Manifest {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]archive.Manifest, 0, len(a.segments))
	for _, m := range a.segments {
		out = append(out, m)
	}
	return out
}

// lineEvent is an archived line as the event it was in the hot store.
func lineEvent(l archive.Line) domain.Event {
	return domain.Event{DeliveryID: l.DeliveryID, Tenant: l.Tenant, Version: l.Version, Type: l.Type, Key: l.IdempotencyKey,
		Data: l.Data, RecordedAt: l.RecordedAt, Position: l.Position}
}

// histories loads the streams of the accepted deliveries from the hot store and, for the ones it
// no longer holds, from the archive: a delivery counts wherever its whole history is.
type histories struct {
	store   *postgres.EventStore
	archive *archiveReader
}

// load returns the streams of ids found in either store, and the segment of each one found only
// in the archive.
func (h *histories) load(ctx context.Context, ids []string) (map[string][]domain.Event, map[string]string, error) {
	hot, err := loadStreams(ctx, h.store, ids)
	if err != nil {
		return nil, nil, err
	}
	streams, archived := mergeArchived(hot, h.archive, ids)
	if len(streams) == len(ids) || h.archive == nil {
		return streams, archived, nil
	}
	// The segments that appeared since the last look: read after the hot store, so that a
	// delivery whose partition left in between is found here.
	if err := h.archive.refresh(ctx); err != nil {
		return nil, nil, err
	}
	streams, archived = mergeArchived(hot, h.archive, ids)
	return streams, archived, nil
}

// loadSettled is load for the final checks: a delivery found in neither store is looked for
// again until archiveWait has passed, since a retention pass may hold its partition between
// the hot store and the archive for a moment. What is still in neither is lost.
func (h *histories) loadSettled(ctx context.Context, ids []string) (map[string][]domain.Event, map[string]string, error) {
	deadline := time.Now().Add(archiveWait)
	for {
		streams, archived, err := h.load(ctx, ids)
		if err != nil || len(streams) == len(ids) || time.Now().After(deadline) || ctx.Err() != nil {
			return streams, archived, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// mergeArchived is the hot streams of ids, and for each id the hot store does not hold, its
// stream in the archive (named in archived with its segment). A delivery in both (a partition
// attached again after a failed check leaves its segment behind) is the hot store's: it may
// have moved since.
func mergeArchived(hot map[string][]domain.Event, a *archiveReader, ids []string) (map[string][]domain.Event, map[string]string) {
	streams := make(map[string][]domain.Event, len(ids))
	archived := map[string]string{}
	for _, id := range ids {
		if events, ok := hot[id]; ok {
			streams[id] = events
			continue
		}
		if a == nil {
			continue
		}
		if events, segment, ok := a.lookup(id); ok {
			streams[id], archived[id] = events, segment
		}
	}
	return streams, archived
}

// retentionVerdict is what the retention did during the run, for the report.
type retentionVerdict struct {
	// Archived counts the accepted deliveries found only in the archive, Hot those found in the
	// hot store; Segments the archive's segments, PayloadsExpired the deliveries whose payload
	// body had expired.
	Archived, Hot, Segments, PayloadsExpired int
}

// checkRetention counts where each delivery was found and the payloads that expired, and checks
// that each archived delivery's history is whole: its events from version 1 (its accept) on, none
// missing, ending in a terminal state (the pass archives no other).
func checkRetention(v *verdict, ev evidence) {
	r := &v.Retention
	broken := 0
	for _, id := range ev.ids {
		events, ok := ev.streams[id]
		if !ok {
			continue
		}
		if segment, archived := ev.archived[id]; archived {
			r.Archived++
			if err := wholeHistory(events); err != nil {
				broken++
				v.example(id, fmt.Sprintf("archived in %s: %v", segment, err))
			}
		} else {
			r.Hot++
		}
		if d, err := domain.Rehydrate(events); err == nil && d.PayloadExpired() {
			r.PayloadsExpired++
		}
	}
	r.Segments = ev.segments
	if broken > 0 {
		v.fail("%d archived deliveries have no whole, terminal history in the archive", broken)
	}
}

// wholeHistory says what is wrong with an archived stream: a gap in its versions, a first event
// that is not the accept, or a last state that is not terminal.
func wholeHistory(events []domain.Event) error {
	for i, e := range events {
		if e.Version != i+1 {
			return fmt.Errorf("event %d of the stream is version %d", i+1, e.Version)
		}
	}
	if len(events) == 0 || events[0].Type != domain.EventAccepted {
		return errors.New("the stream does not start with its accept")
	}
	d, err := domain.Rehydrate(events)
	if err != nil {
		return err
	}
	if !d.State().Terminal() {
		return fmt.Errorf("the stream ends %s, not terminal", d.State())
	}
	return nil
}

// verifyArchive runs `ledger archive verify` on the soak's archive directory and returns its
// last line; a directory the retention never created is nothing to verify.
func verifyArchive(ctx context.Context, ledger, dir string) (string, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return "no archive directory: nothing was archived", nil
	}
	cmd := exec.CommandContext(ctx, ledger, "archive", "verify", dir)
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		return "", fmt.Errorf("ledger archive verify %s: %w: %s", dir, err, text)
	}
	return lastLine(text), nil
}

// checkArchivedLog is checkLog's count over the archive: every archived stream answers an
// accepted request, and no idempotency key appears twice among the archived events (a key names
// its delivery, so none can be both hot and archived).
func checkArchivedLog(v *verdict, a *archiveReader, ids map[string]string) {
	accepted := map[string]bool{}
	for _, id := range ids {
		accepted[id] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	keys := map[string]int{}
	extra := 0
	for id, events := range a.streams {
		if !accepted[id] {
			extra++
			v.example(id, "an archived stream that the API never answered with")
		}
		for _, e := range events {
			keys[e.Key]++
		}
	}
	var dups []string
	for _, key := range sortedKeys(keys) {
		if keys[key] > 1 && len(dups) < 10 {
			dups = append(dups, fmt.Sprintf("%s ×%d", key, keys[key]))
		}
	}
	if extra > 0 {
		v.fail("%d archived streams were opened that no accepted request answered with (a key accepted twice?)", extra)
	}
	if len(dups) > 0 {
		v.fail("idempotency keys appear more than once across the archive: %s", strings.Join(dups, ", "))
	}
}

package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchRetentionPhase runs the retention phase's quick variant (keep 6 s, partitions of 2 s,
// four periods at 200/s) against the real services: partitions leave for the archive during the
// run, every period is sampled with the schema's size and the hot store's rows, the accept's
// seconds are tagged by the archive's windows, and the phase reports its three targets alone.
func TestBenchRetentionPhase(t *testing.T) {
	t.Parallel()
	base := testBase(t)
	base.WorkerConcurrency = 8
	opts := Options{Quick: true, Only: []string{"retention"}, ResultsDir: t.TempDir()}
	opts.ApplyQuick()
	rep, out := runBench(t, base, opts)
	r := rep.Retention
	if r == nil || len(r.Samples) != quickRetentionPeriods {
		t.Fatalf("retention result %+v, want %d samples", r, quickRetentionPeriods)
	}
	for i, s := range r.Samples {
		if s.SchemaBytes <= 0 || s.OutboxBytes <= 0 || s.OutboxBytes+s.AheadBytes >= s.SchemaBytes || s.AheadBytes <= 0 || s.HotDeliveries <= 0 || s.HotEvents < s.HotDeliveries || s.Accepted <= 0 {
			t.Fatalf("sample %d: %+v", i+1, s)
		}
	}
	last := r.Samples[len(r.Samples)-1]
	// With keep 6 s and partitions of 2 s, histories of the first 16 s leave within the 24 s:
	// the hot store holds less than was accepted, and the archive holds what left.
	if last.Segments == 0 || last.ArchivedDeliveries == 0 || last.ArchiveBytes == 0 || last.ArchiveFiles == 0 {
		t.Fatalf("nothing archived by the end: %+v", last)
	}
	if last.HotDeliveries+last.ArchivedDeliveries > last.Accepted+int64(DefaultRetentionRate) || last.HotDeliveries >= last.Accepted {
		t.Fatalf("hot %d + archived %d against %d accepted", last.HotDeliveries, last.ArchivedDeliveries, last.Accepted)
	}
	if got, want := rep.Counts["retention_accepted"], DefaultRetentionRate*int(quickRetentionPeriods*quickRetentionKeep.Seconds()); got != want {
		t.Fatalf("accepted %d, want %d", got, want)
	}
	archiving := rep.Counts["retention_seconds_archiving"]
	if archiving == 0 || archiving >= rep.Counts["retention_seconds"] {
		t.Fatalf("%d of %d seconds tagged archiving, want some and not all", archiving, rep.Counts["retention_seconds"])
	}
	for _, k := range []string{"retention_accept_p99_during_archive", "retention_accept_p99_outside_archive"} {
		if rep.LatencyMS[k] <= 0 {
			t.Fatalf("%s %v", k, rep.LatencyMS[k])
		}
	}
	if rep.Ratios["retention_size_max_over_min"] < 1 || rep.Ratios["retention_accept_p99_during_vs_outside"] <= 0 {
		t.Fatalf("ratios %v", rep.Ratios)
	}
	hot, archive := rep.BytesPerDelivery["retention_hot"], rep.BytesPerDelivery["retention_archive"]
	if hot < 500 || hot > 50_000 || archive <= 0 || archive >= hot {
		t.Fatalf("bytes per delivery: hot %.0f, archive %.0f", hot, archive)
	}
	if r.Tables["events"] <= 0 || r.EventsParts["data.recipient"] <= 0 || r.EventsParts["relation events_idempotency_key_key"] <= 0 || r.EventsParts["relation table"] <= 0 || r.Relations["status_view.table"] <= 0 {
		t.Fatalf("breakdown: tables %v, events %v", r.Tables, r.EventsParts)
	}
	var names []string
	for _, target := range rep.Targets {
		names = append(names, target.Name)
	}
	if got := strings.Join(names, ","); got != "retention_size_max_over_min,retention_hot_bytes_per_delivery,retention_accept_p99_during_vs_outside" {
		t.Fatalf("targets %s, want the retention phase's three", got)
	}
	if !strings.Contains(out, "accept p99 while a partition leaves") {
		t.Fatalf("no retention line in\n%s", out)
	}
}

// TestRetentionSecondsLeaveTheSamplesOut: a second in which the phase's own sample ran counts
// neither during nor outside the archive, so the sample's count(*) over events is not charged to
// the ledger.
func TestRetentionSecondsLeaveTheSamplesOut(t *testing.T) {
	origin := time.UnixMilli(1_000_000_000_500) // between boundaries of a 10 s width
	seconds := make([][]float64, retentionWarmUp+6)
	for s := range seconds {
		seconds[s] = []float64{float64(s)}
	}
	w := retentionWarmUp
	res := &RetentionResult{Samples: []RetentionSample{{AtSeconds: float64(w + 1), TookSeconds: 0.3}}}
	windows := []retentionWindow{{from: origin.Add(time.Duration(w+4) * time.Second), to: origin.Add(time.Duration(w+5)*time.Second - time.Millisecond)}}
	during, outside, _ := retentionSeconds(res, seconds, origin, 10*time.Second, windows)
	if len(during) != 1 || during[0] != float64(w+4) {
		t.Fatalf("during %v, want [%d]", during, w+4)
	}
	if slices.Contains(outside, float64(w+1)) || !slices.Contains(outside, float64(w)) || !slices.Contains(outside, float64(w+2)) {
		t.Fatalf("outside %v: want second %d (the sample's) left out and %d, %d in", outside, w+1, w, w+2)
	}
	if !res.Seconds[w+1].Sampling || res.Seconds[w].Sampling {
		t.Fatalf("seconds %+v: only %d is tagged sampling", res.Seconds, w+1)
	}
}

package bench

import (
	"strings"
	"testing"
	"time"
)

// TestBenchSuppressPhase runs the suppress phase at a small scale against the real services:
// the fill lands in the table whose bytes it reports, both ways are timed in their rounds, the
// accepts to listed recipients are answered suppressed, and the phase reports its target alone.
func TestBenchSuppressPhase(t *testing.T) {
	t.Parallel()
	base := testBase(t)
	opts := Options{Only: []string{"suppress"}, Phase: 400 * time.Millisecond, SuppressEntries: 3000, ResultsDir: t.TempDir()}
	rep, out := runBench(t, base, opts)
	if got := rep.Counts["suppress_entries"]; got != 3000 {
		t.Fatalf("filled %d entries, want 3000", got)
	}
	if got, want := rep.Counts["suppress_probes_suppressed"], suppressProbes; got != want || rep.Counts["suppress_probes"] != want {
		t.Fatalf("%d of %d probes answered suppressed, want %d of %d", got, rep.Counts["suppress_probes"], want, want)
	}
	// Half of the rounds each way: each way has its own samples, those the percentiles report.
	with, without := rep.Samples["accept, 3000 suppressions"], rep.Samples["accept, no suppressions"]
	if len(with) == 0 || len(without) == 0 || rep.Counts["suppress_accepts_with"] != len(with) {
		t.Fatalf("%d accepts timed with, %d without (counts %v)", len(with), len(without), rep.Counts)
	}
	if rep.LatencyMS["suppress_accept_p99_with"] != percentile(with, .99) || rep.LatencyMS["suppress_accept_p99_without"] != percentile(without, .99) {
		t.Fatalf("latencies %v", rep.LatencyMS)
	}
	if rep.LatencyMS["suppress_probe_p99_with"] <= 0 || rep.LatencyMS["suppress_probe_p99_without"] <= 0 {
		t.Fatalf("probe latencies %v", rep.LatencyMS)
	}
	if r := rep.Ratios["suppress_accept_p99_with_vs_without"]; r <= 0 {
		t.Fatalf("ratios %v", rep.Ratios)
	}
	// An entry and its added event take some bytes each, and not a kilobyte's worth of bloat.
	for _, k := range []string{"suppress_entry_suppressions", "suppress_entry_recipient_events"} {
		if b := rep.BytesPerDelivery[k]; b <= 50 || b > 2000 {
			t.Fatalf("%s %.0f bytes per entry", k, b)
		}
	}
	var names []string
	for _, target := range rep.Targets {
		names = append(names, target.Name)
	}
	if got := strings.Join(names, ","); got != "suppress_accept_p99_with_vs_without" {
		t.Fatalf("targets %s, want the suppress phase's one", got)
	}
	if !strings.Contains(out, "suppression list, 3000 entries") {
		t.Fatalf("no suppress line in\n%s", out)
	}
}

package bench

import (
	"github.com/deliveryledger/ledger/cmd/internal/app"

	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// TestBenchFixedRateRunBalances runs the benchmark's fixed-rate phase at a small scale against
// the real services: every request sent is accounted for, only the warm-up is left untimed, and
// a partial run lists only the targets it measured.
func TestBenchFixedRateRunBalances(t *testing.T) {
	t.Parallel()
	base := testBase(t)
	base.WorkerConcurrency = 8
	opts := Options{Only: []string{"rate"}, Rate: 50, RateFor: time.Second, ResultsDir: t.TempDir()}
	rep, out := runBench(t, base, opts)
	sent := 50 * int((benchWarmUp + time.Second).Seconds())
	if rep.Counts["rate_sent"] != sent || rep.Counts["rate_delivered"] != sent {
		t.Fatalf("counts %v, want %d sent and delivered", rep.Counts, sent)
	}
	if got := len(rep.Samples["end to end at 50/s"]); got != 50 {
		t.Fatalf("%d timed deliveries, want the 50 after the warm-up", got)
	}
	if p99 := rep.LatencyMS["e2e_p99_at_50"]; p99 <= 0 {
		t.Fatalf("p99 %v", p99)
	}
	// Every delivery commits at least its accept; other tests share the database's counter.
	if c := rep.CommitsPerDelivery["at_50"]; c < 1 {
		t.Fatalf("commits per delivery %v, want at least the accept's", c)
	}
	// Transaction ids are the cluster's: other tests' writes add to them, never take away.
	if w := rep.CommitsPerDelivery["at_50_writing"]; w < 1 {
		t.Fatalf("writing commits per delivery %v, want at least the accept's", w)
	}
	if s, ok := rep.StatementsPerDelivery["at_50"]; ok && s < 3 {
		t.Fatalf("statements per delivery %v, want at least the accept's, the start's and the outcome's", s)
	}
	var names []string
	for _, target := range rep.Targets {
		names = append(names, target.Name)
	}
	if got := strings.Join(names, ","); got != "e2e_p99_at_50,relay_lag_p50" {
		t.Fatalf("targets %s, want only the two this phase measures", got)
	}
	if !strings.Contains(out, "where the time went") {
		t.Fatalf("no stage breakdown in\n%s", out)
	}
}

// TestBenchReportCreatesItsDirectories: `make bench` writes bench/results/latest.json, and a
// fresh clone has no bench/results (it is ignored by git): the report must not be lost at the
// end of a run for want of a directory.
func TestBenchReportCreatesItsDirectories(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "bench", "results", "latest.json")
	rep := &Report{StartedAt: time.Now(), Ratios: map[string]float64{"e2e_vs_rabbitmq": 0.1}}
	written, err := WriteReport(rep, out, filepath.Join(root, "bench", "results"))
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 3 {
		t.Fatalf("wrote %v, want the --out file, a JSON report and a chart", written)
	}
	body, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(body), `"e2e_vs_rabbitmq": 0.1`) {
		t.Fatalf("--out file: %v, %s", err, body)
	}
}

// testBase is the ledger configuration the benchmark's tests run against: the test services,
// the test database made sure of (the benchmark works in schemas of its own).
func testBase(t *testing.T) app.Config {
	t.Helper()
	pgtest.New(t)
	base := app.DefaultConfig()
	base.DatabaseURL = pgtest.URL()
	base.AMQPURL = amqptest.URL()
	return base
}

// runBench runs the benchmark with opts and returns its report and what it printed (also in
// the test's log), failing the test if the run fails or is void.
func runBench(t *testing.T, base app.Config, opts Options) (*Report, string) {
	t.Helper()
	var out bytes.Buffer
	rep, err := Run(context.Background(), base, opts, &out)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	if rep.Void {
		t.Fatalf("run is void: %s", rep.VoidReason)
	}
	return rep, out.String()
}

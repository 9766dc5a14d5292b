package bench

import (
	"context"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// TestRawCommitTimesSingleRowCommits: the single client's baseline times committed single-row
// inserts itself and by pgbench (part of PostgreSQL's server package, so present wherever the
// tests run), on a table of the run's schema that it leaves behind it dropped.
func TestRawCommitTimesSingleRowCommits(t *testing.T) {
	t.Parallel()
	s := pgtest.New(t)
	ctx := context.Background()
	r, err := rawCommit(ctx, pgtest.URL(), s.Name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.latencies) < 10 {
		t.Fatalf("%d commits in a second, want at least 10", len(r.latencies))
	}
	for _, ms := range r.latencies {
		if ms <= 0 || ms > 1000 {
			t.Fatalf("a commit of %v ms", ms)
		}
	}
	if r.pgbenchAverage <= 0 || r.pgbenchAverage > 1000 {
		t.Fatalf("pgbench's average %v ms", r.pgbenchAverage)
	}
	var left bool
	if err := s.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.Name+".bench_raw_commit").Scan(&left); err != nil || left {
		t.Fatalf("the baseline's table is left behind (%v)", err)
	}
}

func TestPgbenchAverageReadsItsReport(t *testing.T) {
	out := []byte("transaction type: insert.sql\nnumber of transactions actually processed: 9361\nlatency average = 0.320 ms\ninitial connection time = 2.981 ms\ntps = 3122.6 (without initial connection time)\n")
	if got, err := pgbenchAverage(out); err != nil || got != 0.32 {
		t.Fatalf("%v %v, want 0.32", got, err)
	}
	if _, err := pgbenchAverage([]byte("pgbench: error: connection refused")); err == nil {
		t.Fatal("a report without a latency read as one")
	}
}

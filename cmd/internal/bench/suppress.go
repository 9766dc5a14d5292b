package bench

import (
	"github.com/deliveryledger/ledger/cmd/internal/app"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// The suppress phase (issue 25, point 7): what a large suppression list costs the accept, whose
// every recipient is probed against it. A million entries are filled for the benchmark's tenant,
// and the accept's latency is timed against a ledger whose list is empty, in the same run.

// Defaults of the suppress phase: the million entries, and a fraction under --quick.
const (
	DefaultSuppressEntries = 1_000_000
	quickSuppressEntries   = 20_000
	// suppressFillChunk entries go in per statement, within suppressFillBudget; suppressDeadline
	// bounds the whole phase.
	suppressFillChunk  = 50_000
	suppressFillBudget = 5 * time.Minute
	suppressDeadline   = 10 * time.Minute
	// suppressRounds rounds each way of a quarter of --phase, in the order ABBA, from
	// suppressClients closed-loop clients; each ledger is first warmed up for suppressWarmUp,
	// not timed. Many short rounds: the shared machine's load moves within seconds, and the
	// more often the two ways alternate, the less of that drift falls on one of them.
	suppressRounds  = 8
	suppressClients = 16
	suppressWarmUp  = time.Second
	// suppressProbes accepts to listed recipients check that the probe finds them at scale.
	suppressProbes = 20
	// suppressProbeCalls probes a round, from one client, time the probe's query alone (the
	// SuppressionStore's Blocks), away from the HTTP path and the accept's commit.
	suppressProbeCalls = 500
	// suppressTarget is the bound: accept p99 with the list within 5 % of without.
	suppressTarget = 1.05
)

// The fill is a bulk INSERT of source 'import' entries straight into suppressions, each with
// its stream's suppression.added event in recipient_events, as POST /v1/suppressions writes
// them: a million API requests would take longer than the rest of the run, and what is
// measured is the probe at accept, not the add.
//
// The comparison is between two ledgers of the same build and settings in the same process, each
// on its schema: one whose suppressions table holds the entries, one whose table is empty. Both
// run all through the phase and take the rounds in turn (with, without, without, with, ...), so
// a drift of the shared machine's load falls on both ways alike. Two tenants on one schema would
// not measure the list's size: the second tenant's probe would descend the same million-entry
// index. Truncating between rounds would refill a million entries each round.

// suppressEntries is the phase's list size, with its default.
func (o *Options) suppressEntries() int {
	if o.SuppressEntries > 0 {
		return o.SuppressEntries
	}
	return DefaultSuppressEntries
}

// suppressRecipient is the n-th listed recipient: a webhook URL of the sink that the timed
// accepts (to the sink's URL itself) never use.
func suppressRecipient(sink string, n int) string { return fmt.Sprintf("%s?s=%d", sink, n) }

// benchSuppress runs the suppress phase: fill the list of one ledger (api role only), measure
// its bytes, time accepts to recipients that are not listed against a ledger whose list is
// empty, and check that accepts to listed recipients are answered suppressed.
func benchSuppress(ctx context.Context, base app.Config, opts Options, rep *Report, sink *benchSink, track benchTrack, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, suppressDeadline)
	defer cancel()
	benchLog(out, "suppress: load average at the start %s", loadAverage())
	full, err := track(newBenchEnv(ctx, base, opts.Logs, "suppress_full", "api"))
	if err != nil {
		return err
	}
	defer full.stop(base)
	empty, err := track(newBenchEnv(ctx, base, opts.Logs, "suppress_empty", "api"))
	if err != nil {
		return err
	}
	defer empty.stop(base)

	want := opts.suppressEntries()
	filled, err := suppressFill(ctx, full, sink.url, want, out)
	if err != nil {
		return err
	}
	rep.Counts["suppress_entries"] = filled
	if filled < want {
		benchLog(out, "suppress: the fill reached %d of %d entries in %s: the figures are for %d", filled, want, suppressFillBudget, filled)
	}
	for _, env := range []*benchEnv{full, empty} {
		if _, err := env.pool.Exec(ctx, "VACUUM ANALYZE suppressions, recipient_events, preferences"); err != nil {
			return fmt.Errorf("suppress: analyze: %w", err)
		}
	}
	if err := suppressBytes(ctx, full, rep, filled, out); err != nil {
		return err
	}
	// The fill wrote a lot of WAL: flush it now, so the checkpoint it would trigger does not
	// land in a round (needs a superuser; best effort).
	if _, err := full.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		benchLog(out, "suppress: checkpoint after the fill failed (continuing): %v", err)
	}

	with, without, err := suppressRoundsRun(full, empty, sink.url, opts.Phase/4, out)
	if err != nil {
		return err
	}
	rep.LatencyMS["suppress_accept_p50_with"], rep.LatencyMS["suppress_accept_p99_with"] = percentile(with, .5), percentile(with, .99)
	rep.LatencyMS["suppress_accept_p50_without"], rep.LatencyMS["suppress_accept_p99_without"] = percentile(without, .5), percentile(without, .99)
	rep.Counts["suppress_accepts_with"], rep.Counts["suppress_accepts_without"] = len(with), len(without)
	rep.Samples[fmt.Sprintf("accept, %d suppressions", filled)] = with
	rep.Samples["accept, no suppressions"] = without
	if p := percentile(without, .99); p > 0 {
		rep.Ratios["suppress_accept_p99_with_vs_without"] = percentile(with, .99) / p
	}
	if p := percentile(without, .5); p > 0 {
		rep.Ratios["suppress_accept_p50_with_vs_without"] = percentile(with, .5) / p
	}

	probeWith, probeWithout, err := suppressProbeTimes(ctx, full, empty, sink.url)
	if err != nil {
		return err
	}
	rep.LatencyMS["suppress_probe_p50_with"], rep.LatencyMS["suppress_probe_p99_with"] = percentile(probeWith, .5), percentile(probeWith, .99)
	rep.LatencyMS["suppress_probe_p50_without"], rep.LatencyMS["suppress_probe_p99_without"] = percentile(probeWithout, .5), percentile(probeWithout, .99)
	benchLog(out, "suppress: the probe's query alone (%d rounds of %d each way, one client): with p50 %.3f ms p99 %.3f ms, without p50 %.3f ms p99 %.3f ms",
		suppressRounds, suppressProbeCalls, percentile(probeWith, .5), percentile(probeWith, .99), percentile(probeWithout, .5), percentile(probeWithout, .99))

	suppressed, err := suppressProbe(full, sink.url, filled)
	if err != nil {
		return err
	}
	rep.Counts["suppress_probes"], rep.Counts["suppress_probes_suppressed"] = min(suppressProbes, filled), suppressed
	if suppressed != min(suppressProbes, filled) {
		rep.Void, rep.VoidReason = true, fmt.Sprintf("suppress: %d of %d accepts to listed recipients answered suppressed", suppressed, min(suppressProbes, filled))
	}

	ratio := rep.Ratios["suppress_accept_p99_with_vs_without"]
	met := "met"
	if ratio > suppressTarget {
		met = "NOT met"
	}
	benchLog(out, "suppression list, %d entries, accept at %d clients (%d rounds each way): with p50 %.2f ms p99 %.2f ms (%d accepts), without p50 %.2f ms p99 %.2f ms (%d); p99 %.3fx, p50 %.3fx (p99 <= %.2fx: %s); %d of %d accepts to listed recipients answered suppressed",
		filled, suppressClients, suppressRounds, percentile(with, .5), percentile(with, .99), len(with),
		percentile(without, .5), percentile(without, .99), len(without), ratio, rep.Ratios["suppress_accept_p50_with_vs_without"],
		suppressTarget, met, suppressed, min(suppressProbes, filled))
	benchLog(out, "suppress: load average at the end %s", loadAverage())
	return nil
}

// suppressFill inserts n entries for the benchmark's tenant, each with its added event, in
// statements of suppressFillChunk, within suppressFillBudget; it returns how many it inserted.
func suppressFill(ctx context.Context, env *benchEnv, sink string, n int, out io.Writer) (int, error) {
	const fill = `WITH added AS (
  INSERT INTO suppressions (id, tenant, channel, recipient, source, reason, created_at)
  SELECT gen_random_uuid(), $1, $2, $3::text || g, 'import', 'bench fill', $4::timestamptz
  FROM generate_series($5::int, $6::int) g
  RETURNING id, tenant, channel, recipient, source, reason, evidence, created_at
)
INSERT INTO recipient_events (stream_id, version, tenant, type, idempotency_key, data, recorded_at)
SELECT id, 1, tenant, 'suppression.added', id::text || '/added',
       jsonb_build_object('channel', channel, 'recipient', recipient, 'source', source, 'reason', reason,
                          'evidence', evidence), created_at
FROM added`
	start := time.Now()
	prefix := strings.TrimSuffix(suppressRecipient(sink, 0), "0")
	done := 0
	for done < n && time.Since(start) < suppressFillBudget {
		k := min(suppressFillChunk, n-done)
		if _, err := env.pool.Exec(ctx, fill, "bench", webhook.Name, prefix, time.Now().UTC(), done+1, done+k); err != nil {
			return done, fmt.Errorf("suppress fill: %w", err)
		}
		done += k
	}
	benchLog(out, "suppress fill: %d entries and their added events inserted in SQL (not through the API) in %s (%.0f/s)",
		done, time.Since(start).Round(time.Millisecond), float64(done)/time.Since(start).Seconds())
	return done, nil
}

// suppressBytes records what suppressions and recipient_events keep per entry.
func suppressBytes(ctx context.Context, env *benchEnv, rep *Report, entries int, out io.Writer) error {
	var parts []string
	for _, t := range []string{"suppressions", "recipient_events"} {
		var size int64
		if err := env.pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", t).Scan(&size); err != nil {
			return fmt.Errorf("size of %s: %w", t, err)
		}
		per := float64(size) / float64(max(entries, 1))
		rep.BytesPerDelivery["suppress_entry_"+t] = per
		parts = append(parts, fmt.Sprintf("%s %.0f (%.0f MB)", t, per, float64(size)/1e6))
	}
	benchLog(out, "suppress: PostgreSQL bytes per entry (table, indexes and TOAST): %s", strings.Join(parts, ", "))
	return nil
}

// suppressRoundsRun times single-delivery accepts to the sink (a recipient on neither list) on
// the ledger with the entries and on the one without, in suppressRounds rounds of round each
// way, ABBA; it returns the latencies (ms, sorted) with and without.
func suppressRoundsRun(full, empty *benchEnv, sink string, round time.Duration, out io.Writer) (with, without []float64, err error) {
	for _, env := range []*benchEnv{full, empty} {
		if _, _, err := closedLoop(suppressClients, suppressWarmUp, func() error {
			_, err := acceptOne(env.base, sink)
			return err
		}); err != nil {
			return nil, nil, fmt.Errorf("suppress warm-up: %w", err)
		}
	}
	var w, wo latencies
	var rounds []string
	for r := range 2 * suppressRounds {
		env, into, name := full, &w, "with"
		if r%4 == 1 || r%4 == 2 { // with, without, without, with, ...
			env, into, name = empty, &wo, "without"
		}
		_, lat, err := closedLoop(suppressClients, round, func() error {
			_, err := acceptOne(env.base, sink)
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("suppress accept round %d (%s): %w", r+1, name, err)
		}
		s := lat.sorted()
		rounds = append(rounds, fmt.Sprintf("%s %.1f", name, percentile(s, .99)))
		into.v = append(into.v, s...)
	}
	benchLog(out, "suppress: accept p99 per round (ms): %s", strings.Join(rounds, ", "))
	return w.sorted(), wo.sorted(), nil
}

// suppressProbeTimes times the accept's probe query (SuppressionStore.Blocks, one recipient
// that is not listed, no category) on both schemas, in suppressRounds rounds each way, ABBA; it
// returns the latencies (ms, sorted) with and without the entries.
func suppressProbeTimes(ctx context.Context, full, empty *benchEnv, sink string) (with, without []float64, err error) {
	refs := []commands.RecipientRef{{Channel: webhook.Name, Recipient: sink}}
	var w, wo latencies
	for r := range 2 * suppressRounds {
		env, into := full, &w
		if r%4 == 1 || r%4 == 2 {
			env, into = empty, &wo
		}
		store := postgres.NewSuppressionStore(env.pool)
		for range suppressProbeCalls {
			start := time.Now()
			if _, err := store.Blocks(ctx, "bench", "", refs); err != nil {
				return nil, nil, fmt.Errorf("suppress probe times: %w", err)
			}
			into.add(time.Since(start))
		}
	}
	return w.sorted(), wo.sorted(), nil
}

// suppressProbe accepts one delivery to each of suppressProbes listed recipients spread over the
// list and returns how many were answered suppressed.
func suppressProbe(env *benchEnv, sink string, entries int) (int, error) {
	probes := min(suppressProbes, entries)
	suppressed := 0
	for i := range probes {
		n := 1 + i*entries/probes
		body := fmt.Appendf(nil, `{"channel":%q,"recipient":%q,"payload":{"order":%d,"text":"benchmark"}}`, webhook.Name, suppressRecipient(sink, n), n)
		answer, err := acceptPost(env.base, "/v1/deliveries", body)
		if err != nil {
			return suppressed, fmt.Errorf("suppress probe: %w", err)
		}
		var a struct {
			State domain.State `json:"state"`
		}
		if err := json.Unmarshal(answer, &a); err != nil {
			return suppressed, fmt.Errorf("suppress probe answer: %w", err)
		}
		if a.State == domain.StateSuppressed {
			suppressed++
		}
	}
	return suppressed, nil
}

// loadAverage is the machine's 1, 5 and 15 minute load averages, as /proc/loadavg has them.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

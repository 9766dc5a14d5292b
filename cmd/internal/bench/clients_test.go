package bench

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/cmd/internal/app"
)

// serveEnv makes the test binary `ledger serve` (see TestMain): the clients phase runs the
// ledger as a process of its own, and the test runs this binary rather than build cmd/ledger.
const serveEnv = "LEDGER_BENCH_TEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) != "" {
		os.Exit(app.ServeFromEnvironment(""))
	}
	os.Exit(m.Run())
}

// TestBenchClientsPhase runs the clients phase at a small scale against the real services: the
// ledger runs as a process of its own with each setting, every delivery accepted reaches the
// sink once, and the phase reports rates, latencies, CPU and memory for both settings.
func TestBenchClientsPhase(t *testing.T) {
	t.Parallel()
	base := testBase(t)
	opts := Options{Only: []string{"clients"}, Clients: []int{4}, ClientDeliveries: 100, Rate: 50, RateFor: time.Second,
		Ledger: []string{os.Args[0]}, LedgerEnv: []string{serveEnv + "=1"}, ResultsDir: t.TempDir()}
	rep, _ := runBench(t, base, opts)
	for _, s := range Settings {
		for load, want := range map[string]int{"4": 100, "at50": 50} {
			k := "clients_" + s.Name + "_" + load
			if got := rep.Counts[k+"_delivered"]; got != want || rep.Counts[k+"_accepted"] != want {
				t.Errorf("%s: %d accepted, %d delivered, want %d of each", k, rep.Counts[k+"_accepted"], got, want)
			}
			if d := rep.Counts[k+"_duplicates"]; d != 0 {
				t.Errorf("%s: %d duplicates at the sink", k, d)
			}
			if rep.Throughput[k] <= 0 || rep.LatencyMS[k+"_p99"] <= 0 || rep.CPUPerDelivery[k+"_ledger"] <= 0 || rep.Counts[k+"_peak_rss_mb"] <= 0 {
				t.Errorf("%s: rate %v, p99 %v, ledger CPU %v, peak RSS %v: want each measured", k,
					rep.Throughput[k], rep.LatencyMS[k+"_p99"], rep.CPUPerDelivery[k+"_ledger"], rep.Counts[k+"_peak_rss_mb"])
			}
			if load == "4" && rep.LatencyMS[k+"_accept_p50"] <= 0 {
				t.Errorf("%s: no accept p50 of the closed loop", k)
			}
		}
		// The fixed-rate run counts PostgreSQL's work per delivery over every role (group
		// commits may share a transaction among deliveries, other tests' transactions count
		// too: a floor of one).
		k := "clients_" + s.Name + "_at50"
		if w := rep.CommitsPerDelivery[k+"_writing"]; w < 1 || rep.CommitsPerDelivery[k] < 1 {
			t.Errorf("%s: %v commits per delivery, %v writing: want both measured", k, rep.CommitsPerDelivery[k], w)
		}
	}
	if _, ok := rep.Ratios["clients_defaults_vs_tuned_4"]; !ok {
		t.Errorf("no defaults/tuned ratio in %v", rep.Ratios)
	}
	var table bytes.Buffer
	PrintTable(rep, &table)
	if !strings.Contains(table.String(), "defaults, 4 clients") || !strings.Contains(table.String(), "tuned, 50/s") {
		t.Errorf("the table lacks the clients phase:\n%s", table.String())
	}
}

// TestBenchRolesPhase runs the roles phase at a small scale: each role in a process of its
// own, every delivery reaches the sink, and the phase reports the CPU of each role, of
// PostgreSQL's backends, the bytes of the tables and the queues, and the relay alone.
func TestBenchRolesPhase(t *testing.T) {
	t.Parallel()
	base := testBase(t)
	opts := Options{Only: []string{"roles"}, ClientDeliveries: 100, Rate: 50, RateFor: time.Second, RolesBacklog: 100,
		Ledger: []string{os.Args[0]}, LedgerEnv: []string{serveEnv + "=1"}, ResultsDir: t.TempDir()}
	rep, _ := runBench(t, base, opts)
	for load, want := range map[string]int{"at50": 50, "max": 100} {
		k := "roles_" + load
		if got := rep.Counts[k+"_delivered"]; got != want || rep.Counts[k+"_accepted"] != want {
			t.Errorf("%s: %d accepted, %d delivered, want %d of each", k, rep.Counts[k+"_accepted"], got, want)
		}
		// A process may spend less than a clock tick (10 ms) in so short a run: each figure must
		// be there, and the role processes together and the load generator must have spent some.
		for _, c := range append([]string{"postgres_backends", "postgres_machine", "rabbitmq_machine"}, roleNames...) {
			if _, ok := rep.CPUPerDelivery[k+"_"+c]; !ok {
				t.Errorf("%s: no CPU figure for %s", k, c)
			}
		}
		if rep.CPUPerDelivery[k+"_ledger"] <= 0 || rep.CPUPerDelivery[k+"_load"] <= 0 {
			t.Errorf("%s: ledger CPU %v, load generator %v: want both measured", k, rep.CPUPerDelivery[k+"_ledger"], rep.CPUPerDelivery[k+"_load"])
		}
		// Every role process connects to the database: one backend each at least.
		if b := rep.Counts[k+"_postgres_backends"]; b < len(roleNames) {
			t.Errorf("%s: %d PostgreSQL backends of the role processes found, want %d at least", k, b, len(roleNames))
		}
	}
	for _, table := range []string{"roles_events", "roles_accept_requests", "roles_status_view", "roles_queue_body"} {
		if rep.BytesPerDelivery[table] <= 0 {
			t.Errorf("no bytes per delivery for %s in %v", table, rep.BytesPerDelivery)
		}
	}
	if _, ok := rep.CPUIdle["roles_relay"]; !ok || rep.CPUIdle["roles_ledger"] <= 0 {
		t.Errorf("idle CPU %v: want every process's, the ledger's above 0", rep.CPUIdle)
	}
	var table bytes.Buffer
	PrintTable(rep, &table)
	if !strings.Contains(table.String(), "roles phase") || !strings.Contains(table.String(), "relay alone") {
		t.Errorf("the table lacks the roles phase:\n%s", table.String())
	}
	if rep.Counts["roles_relay_queued"] != 100 || rep.Throughput["roles_relay_alone"] <= 0 || rep.Counts["roles_queue_messages"] < 300 {
		t.Errorf("relay alone: %d of 100 queued at %v/s, %d messages held: want all, a rate and every backlog held",
			rep.Counts["roles_relay_queued"], rep.Throughput["roles_relay_alone"], rep.Counts["roles_queue_messages"])
	}
	for _, shards := range []string{"2", "4"} {
		if rep.Counts["roles_relay_queued_shards_"+shards] != 100 || rep.Ratios["roles_relay_alone_shards_"+shards+"_vs_1"] <= 0 {
			t.Errorf("relay alone with %s shards: %d of 100 queued, %.2fx one shard: want all and a ratio",
				shards, rep.Counts["roles_relay_queued_shards_"+shards], rep.Ratios["roles_relay_alone_shards_"+shards+"_vs_1"])
		}
	}
}

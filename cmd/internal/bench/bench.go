package bench

import (
	"github.com/deliveryledger/ledger/cmd/internal/app"

	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/postgres"
)

// Options are the knobs of `ledger bench`.
type Options struct {
	Quick       bool
	Phase       time.Duration // duration of each throughput measurement
	Rate        int           // fixed rate of the latency run (deliveries/s)
	RateFor     time.Duration // duration of the latency run
	AuditEvents int           // events in the log for the audit query measurement
	AuditReads  int
	Out         string
	ResultsDir  string
	// Only lists the phases to run (see Phases); empty is all.
	// A partial run leaves out the ratios and targets it has no measurements for.
	Only []string
	// Logs receives the ledger's warnings and errors during the run (nil: discarded).
	Logs io.Writer
	// Ledger is the command that runs `ledger serve` for the clients phase (the ledger binary and
	// "serve"; empty skips the phase), and LedgerEnv what it needs in its environment besides the
	// settings under test.
	Ledger    []string
	LedgerEnv []string
	// ClientDeliveries is how many deliveries each closed-loop run of the clients phase sends,
	// and Clients its client counts (empty: 1, 16 and 64).
	ClientDeliveries int
	Clients          []int
	// RolesBacklog is how many deliveries the roles phase holds in the outbox for the relay
	// alone, and then in the queues (0: 5000).
	RolesBacklog int
	// SchedulePending is how many deliveries the schedule phase holds scheduled far ahead,
	// ScheduleRate how many a second it then has fall due, for ScheduleFor (0: the defaults,
	// DefaultSchedulePending, DefaultScheduleRate and DefaultScheduleFor).
	SchedulePending int
	ScheduleRate    int
	ScheduleFor     time.Duration
	// ScheduleLead, when set, accepts each delivery of the stream that ahead of its send_at while
	// the stream falls due; zero schedules the whole stream before it starts falling due.
	ScheduleLead time.Duration
	// SuppressEntries is how many suppressions the suppress phase fills for the benchmark's
	// tenant (0: DefaultSuppressEntries).
	SuppressEntries int
	// RetentionKeep, RetentionPartition, RetentionPeriods and RetentionRate size the retention
	// phase: its ledger keeps terminal histories RetentionKeep in partitions of
	// RetentionPartition, and takes RetentionRate deliveries a second for RetentionPeriods keeps
	// (0: the defaults, DefaultRetentionKeep and the others; a quick variant under --quick).
	RetentionKeep      time.Duration
	RetentionPartition time.Duration
	RetentionPeriods   int
	RetentionRate      int
	// Trace runs the ledger with tracing on, every span sampled and exported over OTLP/HTTP to
	// a discarding endpoint on loopback, to measure what tracing costs.
	Trace bool
}

// Phases are the phases of a run, in order.
var Phases = []string{"postgres", "rabbitmq", "accept", "rate", "e2e", "clients", "roles", "audit", "schedule", "suppress", "retention"}

func (o *Options) runs(phase string) bool {
	return len(o.Only) == 0 || slices.Contains(o.Only, phase)
}

func (o *Options) ApplyQuick() {
	if o.Quick {
		o.Phase = 3 * time.Second
		o.RateFor = 8 * time.Second
		o.AuditReads = 1000
		o.ClientDeliveries = 2000
		o.RolesBacklog = cmp.Or(o.RolesBacklog, 2000)
		// A size given with --quick stays as given.
		o.SchedulePending = cmp.Or(o.SchedulePending, quickSchedulePending)
		o.ScheduleRate = cmp.Or(o.ScheduleRate, quickScheduleRate)
		o.ScheduleFor = cmp.Or(o.ScheduleFor, quickScheduleFor)
		o.SuppressEntries = cmp.Or(o.SuppressEntries, quickSuppressEntries)
		o.RetentionKeep = cmp.Or(o.RetentionKeep, quickRetentionKeep)
		o.RetentionPartition = cmp.Or(o.RetentionPartition, quickRetentionPartition)
		o.RetentionPeriods = cmp.Or(o.RetentionPeriods, quickRetentionPeriods)
	}
}

// Report is what `ledger bench` writes as JSON.
type Report struct {
	StartedAt time.Time    `json:"started_at"`
	Machine   benchMachine `json:"machine"`
	Quick     bool         `json:"quick"`
	// Traced runs exported every span (Options.Trace); TraceExports and TraceBytes say how much.
	Traced       bool               `json:"traced"`
	TraceExports int64              `json:"trace_exports,omitempty"`
	TraceBytes   int64              `json:"trace_bytes,omitempty"`
	Void         bool               `json:"void"`
	VoidReason   string             `json:"void_reason,omitempty"`
	Ratios       map[string]float64 `json:"ratios"`
	LatencyMS    map[string]float64 `json:"latency_ms"`
	Throughput   map[string]float64 `json:"throughput_per_s"`
	Counts       map[string]int     `json:"counts"`
	// CPUPerDelivery is the CPU milliseconds per delivery of each component, by phase (see
	// cpuTimes); BytesPerDelivery what each table keeps per delivery after the sustained run.
	CPUPerDelivery   map[string]float64 `json:"cpu_ms_per_delivery"`
	BytesPerDelivery map[string]float64 `json:"bytes_per_delivery"`
	// CommitsPerDelivery is the transactions committed in the benchmark's database
	// (pg_stat_database.xact_commit, every session of the ledger and of the phase) per delivery,
	// by phase. A backend reports its counts at most once a second, so a run reads them to
	// within a second's commits at either end.
	// "<phase>_writing" is the part that wrote (transaction ids handed out).
	CommitsPerDelivery map[string]float64 `json:"commits_per_delivery,omitempty"`
	// StatementsPerDelivery is the statements run in the database per delivery
	// (pg_stat_statements without transaction control), by phase; absent where the server does
	// not preload pg_stat_statements.
	StatementsPerDelivery map[string]float64 `json:"statements_per_delivery,omitempty"`
	// CPUIdle is the CPU milliseconds per second each process of the roles phase spends with
	// no load: the part of CPUPerDelivery that does not grow with the rate.
	CPUIdle map[string]float64 `json:"cpu_ms_per_s_idle,omitempty"`
	Targets []benchTarget      `json:"targets"`
	// Retention holds the retention phase's series (its samples per period, the accept's
	// latencies per second); its figures are in the maps above, prefixed retention_.
	Retention *RetentionResult `json:"retention,omitempty"`
	// Samples keeps latency distributions (ms) for the chart.
	Samples map[string][]float64 `json:"-"`
}

type benchMachine struct {
	CPUs     int    `json:"cpus"`
	GoArch   string `json:"goarch"`
	Hostname string `json:"hostname"`
	Postgres string `json:"postgres"`
	RabbitMQ string `json:"rabbitmq"`
}

type benchTarget struct {
	Name   string  `json:"name"`
	Want   string  `json:"want"`
	Got    float64 `json:"got"`
	Passed bool    `json:"passed"`
}

// latencies collects samples safely from many goroutines.
type latencies struct {
	mu sync.Mutex
	v  []float64 // milliseconds
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.v = append(l.v, float64(d.Microseconds())/1000)
	l.mu.Unlock()
}

func (l *latencies) sorted() []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]float64(nil), l.v...)
	sort.Float64s(out)
	return out
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

// benchEnv is one isolated schema + prefix with a running ledger.
type benchEnv struct {
	schema string
	url    string
	pool   *pgxpool.Pool
	app    *app.App
	cancel context.CancelFunc
	done   chan error
	base   string
	prefix string
}

func benchSchemaURL(dbURL, schema string) string {
	sep := "?"
	if bytes.ContainsRune([]byte(dbURL), '?') {
		sep = "&"
	}
	return dbURL + sep + "search_path=" + schema
}

// newBenchEnv creates a schema, migrates it and (if roles is not empty) starts a ledger on it.
func newBenchEnv(ctx context.Context, base app.Config, logs io.Writer, name, roles string, opts ...app.Option) (*benchEnv, error) {
	schema := fmt.Sprintf("bench_%s_%d", name, time.Now().UnixNano()%1e9)
	admin, err := pgx.Connect(ctx, base.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close(ctx)
		return nil, err
	}
	admin.Close(ctx)
	env := &benchEnv{schema: schema, url: benchSchemaURL(base.DatabaseURL, schema), prefix: "bench-" + schema}
	env.pool, err = postgres.Connect(ctx, env.url, "", 8)
	if err != nil {
		return nil, err
	}
	if _, err := postgres.Migrate(ctx, env.pool, -1, nil); err != nil {
		return nil, err
	}
	if roles == "" {
		return env, nil
	}
	return env, env.start(base, logs, roles, opts...)
}

// start starts a ledger with roles on the env's schema and prefix; a stopped env may start
// again with other roles, on the data it has.
func (e *benchEnv) start(base app.Config, logs io.Writer, roles string, opts ...app.Option) error {
	cfg := base
	cfg.DatabaseURL = e.url
	cfg.AMQPPrefix = e.prefix
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.MetricsAddr = app.MetricsOff
	cfg.Roles = roles
	cfg.APIKeys = "bench:bench-key"
	cfg.WebhookAllowCIDRs = "127.0.0.0/8"
	cfg.HostConcurrency = 0 // one local sink takes everything: no per-host limit
	cfg.WorkerConcurrency = base.WorkerConcurrency
	var logOut io.Writer = io.Discard
	if logs != nil {
		logOut = logs
	}
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	runCtx, cancel := context.WithCancel(context.Background())
	var err error
	e.app, err = app.Build(runCtx, cfg, logger, opts...)
	if err != nil {
		cancel()
		return err
	}
	e.cancel = cancel
	e.done = make(chan error, 1)
	go func() { e.done <- e.app.Run(runCtx) }()
	e.base = ""
	if e.app.Addr() != "" {
		e.base = "http://" + e.app.Addr()
	}
	return nil
}

// stop stops the env's ledger and removes its queues; its schema stays until drop, so dropping
// a large schema does not load the machine while a later phase measures.
func (e *benchEnv) stop(base app.Config) {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		e.cancel = nil
		if conn, err := amqp091.Dial(base.AMQPURL); err == nil {
			_ = e.app.Topology().Delete(conn)
			conn.Close()
		}
	}
}

// drop stops the env if needed and drops its schema.
func (e *benchEnv) drop(ctx context.Context, base app.Config) {
	e.stop(base)
	e.pool.Close()
	if admin, err := pgx.Connect(ctx, base.DatabaseURL); err == nil {
		_, _ = admin.Exec(ctx, "DROP SCHEMA "+e.schema+" CASCADE")
		admin.Close(ctx)
	}
}

// benchSink is the local webhook receiver of the benchmark: it answers 200 at once.
type benchSink struct {
	server   *http.Server
	url      string
	received atomic.Int64
}

func startBenchSink() (*benchSink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &benchSink{url: "http://" + l.Addr().String() + "/hook"}
	s.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.received.Add(1)
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.server.Serve(l) }()
	return s, nil
}

var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}}

// errLoopDone, returned by a closed loop's fn, ends that client's loop without counting a call
// or an error: the run has sent what it was to send.
var errLoopDone = errors.New("loop done")

// closedLoop runs fn from n goroutines until d has passed; it returns completed calls and
// latencies.
func closedLoop(n int, d time.Duration, fn func() error) (int64, *latencies, error) {
	var done atomic.Int64
	var firstErr atomic.Value
	lat := &latencies{}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				start := time.Now()
				if err := fn(); err != nil {
					if !errors.Is(err, errLoopDone) {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				lat.add(time.Since(start))
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	err, _ := firstErr.Load().(error)
	return done.Load(), lat, err
}

// openLoop sends total requests at rate a second, open loop: request i goes at its scheduled
// time, in a goroutine of its own, however slow the earlier ones are. before, if set, runs on the
// schedule just before request i is sent. It returns the first error of send.
func openLoop(rate, total int, before func(i int), send func(i int, at time.Time) error) error {
	interval := time.Second / time.Duration(rate)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now().Add(50 * time.Millisecond)
	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		if before != nil {
			before(i)
		}
		wg.Go(func() {
			if err := send(i, at); err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	wg.Wait()
	err, _ := firstErr.Load().(error)
	return err
}

func benchLog(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "bench: "+format+"\n", args...)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

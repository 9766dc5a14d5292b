package bench

import (
	"github.com/deliveryledger/ledger/cmd/internal/app"

	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/providers/webhook"
)

// The clients phase measures what a user of the ledger gets: the ledger as a process of its own
// (`ledger serve`, every role, the settings it would start with), a load generator in this
// process whose closed-loop clients each wait for their 202, and deliveries counted where they
// land, at a webhook sink. Each run has its own schema, queues and process, once with the
// product's defaults and once with hand-tuned settings, the two alternating so that a change of
// the machine's load hits both alike.

// Setting is how the ledger of a clients run is configured: by its environment, as an operator
// would. Defaults sets nothing beyond where to connect.
type Setting struct {
	Name string
	Env  []string
}

// Settings are the ledger configurations the clients phase compares.
var Settings = []Setting{
	{Name: "defaults"},
	// What an operator who knows the workload would set for one fast destination: as many worker
	// slots as the database pool can serve commits for, and no per-host cap.
	{Name: "tuned", Env: []string{"LEDGER_WORKER_CONCURRENCY=128", "LEDGER_HOST_CONCURRENCY=0"}},
}

// clientCounts are the closed-loop client counts of the clients phase.
func (o *Options) clientCounts() []int {
	if len(o.Clients) > 0 {
		return o.Clients
	}
	return []int{1, 16, 64}
}

// clientRunFor bounds the sending of one closed-loop run, and clientDrainFor the wait for its
// deliveries after it.
const (
	clientRunFor   = 30 * time.Second
	clientDrainFor = 60 * time.Second
)

// clientRun is what one run of the clients phase measured.
type clientRun struct {
	accepted, delivered, duplicates, deferrals int
	rate                                       float64 // delivered per second, first send → last delivery
	p50, p99                                   float64 // publish → sink, ms
	// commits, writes and statements are PostgreSQL's work per delivery (pgWorkPer) over the
	// run; statements is -1 when not counted.
	commits, writes, statements float64
	// acceptP50 and acceptP99 are the closed-loop clients' accept latencies (ms); rawCommit is
	// the p50 of the database's own single-row commit timed just before a one-client run (0:
	// not timed), and pgbench pgbench's average of the same.
	acceptP50, acceptP99, rawCommit, pgbench float64
	cpu                                      map[string]float64
	rssMB                                    float64
}

// benchClients runs the clients phase: for each client count, then the fixed rate, a run per
// setting.
func benchClients(ctx context.Context, base app.Config, opts Options, rep *Report, out io.Writer) error {
	if len(opts.Ledger) == 0 {
		benchLog(out, "clients phase skipped: no ledger command to run (Options.Ledger)")
		return nil
	}
	type load struct {
		name    string
		clients int // 0: the fixed rate
	}
	var loads []load
	for _, c := range opts.clientCounts() {
		if c > 0 { // 0 alone: the fixed-rate runs only
			loads = append(loads, load{fmt.Sprintf("%d", c), c})
		}
	}
	loads = append(loads, load{fmt.Sprintf("at%d", opts.Rate), 0})
	for _, l := range loads {
		for _, s := range Settings {
			key := fmt.Sprintf("clients_%s_%s", s.Name, l.name)
			r, err := clientsRun(ctx, base, opts, s, l.clients)
			if err != nil {
				return fmt.Errorf("clients phase, %s: %w", key, err)
			}
			rep.Throughput[key] = r.rate
			rep.LatencyMS[key+"_p50"], rep.LatencyMS[key+"_p99"] = r.p50, r.p99
			if l.clients > 0 {
				rep.LatencyMS[key+"_accept_p50"], rep.LatencyMS[key+"_accept_p99"] = r.acceptP50, r.acceptP99
			}
			if r.rawCommit > 0 {
				rep.LatencyMS[key+"_raw_commit_p50"] = r.rawCommit
				if r.pgbench > 0 {
					rep.LatencyMS[key+"_raw_commit_pgbench_avg"] = r.pgbench
				}
				rep.Ratios[key+"_accept_vs_raw_commit_p50"] = r.acceptP50 / r.rawCommit
				benchLog(out, "clients, %-8s %-10s accept p50 %.2f ms with the pipeline running, %.2fx the database's own single-row commit (one client, one jsonb row: p50 %.2f ms; pgbench's average %.2f ms)",
					s.Name, fmt.Sprintf("%2d clients", l.clients), r.acceptP50, r.acceptP50/r.rawCommit, r.rawCommit, r.pgbench)
			}
			for k, v := range r.cpu {
				rep.CPUPerDelivery[key+"_"+k] = v
			}
			rep.Counts[key+"_accepted"], rep.Counts[key+"_delivered"] = r.accepted, r.delivered
			rep.Counts[key+"_duplicates"], rep.Counts[key+"_deferrals"] = r.duplicates, r.deferrals
			rep.Counts[key+"_peak_rss_mb"] = int(r.rssMB + 0.5)
			if l.clients == 0 && r.delivered > 0 {
				// Every role of the product, the projector's apply included (the rate phase
				// runs no projector).
				rep.CommitsPerDelivery[key], rep.CommitsPerDelivery[key+"_writing"] = r.commits, r.writes
				counted := "statements not counted (pg_stat_statements is not preloaded)"
				if r.statements >= 0 {
					rep.StatementsPerDelivery[key] = r.statements
					counted = fmt.Sprintf("%.2f statements", r.statements)
				}
				benchLog(out, "clients, %-8s %-10s PostgreSQL per delivery, every role: %.2f commits, %.2f of them writing, %s",
					s.Name, fmt.Sprintf("%d/s", opts.Rate), r.commits, r.writes, counted)
			}
			load := fmt.Sprintf("%2d clients", l.clients)
			if l.clients == 0 {
				load = fmt.Sprintf("%d/s", opts.Rate)
			}
			benchLog(out, "clients, %-8s %-10s %6.0f delivered/s  publish → sink p50 %7.1f ms  p99 %7.1f ms  CPU/delivery ledger %.2f PG %.2f RMQ %.2f = %.2f ms (load generator %.2f)  peak RSS %.0f MB  (%d accepted, %d delivered, %d duplicates, %d deferrals)",
				s.Name, load, r.rate, r.p50, r.p99, r.cpu["ledger"], r.cpu["postgres"], r.cpu["rabbitmq"], r.cpu["total"], r.cpu["load"], r.rssMB,
				r.accepted, r.delivered, r.duplicates, r.deferrals)
			if r.delivered < r.accepted {
				rep.Void, rep.VoidReason = true, fmt.Sprintf("%s: %d accepted, %d delivered within %s", key, r.accepted, r.delivered, clientDrainFor)
			}
		}
		for _, s := range Settings[1:] {
			d, t := rep.Throughput[fmt.Sprintf("clients_defaults_%s", l.name)], rep.Throughput[fmt.Sprintf("clients_%s_%s", s.Name, l.name)]
			if t > 0 && l.clients > 0 {
				rep.Ratios[fmt.Sprintf("clients_defaults_vs_%s_%s", s.Name, l.name)] = d / t
			}
		}
	}
	return nil
}

// clientsRun starts a ledger with setting s on a schema of its own, offers it the load (c
// closed-loop clients, or the fixed rate when c is 0), waits for every delivery at the sink and
// stops the ledger.
func clientsRun(ctx context.Context, base app.Config, opts Options, s Setting, c int) (clientRun, error) {
	var r clientRun
	env, err := newBenchEnv(ctx, base, opts.Logs, "clients", "")
	if err != nil {
		return r, err
	}
	defer env.drop(context.WithoutCancel(ctx), base)
	sink, err := startArrivalSink()
	if err != nil {
		return r, err
	}
	defer sink.server.Close()
	child, err := startLedgerProcess(ctx, base, opts, env, s)
	if err != nil {
		return r, err
	}
	defer child.stop(base, env.prefix)

	if c == 1 {
		// The single client's accept against the database's own commit, timed on the same
		// machine with the ledger up and idle, just before the run.
		raw, err := rawCommit(ctx, base.DatabaseURL, env.schema, rawCommitFor)
		if err != nil {
			return r, fmt.Errorf("raw commit: %w", err)
		}
		r.rawCommit, r.pgbench = percentile(raw.latencies, .5), raw.pgbenchAverage
	}
	workFrom, err := pgWorkSoFar(ctx, env.pool)
	if err != nil {
		return r, err
	}
	cpuFrom, loadFrom := readCPU(), mustProcCPU("/proc/self/stat")
	ledgerFrom, _ := procCPU(fmt.Sprintf("/proc/%d/stat", child.pid()))
	start := time.Now()
	if c > 0 {
		var accepts []float64
		r.accepted, accepts, err = clientsClosedLoop(child.base, sink.url, c, opts.ClientDeliveries, clientRunFor)
		r.acceptP50, r.acceptP99 = percentile(accepts, .5), percentile(accepts, .99)
	} else {
		r.accepted, err = clientsFixedRate(child.base, sink.url, opts.Rate, opts.RateFor)
	}
	if err != nil {
		return r, fmt.Errorf("%w\n%s", err, child.logTail())
	}
	deadline := time.Now().Add(clientDrainFor)
	for sink.unique() < r.accepted && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	last := sink.lastArrival()
	cpuTo, loadTo := readCPU(), mustProcCPU("/proc/self/stat")
	ledgerTo, _ := procCPU(fmt.Sprintf("/proc/%d/stat", child.pid()))
	r.rssMB = child.peakRSSMB()
	workTo, err := pgWorkSoFar(ctx, env.pool)
	if err != nil {
		return r, err
	}

	r.delivered = sink.unique()
	r.duplicates = int(sink.arrivals.Load()) - r.delivered
	if window := last.Sub(start); window > 0 {
		r.rate = float64(r.delivered) / window.Seconds()
	}
	lat := sink.lat.sorted()
	r.p50, r.p99 = percentile(lat, .5), percentile(lat, .99)
	if n := r.delivered; n > 0 {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
		r.cpu = map[string]float64{
			"ledger":   ms(ledgerTo - ledgerFrom),
			"postgres": ms(cpuTo.postgres - cpuFrom.postgres),
			"rabbitmq": ms(cpuTo.rabbitmq - cpuFrom.rabbitmq),
			"load":     ms(loadTo - loadFrom),
		}
		r.cpu["total"] = r.cpu["ledger"] + r.cpu["postgres"] + r.cpu["rabbitmq"]
		r.commits, r.writes, r.statements = pgWorkPer(workFrom, workTo, n)
	}
	if err := env.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = 'delivery.deferred'`).Scan(&r.deferrals); err != nil {
		return r, err
	}
	return r, nil
}

func mustProcCPU(path string) time.Duration {
	t, _ := procCPU(path)
	return t
}

// clientsSeq numbers the deliveries of the clients phase.
var clientsSeq atomic.Int64

// clientsBody is an accept's body: the payload carries a number of its own, by which the sink
// tells a duplicate from a new delivery, and its send time, which the sink subtracts from its
// arrival time (one clock, one process).
func clientsBody(recipient string, sent time.Time) []byte {
	return fmt.Appendf(nil, `{"channel":%q,"recipient":%q,"payload":{"n":%d,"sent":%d,"text":"benchmark"}}`,
		webhook.Name, recipient, clientsSeq.Add(1), sent.UnixNano())
}

// clientsClosedLoop sends n deliveries from c clients, each waiting for its 202 before the next,
// for at most d; it returns how many were accepted and the accepts' latencies, sorted (ms).
func clientsClosedLoop(base, recipient string, c, n int, d time.Duration) (int, []float64, error) {
	var tickets atomic.Int64
	accepted, lat, err := closedLoop(c, d, func() error {
		if tickets.Add(1) > int64(n) {
			return errLoopDone
		}
		_, err := acceptBody(base, clientsBody(recipient, time.Now()))
		return err
	})
	return int(accepted), lat.sorted(), err
}

// clientsFixedRate sends at rate a second for d, open loop (each request at its scheduled time,
// which is the send time its payload carries, however slow the previous ones).
func clientsFixedRate(base, recipient string, rate int, d time.Duration) (int, error) {
	var accepted atomic.Int64
	err := openLoop(rate, int(float64(rate)*d.Seconds()), nil, func(_ int, at time.Time) error {
		_, err := acceptBody(base, clientsBody(recipient, at))
		if err == nil {
			accepted.Add(1)
		}
		return err
	})
	return int(accepted.Load()), err
}

// arrivalSink is the webhook receiver of a clients run: it answers 200 at once and keeps each
// payload's publish → arrival time, and which payloads it has seen (a repeat is a duplicate).
type arrivalSink struct {
	server   *http.Server
	url      string
	arrivals atomic.Int64
	lat      latencies
	mu       sync.Mutex
	seen     map[int64]bool
	last     time.Time
}

func startArrivalSink() (*arrivalSink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &arrivalSink{url: "http://" + l.Addr().String() + "/hook", seen: map[int64]bool{}}
	s.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		now := time.Now()
		s.arrivals.Add(1)
		n, nok := payloadInt(body, `"n":`)
		sent, sok := payloadInt(body, `"sent":`)
		if nok && sok {
			s.mu.Lock()
			first := !s.seen[n]
			s.seen[n] = true
			s.last = now
			s.mu.Unlock()
			if first {
				s.lat.add(now.Sub(time.Unix(0, sent)))
			}
		}
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.server.Serve(l) }()
	return s, nil
}

// payloadInt reads the integer after name in a payload of clientsBody.
func payloadInt(body []byte, name string) (int64, bool) {
	_, rest, ok := bytes.Cut(body, []byte(name))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return n, err == nil
}

func (s *arrivalSink) unique() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *arrivalSink) lastArrival() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// ledgerProcess is the ledger of a clients run, a process of its own.
type ledgerProcess struct {
	cmd  *exec.Cmd
	base string
	cfg  app.Config
	mu   sync.Mutex
	log  []string // the last lines of its output
	done chan error
}

// startLedgerProcess runs opts.Ledger on env's schema and a queue prefix of its own, with the
// setting's environment and nothing else of ours (no LEDGER_, OTEL_, GOGC or GOMEMLIMIT of this
// process), and waits until it answers /readyz.
func startLedgerProcess(ctx context.Context, base app.Config, opts Options, env *benchEnv, s Setting) (*ledgerProcess, error) {
	return startRoleProcess(ctx, base, opts, env, s, "", env.url)
}

// startRoleProcess is startLedgerProcess for a process of the given roles (empty: the
// default, every role) on the database URL dbURL. A process without the api role has no
// /readyz: it is ready when it serves /metrics, which it opens once it runs.
func startRoleProcess(ctx context.Context, base app.Config, opts Options, env *benchEnv, s Setting, roles, dbURL string) (*ledgerProcess, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, ready := app.MetricsOff, "http://"+addr+"/readyz"
	if roles != "" && !slices.Contains(strings.Split(roles, ","), "api") {
		if metricsAddr, err = freeLoopbackAddr(); err != nil {
			return nil, err
		}
		ready = "http://" + metricsAddr + "/metrics"
	}
	p := &ledgerProcess{base: "http://" + addr, cfg: base, done: make(chan error, 1)}
	p.cfg.DatabaseURL, p.cfg.AMQPPrefix = env.url, env.prefix
	p.cmd = exec.Command(opts.Ledger[0], opts.Ledger[1:]...)
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "LEDGER_") && !strings.HasPrefix(name, "OTEL_") && name != "GOGC" && name != "GOMEMLIMIT" {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, opts.LedgerEnv...)
	p.cmd.Env = append(p.cmd.Env,
		"LEDGER_DATABASE_URL="+dbURL,
		"LEDGER_AMQP_URL="+base.AMQPURL,
		"LEDGER_AMQP_PREFIX="+env.prefix,
		"LEDGER_AMQP_QUEUE_TYPE="+base.AMQPQueueType,
		"LEDGER_HTTP_ADDR="+addr,
		"LEDGER_METRICS_ADDR="+metricsAddr,
		"LEDGER_API_KEYS=bench:bench-key",
		// The sink is on loopback, which the SSRF guard refuses unless told.
		"LEDGER_WEBHOOK_ALLOW_CIDRS=127.0.0.0/8",
		"LEDGER_LOG_LEVEL=warn",
	)
	if roles != "" {
		p.cmd.Env = append(p.cmd.Env, "LEDGER_ROLES="+roles)
	}
	p.cmd.Env = append(p.cmd.Env, s.Env...)
	output, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go p.keepLog(output, opts.Logs)
	go func() { p.done <- p.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			return nil, fmt.Errorf("the ledger process ended before it was ready (%v)\n%s", err, p.logTail())
		case <-ctx.Done():
			p.stop(base, env.prefix)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop(base, env.prefix)
			return nil, fmt.Errorf("the ledger process was not ready within 30 s\n%s", p.logTail())
		}
	}
}

func (p *ledgerProcess) pid() int { return p.cmd.Process.Pid }

// keepLog keeps the last lines of the process's output, and copies them to logs if set.
func (p *ledgerProcess) keepLog(r io.Reader, logs io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if logs != nil {
			fmt.Fprintln(logs, line)
		}
		p.mu.Lock()
		p.log = append(p.log, line)
		if len(p.log) > 40 {
			p.log = p.log[len(p.log)-40:]
		}
		p.mu.Unlock()
	}
}

func (p *ledgerProcess) logTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// peakRSSMB is the process's peak resident set (VmHWM), in MB.
func (p *ledgerProcess) peakRSSMB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024 / 1e6
		}
	}
	return 0
}

// stop ends the process and deletes its queues.
func (p *ledgerProcess) stop(base app.Config, prefix string) {
	p.end()
	deleteQueues(base, p.cfg)
}

// end ends the process (SIGTERM, then SIGKILL after 30 s) and leaves its queues.
func (p *ledgerProcess) end() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails harmlessly if it has ended
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		p.done <- <-p.done
	}
}

// deleteQueues deletes the queues of the ledger cfg configures.
func deleteQueues(base, cfg app.Config) {
	topo, err := app.TopologyOf(cfg)
	if err != nil {
		return
	}
	if conn, err := amqp091.Dial(base.AMQPURL); err == nil {
		_ = topo.Delete(conn)
		conn.Close()
	}
}

// freeLoopbackAddr finds a loopback port nobody listens on, for a process to listen on next.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

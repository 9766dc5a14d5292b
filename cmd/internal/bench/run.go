package bench

import (
	"github.com/deliveryledger/ledger/cmd/internal/app"

	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// baselineData is the data of the PostgreSQL baseline's event row: an accepted event's, in size
// and shape.
var baselineData = fmt.Sprintf(`{"channel":%q,"recipient":"http://127.0.0.1/hook","payload":{"order":1}}`, webhook.Name)

// Run measures the ledger against raw baselines taken in the same run.
func Run(ctx context.Context, base app.Config, opts Options, out io.Writer) (*Report, error) {
	rep := &Report{
		StartedAt:             time.Now().UTC(),
		Quick:                 opts.Quick,
		Ratios:                map[string]float64{},
		LatencyMS:             map[string]float64{},
		Throughput:            map[string]float64{},
		Counts:                map[string]int{},
		CPUPerDelivery:        map[string]float64{},
		BytesPerDelivery:      map[string]float64{},
		CommitsPerDelivery:    map[string]float64{},
		StatementsPerDelivery: map[string]float64{},
		Samples:               map[string][]float64{},
		Machine:               benchMachine{CPUs: runtime.NumCPU(), GoArch: runtime.GOARCH, Hostname: hostname()},
	}
	sink, err := startBenchSink()
	if err != nil {
		return nil, err
	}
	defer sink.server.Close()
	if opts.Trace {
		traces, stop, err := startTracing(ctx)
		if err != nil {
			return nil, err
		}
		rep.Traced = true
		defer func() {
			stop()
			rep.TraceExports, rep.TraceBytes = traces.exports.Load(), traces.octets.Load()
		}()
	}
	var envs []*benchEnv
	defer func() {
		for _, e := range envs {
			e.drop(context.WithoutCancel(ctx), base)
		}
	}()
	track := func(e *benchEnv, err error) (*benchEnv, error) {
		if e != nil {
			envs = append(envs, e)
		}
		return e, err
	}

	// 1. Raw PostgreSQL: one event row + one outbox row per transaction.
	pgEnv, err := track(newBenchEnv(ctx, base, opts.Logs, "pg", ""))
	if err != nil {
		return nil, err
	}
	_ = pgEnv.pool.QueryRow(ctx, "SHOW server_version").Scan(&rep.Machine.Postgres)
	// The baseline writes the ledger's own tables, which are partitioned by time: it needs the
	// partitions a ledger process would have cut at its start.
	if _, err := postgres.EnsurePartitions(ctx, pgEnv.pool, postgres.PartitionConfig{Width: postgres.DefaultPartitionWidth}, time.Now()); err != nil {
		return nil, err
	}
	for _, c := range []int{1, 16, 64} {
		if !opts.runs("postgres") {
			break
		}
		tps, lat, err := benchPostgres(ctx, pgEnv.url, c, opts.Phase)
		if err != nil {
			pgEnv.stop(base)
			return nil, fmt.Errorf("postgres baseline: %w", err)
		}
		rep.Throughput[fmt.Sprintf("postgres_tx_%d", c)] = tps
		rep.LatencyMS[fmt.Sprintf("postgres_tx_p99_%d", c)] = percentile(lat, 0.99)
		benchLog(out, "postgres baseline, %2d clients: %8.0f tx/s  p50 %6.2f ms  p99 %6.2f ms", c, tps, percentile(lat, .5), percentile(lat, .99))
	}
	pgEnv.stop(base)

	// 2. Raw RabbitMQ: persistent publishes with confirms, consumed with manual acks.
	var mq float64
	if opts.runs("rabbitmq") {
		var version string
		mq, version, err = benchRabbit(ctx, base.AMQPURL, opts.Phase)
		if err != nil {
			return nil, fmt.Errorf("rabbitmq baseline: %w", err)
		}
		rep.Machine.RabbitMQ = version
		rep.Throughput["rabbitmq_msgs"] = mq
		benchLog(out, "rabbitmq baseline: %8.0f msg/s (publish with confirms → consume with acks)", mq)
	}
	if err := benchAccept(ctx, base, opts, rep, sink, track, out); err != nil {
		return nil, err
	}
	if opts.runs("rate") {
		if err := benchRate(ctx, base, opts, rep, sink, track, out); err != nil {
			return nil, err
		}
	}
	if opts.runs("e2e") {
		if err := benchE2E(ctx, base, opts, rep, mq, sink, track, out); err != nil {
			return nil, err
		}
	}
	if opts.runs("clients") {
		if err := benchClients(ctx, base, opts, rep, out); err != nil {
			return nil, err
		}
	}
	if opts.runs("roles") {
		if err := benchRoles(ctx, base, opts, rep, out); err != nil {
			return nil, err
		}
	}
	if opts.runs("audit") {
		if err := benchAuditPhase(ctx, base, opts, rep, track, out); err != nil {
			return nil, err
		}
	}
	if opts.runs("schedule") {
		if err := benchSchedule(ctx, base, opts, rep, sink, track, out); err != nil {
			return nil, fmt.Errorf("schedule phase: %w", err)
		}
	}
	if opts.runs("suppress") {
		if err := benchSuppress(ctx, base, opts, rep, sink, track, out); err != nil {
			return nil, fmt.Errorf("suppress phase: %w", err)
		}
	}
	if opts.runs("retention") {
		if err := benchRetention(ctx, base, opts, rep, sink, track, out); err != nil {
			return nil, fmt.Errorf("retention phase: %w", err)
		}
	}
	rep.Targets = benchTargets(opts, rep)
	return rep, nil
}

type benchTrack func(*benchEnv, error) (*benchEnv, error)

// benchAccept measures accept throughput over HTTP (api role only) at 1, 16 and 64 clients.
func benchAccept(ctx context.Context, base app.Config, opts Options, rep *Report, sink *benchSink, track benchTrack, out io.Writer) error {
	if !opts.runs("accept") {
		return nil
	}
	apiEnv, err := track(newBenchEnv(ctx, base, opts.Logs, "api", "api"))
	if err != nil {
		return err
	}
	for _, c := range []int{1, 16, 64} {
		n, lat, err := closedLoop(c, opts.Phase, func() error {
			_, err := acceptOne(apiEnv.base, sink.url)
			return err
		})
		if err != nil {
			apiEnv.stop(base)
			return fmt.Errorf("accept at %d clients: %w", c, err)
		}
		s := lat.sorted()
		rps := float64(n) / opts.Phase.Seconds()
		rep.Throughput[fmt.Sprintf("accept_%d", c)] = rps
		rep.LatencyMS[fmt.Sprintf("accept_p50_%d", c)] = percentile(s, .5)
		rep.LatencyMS[fmt.Sprintf("accept_p99_%d", c)] = percentile(s, .99)
		ratio := ""
		if pg := rep.Throughput[fmt.Sprintf("postgres_tx_%d", c)]; pg > 0 {
			rep.Ratios[fmt.Sprintf("accept_vs_postgres_%d", c)] = rps / pg
			ratio = fmt.Sprintf("  (%.2fx postgres)", rps/pg)
		}
		if c == 64 {
			rep.Samples["accept at 64 clients"] = s
		}
		benchLog(out, "accept over HTTP, %2d clients: %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms%s", c, rps, percentile(s, .5), percentile(s, .99), ratio)
	}
	apiEnv.stop(base)

	// The accept phases wrote a lot of WAL: flush it now, so a checkpoint triggered by their
	// volume does not land in the middle of the latency run (needs a superuser; best effort).
	if _, err := apiEnv.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		benchLog(out, "checkpoint before the latency run failed (continuing): %v", err)
	}
	// And let the kernel write back what the baselines and the accept phases left dirty
	// (RabbitMQ's message store, the checkpoint's data files) before the latency run starts.
	syscall.Sync()
	return nil
}

// benchRate runs end to end at a fixed rate (first, on a quiet machine), latency from each
// request's scheduled send time, and the relay lag on the way.
func benchRate(ctx context.Context, base app.Config, opts Options, rep *Report, sink *benchSink, track benchTrack, out io.Writer) error {
	var relayLag latencies
	var measuring atomic.Bool // relay lags of the warm-up are not counted either
	observe := func(d time.Duration) {
		if measuring.Load() {
			relayLag.add(d)
		}
	}
	fixed, err := track(newBenchEnv(ctx, base, opts.Logs, "rate", "api,relay,worker", app.WithRelayObserver(observe)))
	if err != nil {
		return err
	}
	defer fixed.stop(base)
	cpuFrom := readCPU()
	workFrom, err := pgWorkSoFar(ctx, fixed.pool)
	if err != nil {
		return err
	}
	lat, counts, err := benchFixedRate(ctx, fixed, sink.url, opts.Rate, opts.RateFor, func() { measuring.Store(true) })
	if err != nil {
		return err
	}
	if m := perDelivery(rep, fmt.Sprintf("at_%d", opts.Rate), cpuFrom, readCPU(), counts["sent"]); m != nil {
		benchLog(out, "CPU per delivery at %d/s: ledger (with the load generator) %.2f ms, PostgreSQL %.2f ms, RabbitMQ %.2f ms, total %.2f ms",
			opts.Rate, m["ledger_and_load"], m["postgres"], m["rabbitmq"], m["total"])
	}
	workTo, err := pgWorkSoFar(ctx, fixed.pool)
	if err != nil {
		return err
	}
	if n := counts["sent"]; n > 0 {
		commits, writes, statements := pgWorkPer(workFrom, workTo, n)
		phase := fmt.Sprintf("at_%d", opts.Rate)
		rep.CommitsPerDelivery[phase] = commits
		rep.CommitsPerDelivery[phase+"_writing"] = writes
		counted := "not counted: pg_stat_statements is not preloaded (make bench preloads it)"
		if statements >= 0 {
			rep.StatementsPerDelivery[phase] = statements
			counted = fmt.Sprintf("%.2f statements (pg_stat_statements, without BEGIN/COMMIT)", statements)
		}
		benchLog(out, "PostgreSQL per delivery at %d/s: %.2f commits (pg_stat_database.xact_commit, read-only ones included), %.2f of them writing (transaction ids), %s; %d deliveries",
			opts.Rate, commits, writes, counted, n)
	}
	for k, v := range counts {
		rep.Counts[fmt.Sprintf("rate_%s", k)] = v
	}
	if counts["sent"] != counts["delivered"]+counts["dead"]+counts["unknown"]+counts["in_flight"] {
		rep.Void, rep.VoidReason = true, fmt.Sprintf("fixed-rate run does not balance: %v", counts)
	}
	rep.LatencyMS[fmt.Sprintf("e2e_p50_at_%d", opts.Rate)] = percentile(lat, .5)
	rep.LatencyMS[fmt.Sprintf("e2e_p99_at_%d", opts.Rate)] = percentile(lat, .99)
	rep.Samples[fmt.Sprintf("end to end at %d/s", opts.Rate)] = lat
	benchLog(out, "end to end at %d/s: p50 %6.2f ms  p99 %6.2f ms  (%d deliveries, from scheduled send to recorded delivery)", opts.Rate, percentile(lat, .5), percentile(lat, .99), len(lat))
	benchStages(ctx, fixed, fmt.Sprintf("at %d/s", opts.Rate), rep, out)
	rl := relayLag.sorted()
	rep.LatencyMS["relay_lag_p50"] = percentile(rl, .5)
	rep.LatencyMS["relay_lag_p99"] = percentile(rl, .99)
	rep.Samples["relay lag"] = rl
	benchLog(out, "relay lag (outbox write → broker confirm): p50 %6.2f ms  p99 %6.2f ms", percentile(rl, .5), percentile(rl, .99))
	return nil
}

// benchE2E measures sustained end-to-end deliveries: accept from 16 clients with a bounded
// backlog, count deliveries; then waits for the run to balance.
func benchE2E(ctx context.Context, base app.Config, opts Options, rep *Report, mq float64, sink *benchSink, track benchTrack, out io.Writer) error {
	var sustainedLag latencies
	e2e, err := track(newBenchEnv(ctx, base, opts.Logs, "e2e", "api,relay,worker", app.WithRelayObserver(sustainedLag.add)))
	if err != nil {
		return err
	}
	defer e2e.stop(base)
	cpuFrom := readCPU()
	sent, delivered, window, err := benchSustained(ctx, e2e, sink, opts.Phase*2)
	if err != nil {
		return err
	}
	rate := float64(delivered) / window.Seconds()
	rep.Throughput["e2e_delivered"] = rate
	ratio := ""
	if mq > 0 {
		rep.Ratios["e2e_vs_rabbitmq"] = rate / mq
		ratio = fmt.Sprintf("; %.2fx rabbitmq", rate/mq)
	}
	benchLog(out, "end to end, sustained: %8.0f deliveries/s (%d sent, %d delivered in %s%s)", rate, sent, delivered, window.Round(time.Millisecond), ratio)
	balance, err := benchBalance(ctx, e2e, sent, 60*time.Second)
	if err != nil {
		return err
	}
	if m := perDelivery(rep, "sustained", cpuFrom, readCPU(), sent); m != nil {
		benchLog(out, "CPU per delivery, sustained: ledger (with the load generator) %.2f ms, PostgreSQL %.2f ms, RabbitMQ %.2f ms, total %.2f ms",
			m["ledger_and_load"], m["postgres"], m["rabbitmq"], m["total"])
	}
	// The views the projector would keep for them (the sustained run has no projector: it
	// would compete for the two cores), built now, after the CPU was read.
	if runner, err := projections.NewRunner(postgres.NewViews(e2e.pool), postgres.NewEventStore(e2e.pool), projections.All(), projections.RunnerConfig{}); err == nil {
		if err := runner.CatchUp(ctx); err != nil {
			benchLog(out, "project the sustained run: %v", err)
		}
	}
	if err := storagePerDelivery(ctx, rep, e2e.pool, e2e.schema, sent); err != nil {
		benchLog(out, "storage per delivery: %v", err)
	} else {
		var parts []string
		for _, t := range []string{"events", "status_view", "dlq_view", "counters_view", "accept_requests", "notification_payloads"} {
			if b, ok := rep.BytesPerDelivery[t]; ok {
				parts = append(parts, fmt.Sprintf("%s %.0f", t, b))
			}
		}
		benchLog(out, "bytes kept per delivery after the sustained run: %s", strings.Join(parts, ", "))
	}
	benchStages(ctx, e2e, "sustained", rep, out)
	for k, v := range balance {
		rep.Counts["sustained_"+k] = v
	}
	if balance["sent"] != balance["delivered"]+balance["dead"]+balance["unknown"]+balance["in_flight"] {
		rep.Void, rep.VoidReason = true, fmt.Sprintf("sustained run does not balance: %v", balance)
	}
	return nil
}

// benchAuditPhase times one delivery's history with a large log.
func benchAuditPhase(ctx context.Context, base app.Config, opts Options, rep *Report, track benchTrack, out io.Writer) error {
	audit, err := track(newBenchEnv(ctx, base, opts.Logs, "audit", "api"))
	if err != nil {
		return err
	}
	al, n, err := benchAudit(ctx, audit, opts.AuditEvents, opts.AuditReads, out)
	if err == nil {
		// The log the phase filled is the largest of the run: what each index costs per event.
		var events int64
		var sizes []namedSize
		if events, sizes, err = eventsBytesPerEvent(ctx, audit.pool, audit.schema); err == nil && events > 0 {
			parts := make([]string, len(sizes))
			for i, s := range sizes {
				rep.Counts["audit_bytes_per_event_"+s.name] = int(s.bytes + 0.5)
				parts[i] = fmt.Sprintf("%s %.1f", s.name, s.bytes)
			}
			benchLog(out, "events bytes per event (audit log, %d events): %s", events, strings.Join(parts, ", "))
		}
	}
	audit.stop(base)
	if err != nil {
		return err
	}
	rep.Counts["audit_log_events"] = n
	rep.LatencyMS["audit_p50"] = percentile(al, .5)
	rep.LatencyMS["audit_p99"] = percentile(al, .99)
	rep.Samples["audit query"] = al
	benchLog(out, "audit query (GET /v1/deliveries/{id}/events, %d events in the log): p50 %6.2f ms  p99 %6.2f ms", n, percentile(al, .5), percentile(al, .99))
	return nil
}

// benchTargets checks the targets against what this run measured; a phase left out
// (--only) leaves its target out.
func benchTargets(opts Options, rep *Report) []benchTarget {
	var targets []benchTarget
	add := func(name, want string, got float64, ok bool, measured bool) {
		if measured {
			targets = append(targets, benchTarget{Name: name, Want: want, Got: got, Passed: ok})
		}
	}
	r, l := rep.Ratios, rep.LatencyMS
	key := fmt.Sprintf("e2e_p99_at_%d", opts.Rate)
	_, accept := r["accept_vs_postgres_64"]
	_, e2e := r["e2e_vs_rabbitmq"]
	_, rate := l[key]
	_, audit := l["audit_p99"]
	add("accept_vs_postgres_64", ">= 2", r["accept_vs_postgres_64"], r["accept_vs_postgres_64"] >= 2, accept)
	add("e2e_vs_rabbitmq", ">= 0.25", r["e2e_vs_rabbitmq"], r["e2e_vs_rabbitmq"] >= 0.25, e2e)
	add(key, "< 50 ms", l[key], l[key] < 50, rate)
	add("relay_lag_p50", "< 20 ms", l["relay_lag_p50"], l["relay_lag_p50"] < 20, rate)
	add("audit_p99", "< 5 ms", l["audit_p99"], l["audit_p99"] < 5, audit)
	// The schedule phase: scheduled sends fire on time with a large schedule pending, send_at
	// costs the accept little, and a pending schedule holds nothing in the broker.
	_, schedule := l["schedule_lateness_p99"]
	add("schedule_lateness_p99", "< 1000 ms", l["schedule_lateness_p99"], l["schedule_lateness_p99"] < 1000, schedule)
	add("schedule_accept_with_vs_without", ">= 0.9", r["schedule_accept_with_vs_without"], r["schedule_accept_with_vs_without"] >= 0.9, schedule)
	held := float64(rep.Counts["schedule_pending_queue_messages"])
	add("schedule_pending_queue_messages", "= 0", held, held == 0, schedule)
	// The suppress phase: a million entries on the list cost the accept's tail little.
	k := "suppress_accept_p99_with_vs_without"
	v, suppress := r[k]
	add(k, fmt.Sprintf("<= %.2f", suppressTarget), v, v <= suppressTarget, suppress)
	// The retention phase: a flat size once partitions leave, the hot store's bytes per delivery,
	// and the accept's tail while a partition leaves.
	v, flat := r["retention_size_max_over_min"]
	add("retention_size_max_over_min", fmt.Sprintf("<= %.3f (±10 %%)", retentionSizeTarget), v, v <= retentionSizeTarget, flat)
	hot, measured := rep.BytesPerDelivery["retention_hot"]
	add("retention_hot_bytes_per_delivery", fmt.Sprintf("<= %d", retentionHotTarget), hot, hot <= retentionHotTarget, measured)
	v, tail := r["retention_accept_p99_during_vs_outside"]
	add("retention_accept_p99_during_vs_outside", fmt.Sprintf("<= %.2f", retentionAcceptTarget), v, v <= retentionAcceptTarget, tail)
	_, single := r["accept_vs_postgres_1"]
	add("accept_vs_postgres_1", ">= 0.9", r["accept_vs_postgres_1"], r["accept_vs_postgres_1"] >= 0.9, single)
	// The clients phase: defaults that serve, as well as tuned settings do, in little memory,
	// and little CPU per delivery at a moderate rate.
	for _, c := range opts.clientCounts() {
		if c == 0 {
			continue
		}
		k := fmt.Sprintf("clients_defaults_vs_tuned_%d", c)
		v, ok := r[k]
		add(k, ">= 0.9", v, v >= 0.9, ok)
	}
	// The roles phase: the relay alone over outbox shards, against one shard in the same run.
	for k, want := range map[string]float64{"roles_relay_alone_shards_2_vs_1": 1.8, "roles_relay_alone_shards_4_vs_1": 3.2} {
		v, ok := r[k]
		add(k, fmt.Sprintf(">= %.1f", want), v, v >= want, ok)
	}
	// The single client: its accept, with the whole pipeline running, near the database's own
	// single-row commit (pgbench in the same run).
	if v, ok := r["clients_defaults_1_accept_vs_raw_commit_p50"]; ok {
		add("clients_defaults_1_accept_vs_raw_commit_p50", "<= 2", v, v <= 2, true)
	}
	at := fmt.Sprintf("clients_defaults_at%d", opts.Rate)
	if p99, ok := l[at+"_p99"]; ok {
		add(at+"_p99", "< 1000 ms", p99, p99 < 1000, true)
		cpu, pg := rep.CPUPerDelivery[at+"_total"], rep.CPUPerDelivery[at+"_postgres"]
		add(at+"_cpu_ms", "<= 3.3 ms", cpu, cpu <= 3.3, true)
		add(at+"_postgres_cpu_ms", "<= 1 ms", pg, pg <= 1, true)
		rss := 0
		for k, v := range rep.Counts {
			if strings.HasPrefix(k, "clients_defaults_") && strings.HasSuffix(k, "_peak_rss_mb") {
				rss = max(rss, v)
			}
		}
		add("clients_defaults_peak_rss_mb", "<= 100 MB", float64(rss), rss <= 100, true)
	}
	return targets
}

// benchPostgres runs transactions of one event row and one outbox row from c clients.
func benchPostgres(ctx context.Context, url string, c int, d time.Duration) (float64, []float64, error) {
	pool, err := postgres.Connect(ctx, url, "", int32(c+2))
	if err != nil {
		return 0, nil, err
	}
	defer pool.Close()
	n, lat, err := closedLoop(c, d, func() error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		// Time-ordered, like the ledger's delivery ids (commands.DeliveryID): the baseline writes
		// the same index pattern as the ledger, not a costlier random one.
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
			VALUES ($1, 'bench', 1, 'delivery.accepted', $2, $3, now())`,
			id, "/accepted", baselineData); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO watermill_ledger_outbox (uuid, payload, metadata, transaction_id)
			VALUES ($1, '{"delivery_id":"x"}', '{}', pg_current_xact_id())`, id.String()); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	return float64(n) / d.Seconds(), lat.sorted(), err
}

// benchRabbit publishes persistent messages with confirms (a window of outstanding confirms)
// while a consumer acks each one; it returns consumed messages per second.
func benchRabbit(ctx context.Context, url string, d time.Duration) (float64, string, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	version, _ := conn.Properties["version"].(string)
	queue := "bench-baseline-" + uuid.NewString()[:8]
	pubCh, err := conn.Channel()
	if err != nil {
		return 0, "", err
	}
	// RabbitMQ's default classic queue, not the ledger's version 2 (amqp.QueueVersion): a message
	// consumed as fast as this one costs less in version 1 (measured here: 8,000-8,300 msg/s
	// against 6,100-7,600), and the baseline is the broker at its fastest.
	if _, err := pubCh.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return 0, "", err
	}
	defer func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			ch.Close()
		}
	}()
	if err := pubCh.Confirm(false); err != nil {
		return 0, "", err
	}
	conCh, err := conn.Channel()
	if err != nil {
		return 0, "", err
	}
	if err := conCh.Qos(256, 0, false); err != nil {
		return 0, "", err
	}
	deliveries, err := conCh.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return 0, "", err
	}
	var consumed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case m := <-deliveries:
				_ = m.Ack(false)
				consumed.Add(1)
			}
		}
	}()
	body := fmt.Appendf(nil, `{"delivery_id":"00000000-0000-0000-0000-000000000000","channel":%q,"recipient":"http://127.0.0.1/hook","payload":{"order":1},"attempt":1}`, webhook.Name)
	const window = 256
	pending := make(chan *amqp091.DeferredConfirmation, window)
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := range pending {
			if ok, err := c.WaitContext(ctx); err != nil || !ok {
				select {
				case errs <- errors.Join(errors.New("publish not confirmed"), err):
				default:
				}
			}
		}
	}()
	start := time.Now()
	deadline := start.Add(d)
	var startCount int64
	warm := start.Add(d / 5)
	warmed := false
	for time.Now().Before(deadline) {
		if !warmed && time.Now().After(warm) {
			startCount, start, warmed = consumed.Load(), time.Now(), true
		}
		c, err := pubCh.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, ContentType: "application/json", Body: body,
		})
		if err != nil {
			close(pending)
			close(stop)
			wg.Wait()
			return 0, version, err
		}
		pending <- c
	}
	end, endCount := time.Now(), consumed.Load()
	close(pending)
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, version, err
	default:
	}
	return float64(endCount-startCount) / end.Sub(start).Seconds(), version, nil
}

// sustainedBacklog bounds accepted-but-not-yet-delivered deliveries in the sustained run, so
// the producer offers what the pipeline can take instead of starving it with accepts: the rate
// measured is one the whole system sustains, accept included.
const sustainedBacklog = 1000

// benchSustained accepts from 16 clients, holding the backlog under sustainedBacklog, for d,
// and counts deliveries recorded in the window after a warm-up fifth.
func benchSustained(ctx context.Context, env *benchEnv, sink *benchSink, d time.Duration) (int, int, time.Duration, error) {
	var sent atomic.Int64
	countDelivered := func() (int, error) {
		var n int
		err := env.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = 'delivery.delivered'`).Scan(&n)
		return n, err
	}
	base := sink.received.Load()
	done := make(chan error, 1)
	go func() {
		_, _, err := closedLoop(64, d, func() error {
			for sent.Load()-(sink.received.Load()-base) > sustainedBacklog {
				time.Sleep(time.Millisecond)
			}
			_, err := acceptOne(env.base, sink.url)
			if err == nil {
				sent.Add(1)
			}
			return err
		})
		done <- err
	}()
	time.Sleep(d / 5)
	from, err := countDelivered()
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	if err := <-done; err != nil {
		return 0, 0, 0, err
	}
	to, err := countDelivered()
	if err != nil {
		return 0, 0, 0, err
	}
	return int(sent.Load()), to - from, time.Since(start), nil
}

// benchBalance waits (up to max) for the deliveries to settle and counts them by state.
func benchBalance(ctx context.Context, env *benchEnv, sent int, max time.Duration) (map[string]int, error) {
	deadline := time.Now().Add(max)
	for {
		counts, err := stateCounts(ctx, env.pool)
		if err != nil {
			return nil, err
		}
		counts["sent"] = sent
		settled := counts["delivered"] + counts["dead"] + counts["unknown"]
		if settled >= sent || time.Now().After(deadline) {
			counts["in_flight"] = counts["accepted"] + counts["queued"] + counts["processing"] + counts["retrying"]
			return counts, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stateCounts counts deliveries by the state of their latest event.
func stateCounts(ctx context.Context, pool *pgxpool.Pool) (map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT type, count(*) FROM (
		SELECT DISTINCT ON (delivery_id) type FROM events WHERE type <> 'delivery.receipt_recorded'
		ORDER BY delivery_id, version DESC) last GROUP BY type`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := map[string]int{}
	for rows.Next() {
		var typ string
		var n int
		if err := rows.Scan(&typ, &n); err != nil {
			return nil, err
		}
		state, err := projections.StateAfter(domain.EventType(typ))
		if err != nil {
			return nil, err
		}
		counts[string(state)] += n
	}
	return counts, rows.Err()
}

// benchWarmUp is how long the fixed-rate run sends before the requests it measures: a new
// ledger opens its database connections and fills their caches in its first second, which is
// not the steady state the run reports. The warm-up requests are sent on the same schedule,
// just not counted.
const benchWarmUp = 2 * time.Second

// benchFixedRate sends at a fixed rate (open loop: each request at its scheduled time, however
// slow the previous ones) and measures scheduled send → delivered event recorded, for the
// requests after the warm-up.
func benchFixedRate(ctx context.Context, env *benchEnv, sinkURL string, rate int, d time.Duration, measuring func()) ([]float64, map[string]int, error) {
	warm := int(float64(rate) * benchWarmUp.Seconds())
	total := warm + int(float64(rate)*d.Seconds())
	scheduled := make(map[string]time.Time, total)
	var mu sync.Mutex
	err := openLoop(rate, total, func(i int) {
		if i == warm {
			measuring()
		}
	}, func(i int, at time.Time) error {
		id, err := acceptOne(env.base, sinkURL)
		if err != nil {
			return err
		}
		mu.Lock()
		if i >= warm {
			scheduled[id] = at
		} else {
			scheduled[id] = time.Time{} // counted in the balance, not timed
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	counts, err := benchBalance(ctx, env, len(scheduled), 30*time.Second)
	if err != nil {
		return nil, nil, err
	}
	rows, err := env.pool.Query(ctx, `SELECT delivery_id::text, recorded_at FROM events WHERE type = 'delivery.delivered'`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var lat latencies
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, nil, err
		}
		if s, ok := scheduled[id]; ok && !s.IsZero() {
			lat.add(at.Sub(s))
		}
	}
	return lat.sorted(), counts, rows.Err()
}

// benchStages reports where a run's deliveries spent their time, from the recorded_at of their
// events (each taken when the command decided, just before its commit): accepted → queued is
// the relay (commit, outbox read, broker confirm), queued → started the wait in RabbitMQ for a
// worker, started → delivered the provider call and the outcome's commit.
func benchStages(ctx context.Context, env *benchEnv, run string, rep *Report, out io.Writer) {
	rows, err := env.pool.Query(ctx, `WITH t AS (
		SELECT delivery_id,
			min(recorded_at) FILTER (WHERE type = 'delivery.accepted') AS acc,
			min(recorded_at) FILTER (WHERE type = 'delivery.queued') AS q,
			min(recorded_at) FILTER (WHERE type = 'delivery.attempt_started') AS st,
			min(recorded_at) FILTER (WHERE type = 'delivery.delivered') AS del
		FROM events GROUP BY delivery_id)
	SELECT stage, percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
	FROM (SELECT 1 AS n, 'accepted_to_queued' AS stage, extract(epoch FROM q - acc)*1000 AS ms FROM t WHERE q IS NOT NULL
		UNION ALL SELECT 2, 'queued_to_started', extract(epoch FROM st - q)*1000 FROM t WHERE q IS NOT NULL AND st IS NOT NULL
		UNION ALL SELECT 3, 'started_to_delivered', extract(epoch FROM del - st)*1000 FROM t WHERE del IS NOT NULL) x
	GROUP BY n, stage ORDER BY n`)
	if err != nil {
		benchLog(out, "stages %s: %v", run, err)
		return
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var stage string
		var p50, p99 float64
		if err := rows.Scan(&stage, &p50, &p99); err != nil {
			benchLog(out, "stages %s: %v", run, err)
			return
		}
		key := "stage_" + strings.ReplaceAll(run, " ", "") + "_" + stage
		rep.LatencyMS[key+"_p50"], rep.LatencyMS[key+"_p99"] = p50, p99
		parts = append(parts, fmt.Sprintf("%s p50 %.1f p99 %.1f", strings.ReplaceAll(stage, "_", " "), p50, p99))
	}
	benchLog(out, "  where the time went (%s, ms): %s", run, strings.Join(parts, "; "))
}

package bench

import (
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/cmd/internal/app"

	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The roles phase is the capacity model's measurement: every role of the ledger (api, relay,
// worker, projector, reconciler) in a process of its own, as a deployment over several
// machines runs them, so that the CPU each spends per delivery is its own and not a share of
// one process's. The load generator and the sink stay in this process, and PostgreSQL's CPU is
// read from the backends that serve the role processes (each connects under an
// application_name of its own), besides the whole server's. Then, with the workers stopped,
// a backlog is held in the queues to weigh them, and the relay is timed alone moving an
// outbox it finds full: how many deliveries a second one relay carries.

// roleNames are the roles of the phase, each run as its own process.
var roleNames = []string{"api", "relay", "worker", "projector", "reconciler"}

// rolesMaxFor bounds the closed-loop run of the roles phase, and rolesDrainFor each wait for
// deliveries, the projector or the relay.
const (
	rolesMaxFor   = 20 * time.Second
	rolesDrainFor = 60 * time.Second
	rolesClients  = 64
)

// rolesBacklog is how many deliveries the roles phase holds in the outbox and then the queues.
func (o *Options) rolesBacklog() int {
	if o.RolesBacklog > 0 {
		return o.RolesBacklog
	}
	return 5000
}

// rolesSetting is the role processes' configuration: the product's defaults but the per-host
// cap, since one local sink takes every delivery (the other phases run so too).
var rolesSetting = Setting{Name: "roles", Env: []string{"LEDGER_HOST_CONCURRENCY=0"}}

// rolesPhase is the role processes of the phase and what they run on.
type rolesPhase struct {
	base  app.Config
	opts  Options
	env   *benchEnv
	sink  *arrivalSink
	procs map[string]*ledgerProcess
}

// dbURL is the database URL of role's process: the phase's schema, and an application_name by
// which its backends are found in pg_stat_activity.
func (r *rolesPhase) dbURL(role string) string {
	return r.env.url + "&application_name=" + r.env.prefix + "-" + role
}

func (r *rolesPhase) start(ctx context.Context, role string) error {
	p, err := startRoleProcess(ctx, r.base, r.opts, r.env, rolesSetting, role, r.dbURL(role))
	if err != nil {
		return fmt.Errorf("start the %s process: %w", role, err)
	}
	r.procs[role] = p
	return nil
}

// benchRoles runs the roles phase: a fixed rate, a closed-loop maximum, the bytes kept, the
// queues with a backlog and the relay alone.
func benchRoles(ctx context.Context, base app.Config, opts Options, rep *Report, out io.Writer) error {
	if len(opts.Ledger) == 0 {
		benchLog(out, "roles phase skipped: no ledger command to run (Options.Ledger)")
		return nil
	}
	env, err := newBenchEnv(ctx, base, opts.Logs, "roles", "")
	if err != nil {
		return err
	}
	defer env.drop(context.WithoutCancel(ctx), base)
	sink, err := startArrivalSink()
	if err != nil {
		return err
	}
	defer sink.server.Close()
	r := &rolesPhase{base: base, opts: opts, env: env, sink: sink, procs: map[string]*ledgerProcess{}}
	defer func() {
		for _, p := range r.procs {
			p.end()
		}
		cfg := base
		cfg.DatabaseURL, cfg.AMQPPrefix = env.url, env.prefix
		deleteQueues(base, cfg)
	}()
	for _, role := range roleNames {
		if err := r.start(ctx, role); err != nil {
			return err
		}
	}
	if err := r.idle(ctx, rep, out); err != nil {
		return err
	}
	api := r.procs["api"].base
	delivered := 0
	for _, run := range []struct {
		name string
		send func() (int, error)
	}{
		{fmt.Sprintf("at%d", opts.Rate), func() (int, error) { return clientsFixedRate(api, sink.url, opts.Rate, opts.RateFor) }},
		{"max", func() (int, error) {
			n, _, err := clientsClosedLoop(api, sink.url, rolesClients, opts.ClientDeliveries, rolesMaxFor)
			return n, err
		}},
	} {
		n, err := r.measure(ctx, rep, out, "roles_"+run.name, run.send)
		if err != nil {
			return fmt.Errorf("roles phase, %s: %w", run.name, err)
		}
		delivered += n
	}
	if err := r.storage(ctx, rep, out, delivered); err != nil {
		return err
	}
	return r.relayAlone(ctx, rep, out)
}

// idle records what each process spends with no load, in CPU ms per second: the pollers,
// timers and tickers of every role, which a run at a low rate divides among few deliveries.
func (r *rolesPhase) idle(ctx context.Context, rep *Report, out io.Writer) error {
	d := min(max(r.opts.RateFor/4, time.Second), 5*time.Second)
	time.Sleep(time.Second) // the processes' first second: connections, declarations
	from, err := r.cpu(ctx)
	if err != nil {
		return err
	}
	time.Sleep(d)
	to, err := r.cpu(ctx)
	if err != nil {
		return err
	}
	// cpuPerDelivery with n = seconds×1000 gives ms per second (n is an int: scale).
	ms := cpuPerDelivery(from, to, int(d/time.Millisecond))
	if rep.CPUIdle == nil {
		rep.CPUIdle = map[string]float64{}
	}
	var parts []string
	for _, k := range cpuKeys(ms) {
		rep.CPUIdle["roles_"+k] = ms[k] * 1000
		parts = append(parts, fmt.Sprintf("%s %.1f", k, ms[k]*1000))
	}
	benchLog(out, "roles, idle for %s: CPU ms per second: %s", d, strings.Join(parts, ", "))
	return nil
}

// measure sends with send, waits until the sink has every delivery and the projector has
// applied every event, and records the CPU of each process per delivery under key.
func (r *rolesPhase) measure(ctx context.Context, rep *Report, out io.Writer, key string, send func() (int, error)) (int, error) {
	before := r.sink.unique()
	from, err := r.cpu(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	accepted, err := send()
	if err != nil {
		return 0, fmt.Errorf("%w\n%s", err, r.procs["api"].logTail())
	}
	deadline := time.Now().Add(rolesDrainFor)
	for r.sink.unique()-before < accepted && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	last := r.sink.lastArrival()
	projected, err := r.projected(ctx, deadline)
	if err != nil {
		return 0, err
	}
	to, err := r.cpu(ctx)
	if err != nil {
		return 0, err
	}
	n := r.sink.unique() - before
	rep.Counts[key+"_accepted"], rep.Counts[key+"_delivered"] = accepted, n
	if n < accepted || !projected {
		rep.Void, rep.VoidReason = true, fmt.Sprintf("%s: %d accepted, %d delivered, projector caught up %v within %s", key, accepted, n, projected, rolesDrainFor)
	}
	if window := last.Sub(start); window > 0 {
		rep.Throughput[key] = float64(n) / window.Seconds()
	}
	if n == 0 {
		return 0, nil
	}
	ms := cpuPerDelivery(from, to, n)
	rep.Counts[key+"_postgres_backends"] = len(to.backends)
	var parts []string
	for _, k := range cpuKeys(ms) {
		rep.CPUPerDelivery[key+"_"+k] = ms[k]
		parts = append(parts, fmt.Sprintf("%s %.3f", k, ms[k]))
	}
	benchLog(out, "roles, %-6s %6.0f delivered/s (%d accepted, %d delivered); CPU ms per delivery: %s (%d PostgreSQL backends)",
		strings.TrimPrefix(key, "roles_"), rep.Throughput[key], accepted, n, strings.Join(parts, ", "), len(to.backends))
	return n, nil
}

// projected waits (until deadline) for the projector to have applied the whole log to the status
// view: its CPU for the run's events is then spent.
func (r *rolesPhase) projected(ctx context.Context, deadline time.Time) (bool, error) {
	for {
		var behind bool
		// The first event past the checkpoint in the log order, the events' primary key: a
		// max(position) reads the whole key since position alone has no index (migration
		// 0018), and an EXISTS is planned as a sequential scan.
		err := r.env.pool.QueryRow(ctx, `SELECT (SELECT e.position FROM events e
			WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position)
			ORDER BY e.transaction_id, e.position LIMIT 1) IS NOT NULL
			FROM projection_checkpoints c WHERE c.name = 'status'`).Scan(&behind)
		if err != nil {
			return false, fmt.Errorf("read the projector's checkpoint: %w", err)
		}
		if !behind {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rolesCPU is the CPU spent so far by each role process, by the PostgreSQL backends that
// serve them (by pid), by the machine's PostgreSQL and RabbitMQ, and by this process (the
// load generator and the sink).
type rolesCPU struct {
	roles    map[string]time.Duration
	backends map[int]time.Duration
	machine  cpuTimes
}

func (r *rolesPhase) cpu(ctx context.Context) (rolesCPU, error) {
	c := rolesCPU{roles: map[string]time.Duration{}, backends: map[int]time.Duration{}, machine: readCPU()}
	for role, p := range r.procs {
		c.roles[role] = mustProcCPU(fmt.Sprintf("/proc/%d/stat", p.pid()))
	}
	rows, err := r.env.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 || '-%'`, r.env.prefix)
	if err != nil {
		return c, fmt.Errorf("find the role processes' backends: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return c, err
		}
		c.backends[pid] = mustProcCPU(fmt.Sprintf("/proc/%d/stat", pid))
	}
	return c, rows.Err()
}

// cpuPerDelivery turns two readings into milliseconds per delivery. A backend that appeared
// between them counts whole; one that ended between them is lost (the pools keep their
// connections, so it is rare).
func cpuPerDelivery(from, to rolesCPU, n int) map[string]float64 {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	m := map[string]float64{}
	var ledger float64
	for role, t := range to.roles {
		m[role] = ms(t - from.roles[role])
		ledger += m[role]
	}
	var backends time.Duration
	for pid, t := range to.backends {
		backends += t - from.backends[pid]
	}
	m["ledger"] = ledger
	m["postgres_backends"] = ms(backends)
	m["postgres_machine"] = ms(to.machine.postgres - from.machine.postgres)
	m["rabbitmq_machine"] = ms(to.machine.rabbitmq - from.machine.rabbitmq)
	m["load"] = ms(to.machine.self - from.machine.self)
	m["total"] = ledger + m["postgres_machine"] + m["rabbitmq_machine"]
	return m
}

// cpuKeys orders a CPU breakdown: the roles, then the rest.
func cpuKeys(m map[string]float64) []string {
	keys := append([]string(nil), roleNames...)
	for _, k := range []string{"ledger", "postgres_backends", "postgres_machine", "rabbitmq_machine", "total", "load"} {
		if _, ok := m[k]; ok {
			keys = append(keys, k)
		}
	}
	return keys
}

// storage records what each table keeps per delivery after the runs (the projector has
// applied them all), under roles_bytes_<table>.
func (r *rolesPhase) storage(ctx context.Context, rep *Report, out io.Writer, deliveries int) error {
	if deliveries == 0 {
		return nil
	}
	rows, err := r.env.pool.Query(ctx, tablesBytesList, r.env.schema)
	if err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	defer rows.Close()
	type table struct {
		name  string
		bytes float64
	}
	var tables []table
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			return err
		}
		if name == "schema_migrations" || size == 0 {
			continue
		}
		tables = append(tables, table{name, float64(size) / float64(deliveries)})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	sort.Slice(tables, func(i, j int) bool { return tables[i].bytes > tables[j].bytes })
	var parts []string
	var total float64
	for _, t := range tables {
		rep.BytesPerDelivery["roles_"+t.name] = t.bytes
		total += t.bytes
		if t.bytes >= 1 {
			parts = append(parts, fmt.Sprintf("%s %.0f", t.name, t.bytes))
		}
	}
	rep.BytesPerDelivery["roles_tables_total"] = total
	benchLog(out, "roles, bytes per delivery in PostgreSQL (%d deliveries; table, indexes and TOAST; includes the empty pages of a new table): total %.0f: %s",
		deliveries, total, strings.Join(parts, ", "))
	return nil
}

// relayShardCounts are the outbox shard counts the relay is timed alone with, in one run, so
// that the shards' gain is a ratio of the same machine's minutes (issue 27: 2 shards >= 1.8x one,
// 4 shards >= 3.2x); relayShardOrder times each twice, there and back, so that the machine's
// drift over the phase (the first timing was the slowest in every run) favours none.
var (
	relayShardCounts = []int{1, 2, 4}
	relayShardOrder  = []int{1, 2, 4, 4, 2, 1}
)

// relayTiming is what the timings of one shard count add up to.
type relayTiming struct {
	backlog, queued int     // the least of the timings'
	moved           int     // deliveries moved within the spans
	span            float64 // seconds
	cpu             map[string]float64
}

// relayAlone stops the workers and the relay, then for each of relayShardCounts records the
// count, fills the outbox with a backlog through the API, and times one relay process moving
// it (relayAloneWith); the queues, holding every backlog, are weighed last.
func (r *rolesPhase) relayAlone(ctx context.Context, rep *Report, out io.Writer) error {
	for _, role := range []string{"worker", "relay"} {
		r.procs[role].end()
		delete(r.procs, role)
	}
	held := 0
	timings := map[int]*relayTiming{}
	for _, shards := range relayShardOrder {
		t, err := r.relayAloneWith(ctx, out, shards)
		held += t.queued
		if err != nil {
			return err
		}
		sum, ok := timings[shards]
		if !ok {
			timings[shards] = &t
			continue
		}
		for k, v := range t.cpu {
			sum.cpu[k] = (sum.cpu[k]*float64(sum.queued) + v*float64(t.queued)) / float64(sum.queued+t.queued)
		}
		sum.backlog, sum.queued = min(sum.backlog, t.backlog), min(sum.queued, t.queued)
		sum.moved += t.moved
		sum.span += t.span
	}
	for _, shards := range relayShardCounts {
		t := timings[shards]
		suffix := ""
		if shards > 1 {
			suffix = fmt.Sprintf("_shards_%d", shards)
		}
		rep.Counts["roles_relay_backlog"+suffix], rep.Counts["roles_relay_queued"+suffix] = t.backlog, t.queued
		if t.queued < t.backlog {
			rep.Void, rep.VoidReason = true, fmt.Sprintf("roles, relay alone with %d shards: %d of %d queued within %s", shards, t.queued, t.backlog, rolesDrainFor)
		}
		if t.moved > 0 && t.span > 0 {
			rep.Throughput["roles_relay_alone"+suffix] = float64(t.moved) / t.span
		}
		for k, v := range t.cpu {
			rep.CPUPerDelivery["roles_relay_alone"+suffix+"_"+k] = v
		}
	}
	if one, ok := rep.Throughput["roles_relay_alone"]; ok && one > 0 {
		for _, shards := range relayShardCounts[1:] {
			if v, ok := rep.Throughput[fmt.Sprintf("roles_relay_alone_shards_%d", shards)]; ok {
				rep.Ratios[fmt.Sprintf("roles_relay_alone_shards_%d_vs_1", shards)] = v / one
			}
		}
	}
	benchLog(out, "roles, relay alone (both timings of each): 1 shard %.0f/s, 2 shards %.0f/s (%.2fx), 4 shards %.0f/s (%.2fx)",
		rep.Throughput["roles_relay_alone"], rep.Throughput["roles_relay_alone_shards_2"], rep.Ratios["roles_relay_alone_shards_2_vs_1"],
		rep.Throughput["roles_relay_alone_shards_4"], rep.Ratios["roles_relay_alone_shards_4_vs_1"])
	if _, err := postgres.SetOutboxShards(ctx, r.env.pool, 1); err != nil {
		return err
	}
	return r.queueBytes(ctx, rep, out, held)
}

// relayAloneWith is one timing of relayAlone with the outbox in shards. relayAlone reports the
// figures of one shard under their names of before shards (roles_relay_alone); the others are
// suffixed _shards_<n>.
func (r *rolesPhase) relayAloneWith(ctx context.Context, out io.Writer, shards int) (relayTiming, error) {
	var t relayTiming
	if _, err := postgres.SetOutboxShards(ctx, r.env.pool, shards); err != nil {
		return t, err
	}
	var head int64
	if err := r.env.pool.QueryRow(ctx, `SELECT coalesce(max(position), 0) FROM events`).Scan(&head); err != nil {
		return t, err
	}
	n, _, err := clientsClosedLoop(r.procs["api"].base, r.sink.url, 16, r.opts.rolesBacklog(), rolesMaxFor)
	if err != nil {
		return t, fmt.Errorf("fill the outbox: %w", err)
	}
	started := time.Now()
	if err := r.start(ctx, "relay"); err != nil {
		return t, err
	}
	defer func() {
		r.procs["relay"].end()
		delete(r.procs, "relay")
	}()
	from, err := r.cpu(ctx)
	if err != nil {
		return t, err
	}
	// Wait with the outbox's own probe (an index probe per shard) until every shard's offset
	// has passed its rows, then for the queued records that follow the confirms. The count of
	// queued events reads every event since the head: polled every 20 ms while the relay ran,
	// it cost PostgreSQL more than half a core, beside the relay it measured (2026-12-03).
	deadline := time.Now().Add(rolesDrainFor)
	for time.Now().Before(deadline) {
		pending, err := postgres.OutboxShardsPending(ctx, r.env.pool, "relay")
		if err != nil {
			return t, err
		}
		if len(pending) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var got, first int
	var firstAt, lastAt time.Time
	for {
		err := r.env.pool.QueryRow(ctx, `WITH q AS (SELECT recorded_at FROM events WHERE type = 'delivery.queued' AND position > $1)
			SELECT count(*), coalesce(min(recorded_at), now()), coalesce(max(recorded_at), now()),
				(SELECT count(*) FROM q WHERE recorded_at = (SELECT min(recorded_at) FROM q)) FROM q`, head).Scan(&got, &firstAt, &lastAt, &first)
		if err != nil {
			return t, fmt.Errorf("count the relay's queued events: %w", err)
		}
		if got >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The relay's rate is counted from its first batch to its last (each batch's queued events
	// share the time the relay recorded them): the process's start and its first read are left
	// out. A backlog the relay takes in one batch has no such span: it is then counted from the
	// process's start, which understates it. With shards, the first batch is the first shard's.
	how := "first to last batch"
	span, moved := lastAt.Sub(firstAt).Seconds(), got-first
	if moved == 0 || span <= 0 {
		how, span, moved = "from the process's start", lastAt.Sub(started).Seconds(), got
	}
	t = relayTiming{backlog: n, queued: got, moved: moved, span: span, cpu: map[string]float64{}}
	to, err := r.cpu(ctx)
	if err != nil {
		return t, err
	}
	cpu := map[string]float64{}
	if got > 0 {
		cpu = cpuPerDelivery(from, to, got)
		for _, k := range []string{"relay", "projector", "postgres_machine", "rabbitmq_machine", "total"} {
			t.cpu[k] = cpu[k]
		}
	}
	// How many of the machine's cores the run kept busy, the load generator's idle process
	// included: near the machine's count, the relay is bound by CPU, not by its round trips.
	busy := cpu["total"] * float64(got) / 1000 / lastAt.Sub(started).Seconds()
	rate := 0.0
	if moved > 0 && span > 0 {
		rate = float64(moved) / span
	}
	benchLog(out, "roles, relay alone, %d outbox shard(s): %.0f deliveries/s moved from a full outbox to the broker (%d of %d queued, %s); CPU ms each: relay %.3f, projector %.3f, PostgreSQL %.3f, RabbitMQ %.3f, in all %.3f (%.1f cores busy)",
		shards, rate, got, n, how, cpu["relay"], cpu["projector"], cpu["postgres_machine"], cpu["rabbitmq_machine"], cpu["total"], busy)
	return t, nil
}

// queueBytes weighs the phase's queues while they hold held messages: with rabbitmqctl where it
// answers (it needs the broker's Erlang cookie: root or the rabbitmq user), else by a passive
// declare's message count times the size of one message's body.
func (r *rolesPhase) queueBytes(ctx context.Context, rep *Report, out io.Writer, held int) error {
	if held == 0 {
		return nil
	}
	// A quorum queue's figures reach rabbitmqctl with a delay (its metrics are emitted every
	// few seconds): ask again until they show the messages held.
	messages, body, memory, how, err := rabbitmqctlQueues(ctx, r.env.prefix)
	for deadline := time.Now().Add(20 * time.Second); err == nil && messages < int64(held) && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		messages, body, memory, how, err = rabbitmqctlQueues(ctx, r.env.prefix)
	}
	if err == nil && messages == 0 {
		err = errors.New("no messages in the phase's queues")
	}
	if err != nil {
		benchLog(out, "roles, rabbitmqctl list_queues did not answer (%v): counting by passive declare", err)
		var size int
		messages, size, err = r.passiveCounts()
		if err != nil {
			return err
		}
		body, memory, how = int64(size)*messages, 0, "passive declare's count × the body of one message taken and given back"
	}
	rep.Counts["roles_queue_messages"] = int(messages)
	if messages > 0 {
		if body > 0 {
			rep.BytesPerDelivery["roles_queue_body"] = float64(body) / float64(messages)
		}
		if memory > 0 {
			rep.BytesPerDelivery["roles_queue_memory"] = float64(memory) / float64(messages)
		}
	}
	benchLog(out, "roles, queues holding a backlog of %d messages (%s): %.0f body bytes per message (0: not reported), %.0f bytes of queue process memory per message",
		messages, how, rep.BytesPerDelivery["roles_queue_body"], rep.BytesPerDelivery["roles_queue_memory"])
	return nil
}

// rabbitmqctlQueues sums messages, message_bytes and memory over the queues under prefix.
func rabbitmqctlQueues(ctx context.Context, prefix string) (messages, body, memory int64, how string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name", "messages", "message_bytes", "memory", "type")
	cmd.Stderr = io.Discard
	b, err := cmd.Output()
	if err != nil {
		return 0, 0, 0, "", err
	}
	var types []string
	for line := range strings.Lines(string(b)) {
		// Tab-separated: a quorum queue of RabbitMQ 3.10 leaves message_bytes empty.
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) < 5 || !strings.HasPrefix(f[0], prefix+".") {
			continue
		}
		m, _ := strconv.ParseInt(f[1], 10, 64)
		mb, _ := strconv.ParseInt(f[2], 10, 64)
		mem, _ := strconv.ParseInt(f[3], 10, 64)
		messages, body, memory = messages+m, body+mb, memory+mem
		if m > 0 {
			types = append(types, f[4])
		}
	}
	return messages, body, memory, "rabbitmqctl list_queues, " + strings.Join(uniq(types), ","), nil
}

// passiveCounts sums the message counts of the phase's queues by passive declares, and takes
// one message of the first queue holding any (and gives it back) for its body's size.
func (r *rolesPhase) passiveCounts() (n int64, size int, err error) {
	cfg := r.base
	cfg.DatabaseURL, cfg.AMQPPrefix = r.env.url, r.env.prefix
	topo, err := app.TopologyOf(cfg)
	if err != nil {
		return 0, 0, err
	}
	conn, err := amqp091.Dial(r.base.AMQPURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	for _, q := range topo.Queues() {
		ch, err := conn.Channel()
		if err != nil {
			return 0, 0, err
		}
		if info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err == nil {
			n += int64(info.Messages)
			if size == 0 && info.Messages > 0 {
				if d, ok, err := ch.Get(q, false); err == nil && ok {
					size = len(d.Body)
					_ = d.Nack(false, true)
				}
			}
		}
		ch.Close()
	}
	return n, size, nil
}

func uniq(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// printRoles adds the roles phase's CPU per delivery, by process, to the table.
func printRoles(rep *Report, w io.Writer) {
	var runs []string
	for k := range rep.Throughput {
		if run, ok := strings.CutPrefix(k, "roles_"); ok && !strings.HasPrefix(run, "relay_alone") {
			runs = append(runs, run)
		}
	}
	if len(runs) == 0 {
		return
	}
	sort.Strings(runs)
	cols := append(append([]string(nil), roleNames...), "postgres_backends", "postgres_machine", "rabbitmq_machine", "total")
	fmt.Fprintf(w, "\nroles phase, CPU ms/delivery\tdelivered/s\t%s\n", strings.Join(cols, "\t"))
	for _, run := range runs {
		fmt.Fprintf(w, "%s\t%.0f", run, rep.Throughput["roles_"+run])
		for _, c := range cols {
			fmt.Fprintf(w, "\t%.3f", rep.CPUPerDelivery["roles_"+run+"_"+c])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "relay alone\t%.0f /s", rep.Throughput["roles_relay_alone"])
	for _, shards := range relayShardCounts[1:] {
		if v, ok := rep.Throughput[fmt.Sprintf("roles_relay_alone_shards_%d", shards)]; ok {
			fmt.Fprintf(w, "\t%d shards %.0f /s (%.2fx)", shards, v, rep.Ratios[fmt.Sprintf("roles_relay_alone_shards_%d_vs_1", shards)])
		}
	}
	fmt.Fprintln(w)
}

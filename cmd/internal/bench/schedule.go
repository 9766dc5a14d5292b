package bench

import (
	"github.com/deliveryledger/ledger/cmd/internal/app"

	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/projections"
)

// The schedule phase (issue 24, "Scale"): a large schedule pending far ahead, a stream of
// deliveries falling due at a fixed rate through it, and the accept rate with send_at against
// without in the same run.

// Defaults of the schedule phase: the million pending and 2,000 a second falling due,
// and a fraction of both under --quick.
const (
	DefaultSchedulePending       = 1_000_000
	DefaultScheduleRate          = 2000
	DefaultScheduleFor           = 20 * time.Second
	quickSchedulePending         = 20_000
	quickScheduleRate            = 500
	quickScheduleFor             = 5 * time.Second
	scheduleFillBudget           = 10 * time.Minute
	scheduleDeadline             = 15 * time.Minute
	scheduleFarAhead             = 30 * 24 * time.Hour
	scheduleFillFanOut           = 500
	scheduleStreamGroup          = 20
	scheduleLead                 = 2 * time.Second
	schedulePrefillFor           = 30 * time.Second
	scheduleAcceptRounds         = 3
	scheduleAcceptClients        = 16
	scheduleSettleAfterTheStream = time.Minute
)

// The fill's requests carry scheduleFillFanOut recipients each (the API takes up to 1000): a
// million pending deliveries go in through the accept path itself, each request one commit for
// hundreds of them, where one delivery a request would cost a commit each. scheduleFillBudget bounds
// the fill; a fill cut short says how far it got, and scheduleDeadline the whole phase (its
// database work ends with an error past it). scheduleFarAhead lies beyond the run and
// beyond every delay tier, so a message held anywhere for a pending delivery would still be
// held when the queues are counted. The stream falling due is accepted scheduleLead ahead of
// its send_at, scheduleStreamGroup recipients per request sharing one send_at: at 2,000/s its
// send_at steps by 10 ms.

// schedulePending, scheduleRate and scheduleFor are the phase's sizes, with their defaults.
func (o *Options) schedulePending() int {
	if o.SchedulePending > 0 {
		return o.SchedulePending
	}
	return DefaultSchedulePending
}

func (o *Options) scheduleRate() int {
	if o.ScheduleRate > 0 {
		return o.ScheduleRate
	}
	return DefaultScheduleRate
}

func (o *Options) scheduleFor() time.Duration {
	if o.ScheduleFor > 0 {
		return o.ScheduleFor
	}
	return DefaultScheduleFor
}

// benchSchedule runs the schedule phase: fill the pending schedule through the API (api role
// only, so no relay or worker competes with the accepts it times), measure what it keeps in
// PostgreSQL, time accepts with send_at against without in interleaved rounds, then start the
// relay and the workers on the same data, count the broker's messages while only the far-ahead
// schedule is pending, and time a stream falling due from the histories it leaves.
func benchSchedule(ctx context.Context, base app.Config, opts Options, rep *Report, sink *benchSink, track benchTrack, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, scheduleDeadline)
	defer cancel()
	env, err := track(newBenchEnv(ctx, base, opts.Logs, "schedule", "api"))
	if err != nil {
		return err
	}
	defer env.stop(base)
	far := time.Now().Add(scheduleFarAhead).UTC()
	filled, err := scheduleFill(env, sink.url, opts.schedulePending(), far, out)
	if err != nil {
		return err
	}
	rep.Counts["schedule_filled"] = filled
	if filled < opts.schedulePending() {
		benchLog(out, "schedule: the fill reached %d of %d pending deliveries in %s: the figures are for %d", filled, opts.schedulePending(), scheduleFillBudget, filled)
	}
	if err := scheduleBytes(ctx, env, rep, filled, out); err != nil {
		return err
	}

	without, with, immediate, err := scheduleAcceptRates(env, sink.url, far, opts.Phase)
	if err != nil {
		return err
	}
	rep.Throughput["schedule_accept_without_send_at"], rep.Throughput["schedule_accept_with_send_at"] = without, with
	if without > 0 {
		rep.Ratios["schedule_accept_with_vs_without"] = with / without
	}
	pending, err := countScheduled(ctx, env)
	if err != nil {
		return err
	}
	rep.Counts["schedule_pending"] = pending

	// The relay and the workers, on the same data: they relay and deliver the sub-runs' immediate
	// deliveries, and must leave the far-ahead schedule where it is, in PostgreSQL alone.
	env.stop(base)
	received := sink.received.Load()
	if err := env.start(base, opts.Logs, "api,relay,worker"); err != nil {
		return err
	}
	if got := waitReceived(sink, received+int64(immediate), time.Minute); got < received+int64(immediate) {
		return fmt.Errorf("schedule: %d of the %d immediate deliveries delivered in a minute", got-received, immediate)
	}
	messages, body, memory, err := prefixQueues(ctx, base, env)
	if err != nil {
		return err
	}
	rep.Counts["schedule_pending_queue_messages"] = int(messages)
	rep.Counts["schedule_pending_queue_message_bytes"] = int(body)
	rep.Counts["schedule_pending_queue_memory_bytes"] = int(memory)

	lat, queued, sent, late, err := scheduleStream(ctx, env, sink, opts.scheduleRate(), opts.scheduleFor(), opts.ScheduleLead, far)
	if err != nil {
		return err
	}
	rep.LatencyMS["schedule_queued_lateness_p50"], rep.LatencyMS["schedule_queued_lateness_p99"] = percentile(queued, .5), percentile(queued, .99)
	rep.Counts["schedule_stream_sent"], rep.Counts["schedule_stream_timed"], rep.Counts["schedule_stream_accepted_late"] = sent, len(lat), late
	rep.LatencyMS["schedule_lateness_p50"], rep.LatencyMS["schedule_lateness_p99"] = percentile(lat, .5), percentile(lat, .99)
	rep.Samples[fmt.Sprintf("fire lateness at %d/s", opts.scheduleRate())] = lat
	if len(lat) != sent-late {
		rep.Void, rep.VoidReason = true, fmt.Sprintf("schedule stream: %d of %d scheduled deliveries started an attempt", len(lat), sent-late)
	}

	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	p99, ratio := rep.LatencyMS["schedule_lateness_p99"], rep.Ratios["schedule_accept_with_vs_without"]
	how := "scheduled before it falls due"
	if opts.ScheduleLead > 0 {
		how = fmt.Sprintf("each accepted %s ahead, beside it", opts.ScheduleLead)
	}
	benchLog(out, "schedule stream: %s", how)
	benchLog(out, "scheduled sends, %d pending, %d/s falling due for %s: fire lateness (attempt start − send_at) p50 %.1f ms p99 %.1f ms (< 1 s: %s); "+
		"accept with send_at %.0f/s, without %.0f/s, %.2fx (>= 0.9: %s); broker messages while only the schedule is pending %d (0: %s), %d message bytes, %d bytes of queue process memory under the prefix",
		pending, opts.scheduleRate(), opts.scheduleFor(), percentile(lat, .5), p99, met(p99 < 1000), with, without, ratio, met(ratio >= 0.9),
		messages, met(messages == 0), body, memory)
	benchLog(out, "  of which until the due pass queued it (queued − send_at): p50 %.1f ms p99 %.1f ms", percentile(queued, .5), percentile(queued, .99))
	if late > 0 {
		benchLog(out, "schedule: %d stream accepts answered after their send_at (sent at once, not timed)", late)
	}
	return nil
}

// scheduleFill accepts n deliveries scheduled at far (a millisecond apart per request), through
// the API, in requests of scheduleFillFanOut recipients from four clients, within
// scheduleFillBudget; it returns how many it accepted.
func scheduleFill(env *benchEnv, sink string, n int, far time.Time, out io.Writer) (int, error) {
	var claimed, done, req atomic.Int64
	start := time.Now()
	var progress atomic.Int64 // when the last progress line was printed, in ns since start
	_, _, err := closedLoop(4, scheduleFillBudget, func() error {
		from := claimed.Add(scheduleFillFanOut) - scheduleFillFanOut
		if from >= int64(n) {
			return errLoopDone
		}
		k := min(int64(scheduleFillFanOut), int64(n)-from)
		at := far.Add(time.Duration(req.Add(1)) * time.Millisecond)
		if _, err := acceptPost(env.base, "/v1/notifications", scheduleBody(sink, from, int(k), at)); err != nil {
			return fmt.Errorf("schedule fill: %w", err)
		}
		d, now := done.Add(k), int64(time.Since(start))
		if last := progress.Load(); now-last > int64(30*time.Second) && progress.CompareAndSwap(last, now) {
			benchLog(out, "schedule fill: %d/%d (%.0f/s)", d, n, float64(d)/time.Since(start).Seconds())
		}
		return nil
	})
	benchLog(out, "schedule fill: %d deliveries scheduled through the API in %s (%.0f/s, %d recipients per request)",
		done.Load(), time.Since(start).Round(time.Second), float64(done.Load())/time.Since(start).Seconds(), scheduleFillFanOut)
	return int(done.Load()), err
}

// scheduleBody is a notification to k webhook recipients of the sink, numbered from first,
// scheduled at sendAt.
func scheduleBody(sink string, first int64, k int, sendAt time.Time) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"payload":{"order":%d,"text":"benchmark"},"send_at":%q,"recipients":[`, first, sendAt.Format(time.RFC3339Nano))
	for i := range k {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"channel":%q,"recipient":"%s?r=%d"}`, webhook.Name, sink, first+int64(i))
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// scheduleBytes projects the pending schedule and records what due_work, events and status_view
// keep per pending delivery.
func scheduleBytes(ctx context.Context, env *benchEnv, rep *Report, pending int, out io.Writer) error {
	start := time.Now()
	runner, err := projections.NewRunner(postgres.NewViews(env.pool), postgres.NewEventStore(env.pool), projections.All(), projections.RunnerConfig{})
	if err != nil {
		return err
	}
	if err := runner.CatchUp(ctx); err != nil {
		return fmt.Errorf("project the schedule: %w", err)
	}
	benchLog(out, "schedule: %d pending deliveries projected in %s", pending, time.Since(start).Round(time.Millisecond))
	if _, err := env.pool.Exec(ctx, "VACUUM ANALYZE due_work, events, status_view"); err != nil {
		return err
	}
	var parts []string
	for _, t := range []string{"due_work", "events", "status_view"} {
		var size int64
		if err := env.pool.QueryRow(ctx, tableBytesGet, t).Scan(&size); err != nil {
			return fmt.Errorf("size of %s: %w", t, err)
		}
		per := float64(size) / float64(max(pending, 1))
		rep.BytesPerDelivery["schedule_pending_"+t] = per
		parts = append(parts, fmt.Sprintf("%s %.0f", t, per))
	}
	benchLog(out, "schedule: PostgreSQL bytes per pending delivery (table, indexes and TOAST): %s", strings.Join(parts, ", "))
	return nil
}

// scheduleAcceptRates times single-delivery accepts without send_at and with one far ahead, in
// interleaved rounds from the same clients on the same tables; it returns both rates and how
// many immediate deliveries it accepted.
func scheduleAcceptRates(env *benchEnv, sink string, far time.Time, phase time.Duration) (without, with float64, immediate int, err error) {
	plain := fmt.Appendf(nil, `{"channel":%q,"recipient":%q,"payload":{"order":1,"text":"benchmark"}}`, webhook.Name, sink)
	scheduled := fmt.Appendf(nil, `{"channel":%q,"recipient":%q,"payload":{"order":1,"text":"benchmark"},"send_at":%q}`, webhook.Name, sink, far.Format(time.RFC3339Nano))
	round := phase / 2
	var n [2]int64
	for range scheduleAcceptRounds {
		for i, body := range [][]byte{plain, scheduled} {
			got, _, err := closedLoop(scheduleAcceptClients, round, func() error {
				_, err := acceptBody(env.base, body)
				return err
			})
			if err != nil {
				return 0, 0, 0, fmt.Errorf("schedule accept rates: %w", err)
			}
			n[i] += got
		}
	}
	secs := (round * scheduleAcceptRounds).Seconds()
	return float64(n[0]) / secs, float64(n[1]) / secs, int(n[0]), nil
}

// countScheduled counts the deliveries whose latest event is delivery.scheduled.
func countScheduled(ctx context.Context, env *benchEnv) (int, error) {
	counts, err := stateCounts(ctx, env.pool)
	if err != nil {
		return 0, err
	}
	return counts["scheduled"], nil
}

// waitReceived waits up to d for the sink to have received want requests; it returns what it has.
func waitReceived(sink *benchSink, want int64, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for sink.received.Load() < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return sink.received.Load()
}

// prefixQueues sums the messages held in the env's queues (passive declares: exact, and needing
// nothing but AMQP), and their body bytes and queue process memory when rabbitmqctl answers.
func prefixQueues(ctx context.Context, base app.Config, env *benchEnv) (messages, body, memory int64, err error) {
	cfg := base
	cfg.DatabaseURL, cfg.AMQPPrefix = env.url, env.prefix
	topo, err := app.TopologyOf(cfg)
	if err != nil {
		return 0, 0, 0, err
	}
	conn, err := amqp091.Dial(base.AMQPURL)
	if err != nil {
		return 0, 0, 0, err
	}
	defer conn.Close()
	for _, q := range topo.Queues() {
		ch, err := conn.Channel()
		if err != nil {
			return 0, 0, 0, err
		}
		if info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err == nil {
			messages += int64(info.Messages)
		}
		ch.Close()
	}
	if _, b, m, _, err := rabbitmqctlQueues(ctx, env.prefix); err == nil {
		body, memory = b, m
	}
	return messages, body, memory, nil
}

// scheduleStream has rate deliveries a second fall due for d and returns each one's fire
// lateness (its attempt_started event's recorded_at − its send_at, ms, sorted) from the
// histories, the part of it until the due pass queued it (queued − send_at), how many it sent,
// and how many accepts were answered after their send_at. With lead zero (the default) the
// stream is scheduled before any of it falls due, as scheduled sends are: all its deliveries are
// accepted first (closed loop), their send_at rate a second from schedulePrefillFor ahead, and
// only the due pass, the relay and the workers run while they fall due. With a lead, each is
// accepted open loop lead ahead of its send_at, so that the stream's accepts run beside them (the
// phase's method until 2026-12-02, at 2 s).
func scheduleStream(ctx context.Context, env *benchEnv, sink *benchSink, rate int, d, lead time.Duration, far time.Time) ([]float64, []float64, int, int, error) {
	requests := max(1, rate/scheduleStreamGroup)
	total := max(1, int(float64(requests)*d.Seconds()))
	received := sink.received.Load()
	var late atomic.Int64
	var next atomic.Int64
	if lead <= 0 {
		start := time.Now().Add(max(schedulePrefillFor, d))
		step := time.Second / time.Duration(requests)
		var claimed atomic.Int64
		_, _, err := closedLoop(scheduleAcceptClients, max(schedulePrefillFor, d), func() error {
			i := claimed.Add(1) - 1
			if i >= int64(total) {
				return errLoopDone
			}
			sendAt := start.Add(time.Duration(i) * step)
			if _, err := acceptPost(env.base, "/v1/notifications", scheduleBody(sink.url, i*scheduleStreamGroup, scheduleStreamGroup, sendAt)); err != nil {
				return fmt.Errorf("schedule stream: %w", err)
			}
			if time.Now().After(sendAt) {
				late.Add(scheduleStreamGroup)
			}
			return nil
		})
		if err != nil {
			return nil, nil, 0, 0, err
		}
		if n := min(claimed.Load(), int64(total)); n < int64(total) {
			return nil, nil, 0, 0, fmt.Errorf("schedule stream: %d of %d requests accepted before the stream fell due", n, total)
		}
		time.Sleep(time.Until(start.Add(d)))
		return scheduleLateness(ctx, env, sink, received, total*scheduleStreamGroup, far, int(late.Load()))
	}
	err := openLoop(requests, total, nil, func(_ int, at time.Time) error {
		sendAt := at.Add(lead)
		first := next.Add(scheduleStreamGroup) - scheduleStreamGroup
		if _, err := acceptPost(env.base, "/v1/notifications", scheduleBody(sink.url, first, scheduleStreamGroup, sendAt)); err != nil {
			return fmt.Errorf("schedule stream: %w", err)
		}
		if time.Now().After(sendAt) {
			late.Add(scheduleStreamGroup)
		}
		return nil
	})
	if err != nil {
		return nil, nil, 0, 0, err
	}
	return scheduleLateness(ctx, env, sink, received, total*scheduleStreamGroup, far, int(late.Load()))
}

// scheduleLateness waits for the stream's sent deliveries to reach the sink and reads their
// lateness from the histories (see scheduleStream).
func scheduleLateness(ctx context.Context, env *benchEnv, sink *benchSink, received int64, sent int, far time.Time, late int) ([]float64, []float64, int, int, error) {
	waitReceived(sink, received+int64(sent), scheduleLead+scheduleSettleAfterTheStream)
	rows, err := env.pool.Query(ctx, `SELECT extract(epoch FROM min(a.recorded_at) - (s.data->>'send_at')::timestamptz) * 1000,
			extract(epoch FROM min(q.recorded_at) - (s.data->>'send_at')::timestamptz) * 1000
		FROM events s JOIN events a ON a.delivery_id = s.delivery_id AND a.type = 'delivery.attempt_started'
		JOIN events q ON q.delivery_id = s.delivery_id AND q.type = 'delivery.queued'
		WHERE s.type = 'delivery.scheduled' AND (s.data->>'send_at')::timestamptz < $1
		GROUP BY s.delivery_id, s.data->>'send_at'`, far.Add(-time.Hour))
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("fire lateness: %w", err)
	}
	defer rows.Close()
	var lat, queued latencies
	for rows.Next() {
		var ms, q float64
		if err := rows.Scan(&ms, &q); err != nil {
			return nil, nil, 0, 0, err
		}
		lat.v, queued.v = append(lat.v, ms), append(queued.v, q)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, 0, 0, err
	}
	return lat.sorted(), queued.sorted(), sent, late, nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/domain"
)

// Pacing of the run.
const (
	progressEvery = 5 * time.Second
	pollEvery     = time.Second
	// chaosTail is how long the chaos goes on after the last delivery was accepted, unless 90 %
	// of the deliveries settle sooner.
	chaosTail = 30 * time.Second
	// settleGrace is how long every delivery must stay settled before the processes are
	// stopped: a worker still holding the call of an attempt marked unknown may yet record its
	// real outcome.
	settleGrace = 2*max(webhookTimeout, smsTimeout) + time.Second
	stopGrace   = shutdownTimeout + 10*time.Second
	// stallAfter ends the wait once no delivery has moved for this long after the chaos: retry
	// delays are at most the retry cap, every process is back within seconds, and an SMS a
	// provider accepted waits at most receipt_max_wait, then a reconciler pass, to be decided.
	stallAfter = max(30*time.Second, receiptMaxWait+2*reconcileInterval+5*time.Second)
	logTail    = 40
)

// runner is one soak run.
type runner struct {
	o       options
	out     io.Writer
	started time.Time
	seed    uint64

	env      *environment
	features features
	// histories loads the deliveries' streams from the hot store and the archive.
	histories *histories
	sink      *sink
	api       string
	// api2 is the second API process's address (--twice), which the DLQ replays go to.
	api2      string
	procs     []*process
	handovers *handoverWatch
	// fakes are the SMS providers; not in procs, so the kill loop leaves them alone.
	fakes    *smsFakes
	producer *producer
	chaos    *chaos
	tracker  *tracker
	storm    *receiptStorm
	replayer *replayer
	// cancels are the canceller's final answers, once every cancel was answered.
	canceller *canceller
	cancels   map[string]string
	// optOuter opts recipients out mid-run; optOuts are its opt-outs once each was answered.
	optOuter      *optOuter
	optOuts       map[string]optOut
	optOutRetries int
	// replaying: the ledger under test replays its DLQ over the API, and the soak does so all
	// through the run.
	replaying bool
}

// run runs the soak and returns the exit code. The last line it prints is
// `lost=N duplicates=N unknown=N`; counts of -1 mean the run did not get as far as the checks.
func run(ctx context.Context, o options, out io.Writer) int {
	r := &runner{o: o, out: out, started: time.Now(), seed: o.Seed}
	if r.seed == 0 {
		r.seed = rand.Uint64()
	}
	v, err := r.soak(ctx)
	failed := err != nil || len(v.Failures) > 0
	if r.env != nil {
		r.env.tearDown(o.Keep == "always" || (o.Keep == "failed" && failed), r.say)
	}
	if err != nil {
		r.say("FAILED: %v", err)
		fmt.Fprintln(out, "lost=-1 duplicates=-1 unknown=-1")
		return 1
	}
	code := 0
	if failed {
		code = 1
	}
	fmt.Fprintf(out, "lost=%d duplicates=%d unknown=%d\n", v.Lost(), v.Duplicates(), v.Unknown)
	return code
}

func (r *runner) say(format string, args ...any) {
	fmt.Fprintf(r.out, "soak %6.1fs: %s\n", time.Since(r.started).Seconds(), fmt.Sprintf(format, args...))
}

func (r *runner) soak(parent context.Context) (*verdict, error) {
	ctx, cancel := context.WithTimeout(parent, r.o.Timeout)
	defer cancel()
	var err error
	if r.env, err = setUp(ctx, r.o); err != nil {
		return nil, fmt.Errorf("set up: %w", err)
	}
	r.features = probeFeatures(r.o.Ledger)
	if r.sink, err = startSink(); err != nil {
		return nil, fmt.Errorf("start the webhook sink: %w", err)
	}
	defer r.sink.Close()
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r.api = "http://" + addr
	r.say("schema %s, queue prefix %s, %d deliveries (%.0f%% SMS), kill every %s, seed %d, logs in %s",
		r.env.schema, r.env.prefix, r.o.Deliveries, 100*r.o.SMSShare, r.o.KillEvery, r.seed, r.env.dir)
	if fi, err := os.Stat(r.o.Ledger); err == nil {
		r.say("ledger binary %s, built %s", r.o.Ledger, fi.ModTime().UTC().Format(time.RFC3339))
	}
	r.fakes, err = startSMSFakes(ctx, r.o.Ledger, r.env.dir)
	if r.fakes != nil {
		defer r.stop(r.fakes.procs())
	}
	if err != nil {
		return nil, fmt.Errorf("start the SMS fakes: %w", err)
	}
	r.env.config = filepath.Join(r.env.dir, "ledger.yaml")
	if err := writeConfig(r.env.config, addr, r.env.archive, r.fakes); err != nil {
		return nil, fmt.Errorf("write the configuration file: %w", err)
	}
	described, err := checkConfig(ctx, r.o.Ledger, r.env.config, ledgerEnv(r.env, "config-check", addr, r.o))
	if err != nil {
		return nil, err
	}
	r.say("SMS over the Twilio fake on %s, then the Vonage fake on %s; ledger config check %s", r.fakes.twilioAddr, r.fakes.vonageAddr, lastLine(described))
	migrated, err := r.env.migrate(ctx, r.o)
	if err != nil {
		return nil, err
	}
	r.say("retention: keep %s, payloads %s, partitions %s wide, archive in %s; ledger migrate: %s",
		retentionKeep, retentionPayloads, retentionPartition, r.env.archive, migrated)
	r.histories = &histories{store: postgres.NewEventStore(r.env.pool), archive: newArchiveReader(r.env.archive)}

	roles := [][2]string{{"api", "api"}, {"relay", "relay"}, {"worker-1", "worker"}, {"worker-2", "worker"}, {"reconciler", "reconciler"}}
	if r.o.Twice {
		roles = append(roles, [2]string{"api-2", "api"}, [2]string{"relay-2", "relay"}, [2]string{"reconciler-2", "reconciler"})
	}
	if r.features.projector {
		roles = append(roles, [2]string{"projector", "projector"})
		if r.o.Twice {
			roles = append(roles, [2]string{"projector-2", "projector"})
		}
	} else {
		r.say("this ledger has no projector role: the status view check compares the API with a fresh fold")
	}
	for _, nr := range roles {
		listen := "127.0.0.1:0" // only the API processes listen on the soak's addresses
		switch nr[0] {
		case "api":
			listen = addr
		case "api-2":
			a2, err := freeAddr()
			if err != nil {
				return nil, err
			}
			listen, r.api2 = a2, "http://"+a2
		}
		r.procs = append(r.procs, newProcess(r.o.Ledger, r.env.dir, nr[0], []string{"serve", "--roles", nr[1]}, ledgerEnv(r.env, nr[0], listen, r.o)))
	}
	r.env.declared = true // the processes declare the topology; tearDown deletes it
	for _, p := range r.procs {
		go p.supervise(context.WithoutCancel(ctx))
	}
	defer r.stop(r.procs) // a no-op for processes already stopped
	if err := waitHealthy(ctx, r.api); err != nil {
		r.printLogs()
		return nil, err
	}
	replayAPI := r.api
	if r.api2 != "" {
		if err := waitHealthy(ctx, r.api2); err != nil {
			r.printLogs()
			return nil, err
		}
		replayAPI = r.api2
	}

	r.tracker = newTracker(r.histories)
	r.replayer = newReplayer(replayAPI)
	r.replaying = r.replayer.supported(ctx)
	r.tracker.replaying = r.replaying
	replayCtx, stopReplays := context.WithCancel(ctx)
	defer stopReplays()
	var background sync.WaitGroup
	if r.replaying {
		background.Go(func() { r.replayer.loop(replayCtx) })
		background.Go(func() { r.replayer.jobs(replayCtx) })
	} else {
		r.say("this ledger has no POST /v1/dlq/replay: dead deliveries stay dead")
	}
	r.storm = newReceiptStorm(r.api, postgres.NewEventStore(r.env.pool), r.acceptedIDs)
	background.Go(func() { r.storm.loop(replayCtx) })
	r.canceller = newCanceller(ctx, r.api)
	r.optOuter = newOptOuter(ctx, r.api, r.sink.URL())
	r.producer = newProducer(r.api, r.sink.URL(), smsPlan{r.o.SMSShare}, r.canceller, r.env.schema, r.o.Deliveries, r.o.Clients, r.o.Rate, r.o.Burst)
	r.chaos = newChaos(r.procs, r.seed, r.say)
	if r.o.Twice {
		r.handovers = newHandoverWatch(r.env.pool)
		r.chaos.handovers = r.handovers
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		r.producer.produce(ctx)
	}()
	r.runChaos(ctx, produced)
	<-produced
	// Every cancel is answered before the wait for the rest: a scheduled delivery is not
	// settled while its cancel may still come.
	r.cancels = r.canceller.wait()
	r.optOuts, r.optOutRetries = r.optOuter.wait()
	r.waitSettled(ctx)
	stopReplays()
	background.Wait()

	// The checks run even when the run timed out: use a context of their own.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(parent), 3*time.Minute)
	defer ccancel()
	return r.finish(cctx)
}

// runChaos kills processes until production is over and most deliveries have settled;
// meanwhile it terminates the database connections once (a quarter into production), restarts
// RabbitMQ once (halfway), kills the Twilio fake for good (three fifths in), and has a tenth of
// the webhook recipients opt out, one by one from 35 % to 65 % of production.
func (r *runner) runChaos(ctx context.Context, produced <-chan struct{}) {
	kctx, stopKills := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.chaos.killLoop(kctx, r.o.KillEvery)
	}()
	n := int64(r.o.Deliveries)
	terminated, rabbitStarted, twilioKilled, failedOver := false, false, false, r.o.PGFailover == ""
	optedOut := 0
	rabbitDone := make(chan struct{})
	var producedAt time.Time
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		accepted := r.producer.accepted.Load()
		if !terminated && accepted >= n/4 {
			terminated = true
			r.chaos.terminateConnections(ctx, r.env.pool)
		}
		if !failedOver && accepted >= n*2/5 {
			failedOver = true
			r.chaos.failOverDatabase(ctx, r.o.PGFailover)
		}
		if !rabbitStarted && accepted >= n/2 {
			rabbitStarted = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(rabbitDone)
				if r.o.Cluster != "" {
					topo, err := r.env.topology()
					if err != nil {
						r.chaos.fail("cluster: %v", err)
						return
					}
					r.chaos.killLeader(ctx, r.o.Cluster, topo.Work(webhook.Name, domain.PriorityNormal), r.o.ClusterDown)
					return
				}
				if !r.o.RestartBroker {
					r.say("chaos: RabbitMQ is not restarted (--restart-broker=false)")
					return
				}
				r.chaos.restartRabbitMQ(ctx, r.env.amqpURL)
			}()
		}
		for optedOut < optOutRecipients && float64(accepted) >= optOutShareAt(optedOut)*float64(n) {
			r.optOuter.start(optedOut)
			optedOut++
		}
		if !twilioKilled && accepted >= n*3/5 {
			twilioKilled = true
			r.chaos.killTwilio(ctx, r.fakes)
		}
		settledN := r.refresh(ctx, false)
		if time.Since(lastProgress) >= progressEvery {
			r.progress(settledN)
			lastProgress = time.Now()
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case <-produced:
			if producedAt.IsZero() {
				producedAt = time.Now()
			}
		default:
			continue
		}
		rabbitOver := false
		select {
		case <-rabbitDone:
			rabbitOver = true
		default:
		}
		if terminated && rabbitOver && (settledN*10 >= int(accepted)*9 || time.Since(producedAt) >= chaosTail) {
			break
		}
	}
	stopKills()
	wg.Wait()
	if !terminated || !rabbitStarted || !twilioKilled || !failedOver {
		r.chaos.fail("the run ended before the planned database, broker and provider disturbances")
	}
	if optedOut < optOutRecipients {
		r.chaos.fail("the run ended after %d of the %d planned opt-outs", optedOut, optOutRecipients)
	}
	r.say("chaos over: %s", r.killSummary())
}

// waitSettled keeps the processes running until every accepted delivery has settled (and stays
// settled for settleGrace), or ctx ends.
func (r *runner) waitSettled(ctx context.Context) {
	lastProgress := time.Now()
	r.tracker.changed = lastProgress
	for ctx.Err() == nil {
		ids := r.acceptedIDs()
		if n := r.refresh(ctx, false); n == len(ids) {
			select {
			case <-ctx.Done():
			case <-time.After(settleGrace):
			}
			if r.refresh(ctx, true) == len(ids) {
				r.progress(n)
				return
			}
			continue
		}
		if time.Since(lastProgress) >= progressEvery {
			r.progress(r.refresh(ctx, false))
			lastProgress = time.Now()
		}
		if still := time.Since(r.tracker.changed); still >= stallAfter {
			r.say("no delivery has changed state for %s: the rest are stuck", still.Round(time.Second))
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
	r.say("timed out (--timeout %s) before every delivery settled", r.o.Timeout)
}

// refresh folds the streams and returns how many accepted deliveries have settled.
func (r *runner) refresh(ctx context.Context, all bool) int {
	n, err := r.tracker.refresh(ctx, r.acceptedIDs(), all)
	if err != nil && ctx.Err() == nil {
		r.say("fold streams: %v", err)
	}
	return n
}

func (r *runner) acceptedIDs() []string {
	ids, _ := r.producer.accepts()
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, id)
	}
	return out
}

func (r *runner) progress(settledN int) {
	r.say("accepted=%d/%d settled=%d sink_calls=%d producer_retries=%d %s",
		r.producer.accepted.Load(), r.o.Deliveries, settledN, r.sink.Count(), r.producer.retries.Load(), r.killSummary())
}

func (r *runner) killSummary() string {
	var parts []string
	kills, exits := 0, 0
	for _, p := range r.procs {
		_, k, e, _ := p.counts()
		kills += k
		exits += e
		parts = append(parts, fmt.Sprintf("%s=%d", p.name, k))
	}
	return fmt.Sprintf("kills=%d (%s) exits=%d", kills, strings.Join(parts, " "), exits)
}

// finish stops the processes and runs every check.
func (r *runner) finish(ctx context.Context) (*verdict, error) {
	var api, projector, rest []*process
	for _, p := range r.procs {
		switch {
		case strings.HasPrefix(p.name, "api"):
			api = append(api, p)
		case strings.HasPrefix(p.name, "projector"):
			projector = append(projector, p)
		default:
			rest = append(rest, p)
		}
	}
	// The fakes, relay, workers and reconciler stop first, so that the log stops moving (no
	// receipt comes in any more); the API answers the status check, and the projector catches
	// up with the last events.
	r.stop(append(r.fakes.procs(), rest...))
	sends, err := r.fakes.sends()
	if err != nil {
		return nil, err
	}
	ids, unaccepted := r.producer.accepts()
	for i := range r.o.Deliveries {
		key := r.producer.key(i)
		if _, ok := ids[key]; !ok {
			if _, ok := unaccepted[key]; !ok {
				unaccepted[key] = "no 2xx before the run ended"
			}
		}
	}
	idList := make([]string, 0, len(ids))
	for _, id := range ids {
		idList = append(idList, id)
	}
	streams, archived, err := r.histories.loadSettled(ctx, idList)
	if err != nil {
		return nil, err
	}
	incidents, chaosFailures := r.chaos.snapshot()
	ev := evidence{ids: ids, unaccepted: unaccepted, streams: streams, calls: r.sink.Calls(), incidents: incidents, replaying: r.replaying,
		sends: sends, twilioListed: r.fakes.listed, twilioKilledAt: r.fakes.killedAt, cancels: r.cancels,
		optOuts: r.optOuts, sentAt: r.producer.sentTimes(), archived: archived, segments: len(r.histories.archive.manifests())}
	v := check(ev)
	for _, f := range chaosFailures {
		v.fail("chaos: %s", f)
	}
	if n, first := r.storm.failures(); n > 0 {
		v.fail("receipt storm: %d copies answered with an error: %s", n, strings.Join(first, "; "))
	}
	if n := r.replayer.jobErrors.Load(); n > 0 {
		v.fail("replay jobs: %d answered 5xx: %s", n, strings.Join(r.replayer.jobFailures, "; "))
	}
	checkLog(ctx, v, r.env.pool, ids)
	checkArchivedLog(v, r.histories.archive, ids)
	want := foldAll(streams)
	if n := checkAPIStatus(ctx, v, r.api, want, r.histories.archive); n > 0 {
		r.say("API status: %d deliveries answered 410 archived, each checked against its archived history", n)
	}
	if r.features.projector {
		checkStatusView(ctx, v, r.env.pool, want, r.histories.archive, r.features, r.o.Ledger, ledgerEnv(r.env, "status-check", "127.0.0.1:0", r.o), r.say)
	}
	r.stop(append(api, projector...))
	// Every process is stopped: no retention pass writes a segment any more.
	if verified, err := verifyArchive(ctx, r.o.Ledger, r.env.archive); err != nil {
		v.fail("%v", err)
	} else {
		r.say("ledger archive verify: %s", verified)
	}
	if err := r.sink.save(filepath.Join(r.env.dir, "sink.csv")); err != nil {
		r.say("save the sink's record: %v", err)
	}
	r.report(v, ev)
	return v, nil
}

// report prints what happened and, when a check failed, the evidence and the process logs.
func (r *runner) report(v *verdict, ev evidence) {
	for _, p := range append(slices.Clone(r.procs), r.fakes.procs()...) {
		starts, kills, exits, last := p.counts()
		line := fmt.Sprintf("process %-10s starts=%d kills=%d exits=%d", p.name, starts, kills, exits)
		if exits > 0 {
			line += " (last: " + last + ")"
		}
		r.say("%s", line)
	}
	for _, in := range ev.incidents {
		if in.Kind != "kill" {
			r.say("incident %s at %.1fs %s", in.Kind, in.At.Sub(r.started).Seconds(), in.Detail)
		}
	}
	if r.o.Twice {
		relays, median := relayHandovers(ev.incidents, ev.streams)
		r.say("handover, relay (two running): worst accepted → queued in the %s after each relay kill: %s (median over the run %s)",
			relayWindow, describeDurations(relays), median.Round(time.Millisecond))
		if r.handovers != nil {
			for _, role := range []string{"relay", "projector"} {
				r.say("handover, %s (two running), from each SIGKILL: %s", role, r.handovers.describe(role))
			}
		}
	}
	r.say("producer: accepted=%d retries=%d replayed=%d (answers repeated for a key already accepted)",
		r.producer.accepted.Load(), r.producer.retries.Load(), r.producer.replayed.Load())
	r.say("sink: calls=%d", len(ev.calls))
	r.say("states: delivered=%d dead=%d unknown=%d (call unanswered %d, worker stopped mid-call %d, no receipt in time %d) cancelled=%d suppressed=%d missing=%d stuck=%d",
		v.Delivered, v.Dead, v.Unknown, v.UnknownCall, v.UnknownStopped, v.UnknownNoReceipt, v.Cancelled, v.Suppressed, v.Missing, v.Stuck)
	sc := v.Schedule
	r.say("scheduled: %d sent with a send_at 0.5-5 s ahead, %d scheduled in the ledger (delivered=%d unknown=%d dead=%d cancelled=%d suppressed=%d); cancels: 200=%d 409=%d other=%d (sent again after no answer or a 5xx %d)",
		r.producer.scheduled.Load(), sc.Scheduled, sc.Delivered, sc.Unknown, sc.Dead, sc.Cancelled, sc.Suppressed, sc.Cancels200, sc.Cancels409, sc.CancelsOther, r.canceller.retries.Load())
	r.say("lateness (attempt 1 started − send_at) of the scheduled deliveries: %s", describeLateness(sc.Lateness))
	o := v.OptOuts
	r.say("optouts=%d (suppression %d, preference %d; of %d webhook recipients; sent again after no answer or a 5xx %d) accepted_after=%d suppressed_after=%d calls_after_optout=%d; accepted before: %d (delivered=%d suppressed=%d unknown=%d cancelled=%d)",
		o.OptOuts, o.BySuppression, o.ByPreference, webhookRecipients, r.optOutRetries, o.After, o.SuppressedAfter, o.CallsAfter,
		o.Before, o.BeforeDelivered, o.BeforeSuppressed, o.BeforeUnknown, o.BeforeCancelled)
	s := v.SMS
	r.say("sms: delivered=%d dead=%d unknown=%d failed_over=%d (of %d SMS; unknown: call unanswered %d, worker stopped mid-call %d, no receipt in time %d; still awaiting a receipt %d; suppressed after the provider said an earlier one's number is out of service %d)",
		s.Delivered, s.Dead, s.Unknown, s.FailedOver, s.Deliveries, s.UnknownCall, s.UnknownStopped, s.UnknownNoReceipt, s.Awaiting, o.ByProvider)
	killed := "the Twilio fake was not killed"
	if !ev.twilioKilledAt.IsZero() {
		killed = fmt.Sprintf("the Twilio fake was killed at %.1fs, listing %d messages", ev.twilioKilledAt.Sub(r.started).Seconds(), len(ev.twilioListed))
	}
	r.say("sms sends: twilio=%d vonage=%d (%s); duplicates %d (explained by unknown %d, unexplained %d)",
		s.TwilioSends, s.VonageSends, killed, s.Duplicates, s.ByUnknown, s.Unexplained)
	if r.replaying {
		r.say("replays: %d deliveries answered 404 died, %d replayed through the DLQ or a job (%d replay requests failed while processes died; not to be replayed: %d whose 404 the ledger never learnt, unknown, and %d dead after their payload expired); %d replay jobs started two at a time over the same page (%d answered 503 with Retry-After)",
			v.Gone, v.Replayed, r.replayer.failures.Load(), v.GoneUnknown, v.GoneExpired, r.replayer.jobsStarted.Load(), r.replayer.jobsUnavailable.Load())
	}
	r.say("%s", r.storm.summary())
	rv := v.Retention
	r.say("retention: archived=%d segments=%d hot=%d payloads_expired=%d (deliveries counted from the archive, its segments, deliveries counted from the hot store, deliveries whose payload body expired)",
		rv.Archived, rv.Segments, rv.Hot, rv.PayloadsExpired)
	r.say("duplicates: %d (webhooks: same attempt called again %d, delivery resent after a 200 %d; explained by unknown %d, by a redelivery after a kill %d, unexplained %d; SMS again to a phone %d)",
		v.Duplicates(), v.SameAttemptCalls, v.ResentAfterSuccess, v.ByUnknown, v.ByKill, v.Unexplained, v.SMS.Duplicates)
	if !r.features.verify {
		r.say("status view: this ledger has no `projections verify status`; compared GET /v1/deliveries/{id} (state, version, attempts) with a fresh fold instead")
	}
	if len(v.Failures) == 0 {
		r.say("all checks passed")
		return
	}
	printExamples(r.out, v, ev)
	timeline := append([]incident(nil), ev.incidents...)
	for _, p := range append(slices.Clone(r.procs), r.fakes.procs()...) {
		timeline = append(timeline, p.timeline()...)
	}
	sort.SliceStable(timeline, func(i, j int) bool { return timeline[i].At.Before(timeline[j].At) })
	r.printIncidents(timeline)
	r.printLogs()
	sort.Strings(v.Failures)
	for _, f := range v.Failures {
		r.say("FAIL: %s", f)
	}
}

// printIncidents prints the chaos timeline, in the UTC times of the histories.
func (r *runner) printIncidents(incidents []incident) {
	fmt.Fprintf(r.out, "timeline (%d chaos incidents, process starts and exits):\n", len(incidents))
	for _, in := range incidents {
		end := ""
		if !in.End.IsZero() {
			end = " until " + in.End.UTC().Format("15:04:05.000")
		}
		fmt.Fprintf(r.out, "  %s%s %s %s %s\n", in.At.UTC().Format("15:04:05.000"), end, in.Kind, in.Target, in.Detail)
	}
}

func (r *runner) printLogs() {
	procs := slices.Clone(r.procs)
	if r.fakes != nil {
		procs = append(procs, r.fakes.procs()...)
	}
	for _, p := range procs {
		fmt.Fprintf(r.out, "--- log of %s (last %d lines)\n", p.name, logTail)
		p.tail(r.out, logTail)
	}
}

// stop stops processes with SIGTERM, in parallel.
func (r *runner) stop(procs []*process) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(stopGrace)
		}()
	}
	wg.Wait()
}

// waitHealthy waits for the API process to answer /healthz.
func waitHealthy(ctx context.Context, api string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(api + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the API at %s did not come up: %v", api, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// freeAddr finds a free loopback port for the API.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

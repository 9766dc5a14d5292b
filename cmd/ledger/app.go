package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/metrics"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/webhook"
	"github.com/deliveryledger/ledger/adapters/worker"
	"github.com/deliveryledger/ledger/adapters/fairshare"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// channelWebhook is the one channel with an adapter so far.
const channelWebhook = "webhook"

// App is the wired ledger: the roles of one process over one database and one broker.
type App struct {
	cfg      Config
	logger   *slog.Logger
	roles    map[string]bool
	pool     *pgxpool.Pool
	store    *postgres.EventStore
	topology amqp.Topology
	listener net.Listener
	server   *http.Server

	queued    *commands.QueuedRecorder // the relay's; made by Run
	relayPool *pgxpool.Pool            // the relay's connections, with asynchronous commit
	workers   map[string]*worker.Worker
	metrics   *metrics.Metrics
	scheduler *fairshare.Scheduler
	batcher   *postgres.AcceptBatcher
	appends   *postgres.AppendBatcher
	projector *projections.Runner
	opts      appOptions
}

// appOption adjusts the wiring (tests replace the provider adapter with one that misbehaves).
type appOption func(*appOptions)

type appOptions struct {
	sender        commands.Sender
	relayObserver func(lag time.Duration)
}

// withRelayObserver is told the lag (outbox write → broker confirm) of every relayed message.
func withRelayObserver(f func(time.Duration)) appOption {
	return func(o *appOptions) { o.relayObserver = f }
}

// withSender replaces the webhook adapter.
func withSender(s commands.Sender) appOption { return func(o *appOptions) { o.sender = s } }

// buildApp wires the application: every dependency is built here, by hand, in one place.
func buildApp(ctx context.Context, cfg Config, logger *slog.Logger, options ...appOption) (*App, error) {
	var opts appOptions
	for _, o := range options {
		o(&opts)
	}
	roles, err := cfg.roles()
	if err != nil {
		return nil, err
	}
	policy := cfg.policy()
	a := &App{
		opts:   opts,
		cfg:    cfg,
		logger: logger,
		roles:  roles,
		topology: amqp.Topology{
			Prefix:   cfg.AMQPPrefix,
			Channels: []string{channelWebhook},
			Tiers:    policy.Tiers(),
		},
		workers: map[string]*worker.Worker{},
		metrics: metrics.New(),
	}
	a.pool, err = postgres.Connect(ctx, cfg.DatabaseURL, "", int32(cfg.DatabaseMaxConns))
	if err != nil {
		return nil, err
	}
	if err := postgres.CheckSchema(ctx, a.pool); err != nil {
		a.pool.Close()
		return nil, err
	}
	if err := a.declareTopology(); err != nil {
		if roles["relay"] || roles["worker"] {
			// The relay must not publish before the queues exist (the broker drops a message
			// to a missing queue), and workers have nothing to consume: wait for the broker
			// rather than exit, so a broker restarting as the ledger starts costs a pause, not
			// a crash loop.
			if err := a.untilTopology(ctx, err); err != nil {
				a.pool.Close()
				return nil, err
			}
		} else {
			// The API and the projector only write to PostgreSQL: accepting while the broker is
			// down is exactly what the outbox is for. The relay declares the topology when it
			// starts.
			logger.Warn("broker unreachable; starting without it", "err", err)
		}
	}
	a.store = postgres.NewEventStore(a.pool)
	clock := commands.SystemClock{}
	policies := func(string) domain.RetryPolicy { return policy }

	if roles["worker"] {
		allow, err := webhook.ParseCIDRs(cfg.WebhookAllowCIDRs)
		if err != nil {
			a.pool.Close()
			return nil, fmt.Errorf("--webhook-allow-cidrs: %w", err)
		}
		var sender commands.Sender = opts.sender
		if sender == nil {
			if sender, err = webhook.New(webhook.Config{Timeout: cfg.WebhookTimeout, AllowCIDRs: allow, InFlight: cfg.WorkerConcurrency}); err != nil {
				a.pool.Close()
				return nil, err
			}
		}
		limiter, err := cfg.limiter()
		if err != nil {
			a.pool.Close()
			return nil, err
		}
		shares, err := fairshare.ParseShares(cfg.PriorityShares)
		if err != nil {
			a.pool.Close()
			return nil, fmt.Errorf("--priority-shares: %w", err)
		}
		a.scheduler, err = fairshare.New(fairshare.Config{Slots: cfg.WorkerConcurrency, Shares: shares})
		if err != nil {
			a.pool.Close()
			return nil, err
		}
		// Concurrent workers' records share transactions (group commit), like accepts.
		a.appends = postgres.NewAppendBatcher(a.store, 2, 64)
		a.workers[channelWebhook] = worker.New(worker.Commands{
			Start:   commands.NewStartAttemptHandler(a.appends, clock),
			Record:  commands.NewRecordOutcomeHandler(a.appends, a.topology, clock, policies),
			Defer:   commands.NewDeferAttemptHandler(a.appends, a.topology, clock),
			Reroute: commands.NewRerouteHandler(a.appends, a.topology, clock),
		}, sender, limiter, a.metrics, clock, logger.With("role", "worker", "channel", channelWebhook))
	}

	if roles["projector"] {
		a.projector, err = projections.NewRunner(a.pool, projections.All(), projections.RunnerConfig{
			BatchSize:    cfg.ProjectorBatchSize,
			PollInterval: cfg.ProjectorPollInterval,
			Metrics:      a.metrics,
			Logger:       logger.With("role", "projector"),
			// An accept's commit notifies the relay; the projector wakes on it too, so a new
			// delivery shows in the lists at once rather than after a poll interval.
			Wake: func(ctx context.Context) <-chan struct{} {
				return postgres.NotifyWaker(ctx, a.pool, logger.With("role", "projector"))
			},
		})
		if err != nil {
			a.pool.Close()
			return nil, err
		}
	}

	if roles["api"] {
		keys, err := httpapi.ParseAPIKeys(cfg.APIKeys)
		if err != nil {
			a.pool.Close()
			return nil, fmt.Errorf("--api-keys: %w", err)
		}
		// Concurrent accepts share transactions (group commit); each caller is answered after
		// the commit that holds its rows.
		a.batcher = postgres.NewAcceptBatcher(a.store, postgres.DefaultAcceptCommitters, postgres.DefaultAcceptBatch)
		accept := commands.NewAcceptHandler(a.batcher, a.topology, clock, cfg.MaxAttempts)
		accept.OnAccepted = a.metrics.Accepted
		replay := commands.NewReplayHandler(a.store, a.topology, clock)
		replay.OnDecided = a.metrics.Decided
		reconcile := commands.NewReconcileHandler(a.store, a.topology, clock, policies)
		reconcile.OnDecided = a.metrics.Decided
		api, err := httpapi.New(httpapi.Config{
			APIKeys:  keys,
			Channels: map[string]func(string) error{channelWebhook: httpapi.ValidateWebhookURL},
		}, httpapi.Deps{
			Accept:   accept,
			Events:   a.store,
			Requests: a.store,
			Views:    projections.NewReader(a.pool),
			// An operator's decisions are rare: they go straight to the store, not through a
			// batcher.
			Replay:    replay,
			Reconcile: reconcile,
			Ready:     a.ready,
		}, logger.With("role", "api"))
		if err != nil {
			a.pool.Close()
			return nil, err
		}
		a.listener, err = net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			a.pool.Close()
			return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.metrics.Handler())
		mux.Handle("/", api)
		a.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	return a, nil
}

// declareTopology declares every queue before anything publishes: the relay's publisher never
// declares, and a message sent to a missing queue is dropped by the broker.
func (a *App) declareTopology() error {
	conn, err := amqp091.Dial(a.cfg.AMQPURL)
	if err != nil {
		return fmt.Errorf("reach RabbitMQ at %s: %w", redactURL(a.cfg.AMQPURL), err)
	}
	defer conn.Close()
	kept, err := a.topology.Declare(conn)
	if len(kept) > 0 {
		a.logger.Warn("queues declared by an older ledger keep their classic queue version 1, which costs the broker more per message; "+
			"move them to version 2 with a policy (rabbitmqctl set_policy ... '{\"queue-version\":2}' --apply-to queues)",
			"queues", kept)
	}
	return err
}

// Pauses between attempts to declare the topology while the broker is unreachable at start.
const (
	topologyRetryFirst = 500 * time.Millisecond
	topologyRetryMax   = 5 * time.Second
)

// untilTopology declares the topology again, with growing pauses, until it succeeds, ctx ends,
// or the broker refuses for a reason waiting cannot mend (credentials, a queue declared with
// other arguments); err is the error of the first attempt.
func (a *App) untilTopology(ctx context.Context, err error) error {
	start, logged := time.Now(), time.Time{}
	for pause := topologyRetryFirst; ; pause = min(pause*2, topologyRetryMax) {
		if !brokerUnreachable(err) {
			return err
		}
		if time.Since(logged) >= 30*time.Second {
			a.logger.Warn("broker unreachable: the relay and workers wait for it before they start",
				"err", err, "waited", time.Since(start).Round(time.Second))
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(pause):
		}
		if err = a.declareTopology(); err == nil {
			a.logger.Info("broker reachable; topology declared", "waited", time.Since(start).Round(time.Second))
			return nil
		}
	}
}

// brokerUnreachable tells a broker that cannot be reached (down, restarting, the connection
// dropped) from one that answered and refused.
func brokerUnreachable(err error) bool {
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) {
		return amqpErr.Code != amqp091.AccessRefused && amqpErr.Code != amqp091.PreconditionFailed &&
			amqpErr.Code != amqp091.NotAllowed && amqpErr.Code != amqp091.NotFound
	}
	return !errors.Is(err, amqp091.ErrCredentials) && !errors.Is(err, amqp091.ErrSASL) && !errors.Is(err, amqp091.ErrVhost)
}

// ready checks that the database and the broker answer.
func (a *App) ready(ctx context.Context) error {
	var errs []error
	if err := a.pool.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("database: %w", err))
	}
	conn, err := amqp091.DialConfig(a.cfg.AMQPURL, amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
	if err != nil {
		errs = append(errs, fmt.Errorf("broker: %w", err))
	} else {
		conn.Close()
	}
	return errors.Join(errs...)
}

// Addr is the API's listening address (useful with port 0).
func (a *App) Addr() string {
	if a.listener == nil {
		return ""
	}
	return a.listener.Addr().String()
}

// Run runs the roles until ctx is cancelled, then shuts them down gracefully.
func (a *App) Run(ctx context.Context) error {
	defer a.pool.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	start := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	if a.roles["relay"] {
		// The relay's own writes (outbox offsets, queued records) are safe to lose in a database
		// crash, so they commit without waiting for the disk (see postgres.AsyncCommit).
		relayPool, err := postgres.Connect(ctx, a.cfg.DatabaseURL, "", 4, postgres.AsyncCommit())
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		defer relayPool.Close()
		a.relayPool = relayPool
		a.queued = commands.NewQueuedRecorder(postgres.NewEventStore(relayPool), commands.SystemClock{}, a.logger.With("role", "relay"))
		start("relay", a.runRelay)
		start("queued recorder", a.queued.Run)
		if a.cfg.RedriveAfter > 0 {
			start("redrive", a.redriveLoop)
		}
		start("outbox prune", func(ctx context.Context) error {
			return postgres.PruneOutboxEvery(ctx, a.pool, relayConsumerGroup, time.Minute, a.logger)
		})
	}
	if a.roles["api"] || a.roles["relay"] || a.roles["worker"] {
		start("table statistics", func(ctx context.Context) error {
			return postgres.KeepStatistics(ctx, a.pool, statisticsInterval, a.logger)
		})
	}
	for channel, w := range a.workers {
		// One consumer per priority class, all drawing worker slots from one fair-share
		// scheduler: high is served first, but each class keeps its reserved share.
		for _, p := range amqp.Priorities {
			class := classOf(p)
			consumer, err := amqp.NewConsumer(amqp.ConsumerConfig{
				URL:             a.cfg.AMQPURL,
				Queue:           a.topology.Work(channel, p),
				Concurrency:     a.cfg.WorkerConcurrency,
				ShutdownTimeout: a.cfg.ShutdownTimeout,
				Logger:          a.logger.With("role", "worker", "channel", channel, "priority", p),
				Acquire: func(ctx context.Context) (func(), error) {
					return a.scheduler.Acquire(ctx, class)
				},
			}, w.Handle)
			if err != nil {
				return err
			}
			start("worker "+channel+" "+string(p), consumer.Run)
		}
	}
	if len(a.workers) > 0 {
		start("queue metrics", a.watchQueues)
	}
	if a.projector != nil {
		start("projector", a.projector.Run)
		start("waiting metrics", a.watchWaiting)
	}
	if a.server != nil {
		start("api", func(ctx context.Context) error {
			go func() {
				<-ctx.Done()
				shutdownCtx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
				defer cancel()
				_ = a.server.Shutdown(shutdownCtx)
			}()
			if err := a.server.Serve(a.listener); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	a.logger.Info("ledger running", "roles", a.cfg.Roles, "http", a.Addr(), "amqp_prefix", a.cfg.AMQPPrefix)
	wg.Wait()
	if a.batcher != nil {
		a.batcher.Close()
	}
	if a.appends != nil {
		a.appends.Close()
	}
	close(errs)
	return errors.Join(drain(errs)...)
}

func drain(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

// relayConsumerGroup names the relay's offset in the outbox.
const relayConsumerGroup = "relay"

// runRelay moves outbox rows to the broker, one forwarder per outbox shard, and records "queued"
// after each confirm.
func (a *App) runRelay(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, postgres.OutboxShards)
	for shard := range postgres.OutboxShards {
		go func() {
			err := a.runRelayShard(ctx, shard)
			if err != nil {
				err = fmt.Errorf("shard %d: %w", shard, err)
			}
			errs <- err
			cancel() // one shard failing stops the role, so the process is restarted whole
		}()
	}
	var all []error
	for range postgres.OutboxShards {
		if err := <-errs; err != nil && ctx.Err() == nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

func (a *App) runRelayShard(ctx context.Context, shard int) error {
	wmLogger := watermill.NewSlogLogger(a.logger.With("role", "relay", "shard", shard))
	cfg := amqp.RelayConfig{
		URL:         a.cfg.AMQPURL,
		OutboxTopic: postgres.OutboxTopicOf(shard),
		OnConfirmed: a.recordQueued,
	}
	pub, err := amqp.NewPublisher(cfg, wmLogger)
	if err != nil {
		return err
	}
	sub, err := postgres.NewOutboxSubscriber(ctx, a.relayPool, postgres.OutboxSubscriberConfig{
		ConsumerGroup: relayConsumerGroup, Logger: a.logger, BeforeAck: pub.Flush, Ready: pub.Ready,
	}, wmLogger)
	if err != nil {
		return err
	}
	relay, err := amqp.NewRelay(cfg, sub, pub, wmLogger)
	if err != nil {
		return err
	}
	return relay.Run(ctx)
}

// recordQueued appends "queued" for messages that carry the first attempt of a delivery.
func (a *App) recordQueued(ctx context.Context, _ string, msg *message.Message) error {
	if at, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(commands.MetaEnqueuedAt)); err == nil {
		lag := time.Since(at)
		a.metrics.Relayed(lag)
		if a.opts.relayObserver != nil {
			a.opts.relayObserver(lag)
		}
	}
	if msg.Metadata.Get(commands.MetaMarkQueued) != "true" {
		return nil
	}
	work, err := commands.DecodeWorkMessage(msg.Payload)
	if err != nil {
		a.logger.Error("relay: undecodable work message, not recording queued", "uuid", msg.UUID, "err", err)
		return nil
	}
	return a.queued.Mark(ctx, commands.QueuedMark{DeliveryID: work.DeliveryID, Tenant: work.Tenant, Attempt: work.Attempt})
}

// classOf maps a delivery priority to its scheduler class.
func classOf(p domain.Priority) fairshare.Class {
	switch p {
	case domain.PriorityHigh:
		return fairshare.High
	case domain.PriorityLow:
		return fairshare.Low
	}
	return fairshare.Normal
}

// statisticsInterval is how often a writing process checks whether its tables need ANALYZE.
const statisticsInterval = 5 * time.Second

// queuePollInterval is how often the worker role reads its queues' depths for /metrics.
const queuePollInterval = 5 * time.Second

// watchQueues keeps the queue depth gauges current.
func (a *App) watchQueues(ctx context.Context) error {
	ticker := time.NewTicker(queuePollInterval)
	defer ticker.Stop()
	for {
		if err := a.readQueueDepths(); err != nil {
			a.logger.Warn("read queue depths", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func (a *App) readQueueDepths() error {
	conn, err := amqp091.Dial(a.cfg.AMQPURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, q := range a.topology.Queues() {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err == nil {
			a.metrics.QueueDepth(q, info.Messages)
			ch.Close()
		}
	}
	return nil
}

// redriveLoop resends the work of deliveries that wait with no progress for longer than
// RedriveAfter (a broker can lose a message it moves out of a delay tier while it stops). It
// needs the status view, so it runs where a projector keeps one; it checks each candidate against
// its own history before resending, and resends one delivery at most once per RedriveAfter.
func (a *App) redriveLoop(ctx context.Context) error {
	redrive := commands.NewRedriveHandler(a.store, a.topology, commands.SystemClock{})
	interval := max(a.cfg.RedriveAfter/4, 100*time.Millisecond)
	last := map[string]time.Time{}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		now := time.Now()
		for id, at := range last {
			if now.Sub(at) > a.cfg.RedriveAfter {
				delete(last, id)
			}
		}
		ids, err := postgres.StaleDeliveries(ctx, a.pool, now.Add(-a.cfg.RedriveAfter), 500)
		if err != nil {
			if ctx.Err() == nil {
				a.logger.Warn("redrive: list stale deliveries", "err", err)
			}
			continue
		}
		sent := 0
		for _, id := range ids {
			if _, recent := last[id]; recent {
				continue
			}
			ok, err := redrive.Handle(ctx, id, now.Add(-a.cfg.RedriveAfter))
			if err != nil {
				a.logger.Warn("redrive failed", "delivery", id, "err", err)
				continue
			}
			if ok {
				last[id] = now
				sent++
			}
		}
		if sent > 0 {
			a.logger.Warn("redrove deliveries that waited with no progress", "count", sent, "after", a.cfg.RedriveAfter)
		}
	}
}

// watchWaiting keeps the age of the oldest waiting delivery per channel current, from the
// status view the projector maintains.
func (a *App) watchWaiting(ctx context.Context) error {
	ticker := time.NewTicker(queuePollInterval)
	defer ticker.Stop()
	for {
		ages, err := postgres.OldestWaiting(ctx, a.pool)
		if err != nil && ctx.Err() == nil {
			a.logger.Warn("read oldest waiting delivery", "err", err)
		}
		for _, channel := range a.topology.Channels {
			a.metrics.OldestWaiting(channel, ages[channel]) // zero when nothing waits
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// serveCommand runs `ledger serve`.
func serveCommand(ctx context.Context, cfg Config, stdout io.Writer) error {
	logger := cfg.logger()
	app, err := buildApp(ctx, cfg, logger)
	if err != nil {
		return err
	}
	if app.Addr() != "" {
		fmt.Fprintf(stdout, "ledger: API listening on http://%s\n", app.Addr())
	}
	return app.Run(ctx)
}

// redactURL hides a URL's password for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}

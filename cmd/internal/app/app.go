package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/mechanisms/breaker"
	"github.com/deliveryledger/ledger/adapters/mechanisms/fairshare"
	"github.com/deliveryledger/ledger/adapters/metrics"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
	"github.com/deliveryledger/ledger/retention"
	"github.com/deliveryledger/ledger/tracing"
)

// App is the wired ledger: the roles of one process over one database and one broker.
type App struct {
	cfg      Config
	pacer    *acceptPacer // nil: accepts are not paced
	logger   *slog.Logger
	roles    map[string]bool
	pool     *pgxpool.Pool
	store    *postgres.EventStore
	views    *postgres.Views
	channels *commands.Channels
	policies commands.Policies
	topology amqp.Topology
	metrics  *metrics.Metrics
	listener net.Listener
	server   *http.Server
	// metricsListener serves /metrics apart from the API, for every role; nil when off.
	metricsListener net.Listener
	probe           *amqp.Probe

	queued    *commands.QueuedRecorder // the relay's; made by Run
	relayPool *pgxpool.Pool            // the relay's connections, with asynchronous commit
	attempts  *commands.AttemptHandler
	scheduler *fairshare.Scheduler
	batcher   *postgres.AcceptBatcher
	appends   *postgres.AppendBatcher
	projector *projections.Runner
	opts      options

	// publicURL is where providers call back; providers describes every configured provider.
	publicURL  string
	providers  []provider
	breakers   *breaker.Registry
	reconciler *commands.Reconciler
	receipts   *commands.RecordReceiptHandler
	replayJobs *commands.ReplayJobs
	// categories are the file's; suppression the check of the suppression list and the
	// preferences, made by the accept and by every attempt's start.
	categories  commands.Categories
	suppression *commands.SuppressionCheck
	probes      *postgres.BlocksBatcher
	// retention is the file's retention block.
	retention retention.Config
}

// Option adjusts the wiring: tests replace a channel's provider with one that misbehaves, and the
// benchmark watches the relay.
type Option func(*options)

type options struct {
	senders       map[string]commands.Sender
	relayObserver func(lag time.Duration)
}

// WithRelayObserver is told the lag (outbox write → broker confirm) of every relayed message.
func WithRelayObserver(f func(time.Duration)) Option {
	return func(o *options) { o.relayObserver = f }
}

// WithSender makes s the one provider of channel.
func WithSender(channel string, s commands.Sender) Option {
	return func(o *options) {
		if o.senders == nil {
			o.senders = map[string]commands.Sender{}
		}
		o.senders[channel] = s
	}
}

// Build wires the application: every dependency is built here, by hand, in one place. It
// connects to the database and declares the broker's topology; Run starts the roles.
func Build(ctx context.Context, cfg Config, logger *slog.Logger, opts ...Option) (*App, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	a, err := plan(cfg, logger, o)
	if err != nil {
		return nil, err
	}
	a.pool, err = postgres.Connect(ctx, cfg.DatabaseURL, "", int32(cfg.DatabaseMaxConns))
	if err != nil {
		return nil, err
	}
	if err := a.build(ctx); err != nil {
		a.pool.Close()
		return nil, err
	}
	return a, nil
}

// TopologyOf is the broker topology a ledger with cfg declares, for a tool that removes the
// queues of a ledger it ran as a process of its own (the benchmark).
func TopologyOf(cfg Config) (amqp.Topology, error) {
	a, err := plan(cfg, slog.New(slog.DiscardHandler), options{})
	if err != nil {
		return amqp.Topology{}, err
	}
	return a.topology, nil
}

// plan is the part of Build that needs no connection: the roles, the channels and their
// providers, the retry policies and the broker topology.
func plan(cfg Config, logger *slog.Logger, o options) (*App, error) {
	roles, err := cfg.roles()
	if err != nil {
		return nil, err
	}
	a := &App{opts: o, cfg: cfg, logger: logger, roles: roles, metrics: metrics.New()}
	file, err := cfg.loadFile()
	if err != nil {
		return nil, err
	}
	var own map[string]domain.RetryPolicy
	if a.channels, own, err = a.registry(file); err != nil {
		return nil, err
	}
	a.categories = file.Categories
	a.retention = file.Retention
	policy := cfg.policy()
	a.policies = func(channel string) domain.RetryPolicy {
		if p, ok := own[channel]; ok {
			return p
		}
		return policy
	}
	a.topology = amqp.Topology{Prefix: cfg.AMQPPrefix, Channels: a.channels.Names(), Tiers: policy.Tiers(),
		ChannelTiers: map[string][]time.Duration{}, QueueType: cfg.AMQPQueueType, DeliveryLimit: cfg.AMQPDeliveryLim}
	for channel, p := range own {
		a.topology.ChannelTiers[channel] = p.Tiers()
	}
	return a, nil
}

// build wires the roles over an open pool.
func (a *App) build(ctx context.Context) error {
	cfg, logger := a.cfg, a.logger
	if err := postgres.CheckSchema(ctx, a.pool); err != nil {
		return err
	}
	if err := a.ensurePartitions(ctx); err != nil {
		return err
	}
	if err := a.recordOutboxShards(ctx); err != nil {
		return err
	}
	if err := amqp.DeclareTopology(cfg.AMQPURL, a.topology, logger); err != nil {
		if !a.roles["relay"] && !a.roles["worker"] {
			// The API and the projector only write to PostgreSQL: accepting while the broker is
			// down is exactly what the outbox is for. The relay declares the topology when it
			// starts.
			logger.Warn("broker unreachable; starting without it", "err", err)
		} else if err := amqp.DeclareWhenReachable(ctx, cfg.AMQPURL, a.topology, logger); err != nil {
			// The relay must not publish before the queues exist (the broker drops a message to
			// a missing queue), and workers have nothing to consume.
			return err
		}
	}
	a.store = postgres.NewEventStore(a.pool)
	// The idempotency window is the retention's keep (docs/api.md): an answer older is no answer.
	a.store.IdempotencyWindow = a.retention.KeepOf
	a.views = postgres.NewViews(a.pool)
	// Concurrent accepts' probes share statements, as their commits do.
	a.probes = postgres.NewBlocksBatcher(postgres.NewSuppressionStore(a.pool), 2)
	a.suppression = &commands.SuppressionCheck{Store: a.probes, Categories: a.categories,
		Loader: a.store, OnSuppressed: a.metrics.Suppressed}
	clock := commands.SystemClock{}
	policies := a.policies

	if a.roles["worker"] {
		limiter, err := cfg.limiter(a.channels)
		if err != nil {
			return err
		}
		shares, err := fairshare.ParseShares(cfg.PriorityShares)
		if err != nil {
			return fmt.Errorf("--priority-shares: %w", err)
		}
		a.scheduler, err = fairshare.New(fairshare.Config{Slots: cfg.WorkerConcurrency, Shares: shares})
		if err != nil {
			return err
		}
		if err := a.buildBreakers(); err != nil {
			return err
		}
		// Concurrent workers' records share transactions (group commit), like accepts.
		a.appends = postgres.NewAppendBatcher(a.store, 2, 64)
		a.attempts, err = commands.NewAttemptHandler(commands.AttemptConfig{
			Store: a.appends, Topics: a.topology, Clock: clock, Policies: policies, Channels: a.channels,
			Limiter: limiter, Breakers: a.breakers, Metrics: a.metrics, Suppression: a.suppression,
			Logger: logger.With("role", "worker"),
		})
		if err != nil {
			return err
		}
	}

	if a.roles["projector"] {
		var err error
		a.projector, err = projections.NewRunner(a.views, a.store, projections.All(), projections.RunnerConfig{
			BatchSize:    cfg.ProjectorBatchSize,
			PollInterval: cfg.ProjectorPollInterval,
			Gather:       cmp.Or(cfg.ProjectorGather, -1), // 0 on the command line: no wait
			Metrics:      a.metrics,
			Logger:       logger.With("role", "projector"),
			// An accept's commit notifies the relay; the projector wakes on it too, so a new
			// delivery shows in the lists at once rather than after a poll interval.
			Wake: func(ctx context.Context) <-chan struct{} {
				return postgres.NotifyWaker(ctx, a.pool, logger.With("role", "projector"))
			},
		})
		if err != nil {
			return err
		}
	}

	if a.roles["reconciler"] {
		if err := a.buildReconciler(clock, policies); err != nil {
			return err
		}
	}

	if cfg.MetricsAddr != MetricsOff {
		var err error
		if a.metricsListener, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("listen for /metrics on %s: %w", cfg.MetricsAddr, err)
		}
	}
	if a.roles["api"] {
		if err := a.buildAPI(clock, policies); err != nil {
			if a.metricsListener != nil {
				a.metricsListener.Close()
			}
			return err
		}
	}
	return nil
}

// MetricsOff is the --metrics-addr that serves no /metrics.
const MetricsOff = "off"

// buildAPI wires the HTTP API and opens its listener.
func (a *App) buildAPI(clock commands.Clock, policies commands.Policies) error {
	keys, err := httpapi.ParseAPIKeys(a.cfg.APIKeys)
	if err != nil {
		return fmt.Errorf("--api-keys: %w", err)
	}
	// Concurrent accepts share transactions (group commit); each caller is answered after the
	// commit that holds its rows.
	a.batcher = postgres.NewAcceptBatcher(a.store, postgres.DefaultAcceptCommitters, postgres.DefaultAcceptBatch)
	accept := commands.NewAcceptHandler(a.batcher, a.topology, clock, policies)
	accept.OnAccepted = a.metrics.Accepted
	accept.MaxFanOutBytes = a.cfg.MaxFanOutBytes
	accept.Suppression, accept.Normalize = a.suppression, a.channels.Normalize
	accept.PayloadsExpire = func(tenant string) bool { return a.retention.PayloadsOf(tenant) > 0 }
	replay := commands.NewReplayHandler(a.store, a.topology, clock)
	replay.OnDecided = a.metrics.Decided
	replay.Requests, replay.Suppression = a.store, a.suppression
	reconcile := commands.NewReconcileHandler(a.store, a.topology, clock, policies)
	reconcile.OnDecided = a.metrics.Decided
	a.replayJobs = commands.NewReplayJobs(a.store, replay, clock, a.logger.With("role", "api"))
	a.replayJobs.Lease, a.replayJobs.Page, a.replayJobs.Pause = a.cfg.ReplayJobLease, a.cfg.ReplayJobPage, a.cfg.ReplayJobPause
	api, err := httpapi.New(httpapi.Config{APIKeys: keys, Channels: a.channels.Checks(), Normalize: a.channels.Normalize,
		UnsubscribeSecret: a.unsubscribeSecret()}, httpapi.Deps{
		Accept:   accept,
		Events:   a.store,
		Requests: a.store,
		Views:    a.views,
		// An operator's decisions are rare: they go straight to the store, not through a
		// batcher.
		Replay:           replay,
		Reconcile:        reconcile,
		Cancel:           commands.NewCancelHandler(a.store, clock),
		Notifications:    a.store,
		OperatorRequests: a.store,
		ReplayJobs:       a.replayJobs,
		Receipts:         a.receiptIntake(clock, policies),
		Providers:        a.providerViews,
		Suppressions:     commands.NewSuppressions(a.suppression.Store, a.channels, a.categories, clock),
		Ready:            a.ready,
		PaceAccept:       a.paceAccept(),
	}, a.logger.With("role", "api"))
	if err != nil {
		a.batcher.Close()
		return err
	}
	a.listener, err = net.Listen("tcp", a.cfg.HTTPAddr)
	if err != nil {
		a.batcher.Close()
		return fmt.Errorf("listen on %s: %w", a.cfg.HTTPAddr, err)
	}
	a.probe = amqp.NewProbe(a.cfg.AMQPURL)
	a.server = &http.Server{
		Handler:           tracing.Handler(api),
		ReadHeaderTimeout: a.cfg.HTTPReadHeaderTimeout,
		ReadTimeout:       a.cfg.HTTPReadTimeout,
		WriteTimeout:      a.cfg.HTTPWriteTimeout,
		IdleTimeout:       a.cfg.HTTPIdleTimeout,
	}
	return nil
}

// ready checks that the database and the broker answer; the broker over one kept connection.
func (a *App) ready(ctx context.Context) error {
	var errs []error
	if err := a.pool.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("database: %w", err))
	}
	if err := a.probe.Check(ctx); err != nil {
		errs = append(errs, fmt.Errorf("broker: %w", err))
	}
	return errors.Join(errs...)
}

// Addr is the API's listening address (useful with port 0); empty without the api role.
func (a *App) Addr() string {
	if a.listener == nil {
		return ""
	}
	return a.listener.Addr().String()
}

// MetricsAddr is the address /metrics is served on; empty when it is off.
func (a *App) MetricsAddr() string {
	if a.metricsListener == nil {
		return ""
	}
	return a.metricsListener.Addr().String()
}

// Topology is the broker topology the app declared (the benchmark deletes it after a run).
func (a *App) Topology() amqp.Topology { return a.topology }

// Run runs the roles until ctx is cancelled, then shuts them down gracefully. A role that fails
// stops the others, so the process is restarted whole.
func (a *App) Run(ctx context.Context) error {
	defer a.pool.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	start := func(name string, fn func(context.Context) error) {
		wg.Go(func() {
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	if a.roles["relay"] {
		// The relay's own writes (outbox offsets, queued records) are safe to lose in a database
		// crash, so they commit without waiting for the disk (see postgres.AsyncCommit).
		relayPool, err := postgres.Connect(ctx, a.cfg.DatabaseURL, "", relayPoolSize, postgres.AsyncCommit())
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		defer relayPool.Close()
		a.relayPool = relayPool
		a.queued = commands.NewQueuedRecorder(postgres.NewEventStore(relayPool), commands.SystemClock{}, a.logger.With("role", "relay"))
		start("relay", a.runRelay)
		start("queued recorder", a.queued.Run)
		if a.cfg.RedriveAfter > 0 {
			// The redrive needs the status view, so it runs where a projector keeps one.
			redrive := commands.NewRedriveHandler(a.store, a.topology, commands.SystemClock{})
			start("redrive", commands.NewRedriver(redrive, a.views, a.cfg.RedriveAfter, a.logger.With("role", "relay")).Run)
		}
		// The due pass hands out what falls due from PostgreSQL (scheduled sends, overdue
		// retries and deferrals); every relay runs it, and they share it row by row.
		due := commands.NewDuePass(postgres.NewDueStore(a.pool), a.store, a.topology, commands.SystemClock{}, a.logger.With("role", "relay"))
		due.Grace = a.cfg.DueGrace
		start("due pass", due.Run)
		// Relayed outbox rows leave by whole partitions; every relay runs the rotation, one at a
		// time (they share the partition maintenance's lock).
		rotation := postgres.OutboxRotationInterval(a.partitionConfig())
		start("outbox rotation", after(rotation*5/8, func(ctx context.Context) error {
			return postgres.RotateOutboxEvery(ctx, a.pool, rotation, a.logger.With("role", "relay"))
		}))
	}
	if a.roles["api"] || a.roles["relay"] || a.roles["worker"] {
		start("partitions", a.keepPartitions)
		start("table statistics", after(statisticsInterval*3/8, func(ctx context.Context) error {
			return postgres.KeepStatistics(ctx, a.pool, statisticsInterval, a.logger)
		}))
	}
	if a.roles["api"] || a.roles["relay"] || a.roles["worker"] || a.projector != nil {
		start("vacuum", after(statisticsInterval/8, func(ctx context.Context) error {
			return postgres.KeepVacuumed(ctx, a.pool, statisticsInterval, a.logger)
		}))
	}
	if a.attempts != nil {
		if err := a.startWorkers(start); err != nil {
			return err
		}
		start("queue metrics", a.watchQueues)
	}
	if a.breakers != nil {
		start("provider health", a.reportHealth)
	}
	if a.reconciler != nil {
		start("reconciler", func(ctx context.Context) error { return a.reconciler.Run(ctx, a.cfg.ReconcileInterval) })
	}
	if a.projector != nil {
		// The retention pass runs where a projector does (the views it drops partitions of are
		// the projector's); a lock keeps several such processes' passes apart.
		pass, err := a.retentionPass()
		if err != nil {
			return err
		}
		if pass != nil {
			interval := a.retentionInterval()
			start("retention", after(interval/2, func(ctx context.Context) error { return pass.Run(ctx, interval) }))
		}
		start("projector", a.projector.Run)
		start("waiting metrics", a.watchWaiting)
	}
	if a.server != nil {
		start("api", func(ctx context.Context) error { return serve(ctx, a.server, a.listener, a.cfg.ShutdownTimeout) })
		// Every API process runs replay jobs; a lease keeps each job with one of them.
		start("replay jobs", func(ctx context.Context) error { return a.replayJobs.Run(ctx, replayJobPoll) })
		if a.pacer != nil {
			start("accept pacing", func(ctx context.Context) error {
				return a.pacer.watch(ctx, a.cfg.AMQPURL, a.topology.WorkQueues())
			})
		}
		defer a.probe.Close()
	}
	if a.metricsListener != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.metrics.Handler())
		metricsServer := &http.Server{Handler: mux, ReadHeaderTimeout: a.cfg.HTTPReadHeaderTimeout,
			ReadTimeout: a.cfg.HTTPReadTimeout, WriteTimeout: a.cfg.HTTPWriteTimeout, IdleTimeout: a.cfg.HTTPIdleTimeout}
		start("metrics", func(ctx context.Context) error {
			return serve(ctx, metricsServer, a.metricsListener, a.cfg.ShutdownTimeout)
		})
	}
	a.logger.Info("ledger running", "roles", a.cfg.Roles, "http", a.Addr(), "amqp_prefix", a.cfg.AMQPPrefix)
	wg.Wait()
	if a.batcher != nil {
		a.batcher.Close()
	}
	if a.probes != nil {
		a.probes.Close()
	}
	if a.appends != nil {
		a.appends.Close()
	}
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// startWorkers starts one consumer per channel and priority class, all drawing worker slots
// from one fair-share scheduler: high is served first, but each class keeps its reserved share.
func (a *App) startWorkers(start func(string, func(context.Context) error)) error {
	for _, channel := range a.channels.Names() {
		for _, p := range amqp.Priorities {
			class := fairshare.ClassOf(p)
			logger := a.logger.With("role", "worker", "channel", channel, "priority", p)
			consumer, err := amqp.NewConsumer(amqp.ConsumerConfig{
				URL:             a.cfg.AMQPURL,
				Queue:           a.topology.Work(channel, p),
				Concurrency:     a.cfg.WorkerConcurrency,
				ShutdownTimeout: a.cfg.ShutdownTimeout,
				Logger:          logger,
				Acquire: func(ctx context.Context) (func(), error) {
					return a.scheduler.Acquire(ctx, class)
				},
			}, amqp.Work(a.attempts.Handle, logger))
			if err != nil {
				return err
			}
			start("worker "+channel+" "+string(p), consumer.Run)
		}
	}
	return nil
}

// serve serves HTTP on l until ctx ends, then shuts the server down gracefully: it returns only
// when the requests in flight are answered (or grace is up). Serve itself returns as soon as the
// shutdown begins; returning then let the process close the database pool under requests still
// running, which answered 500 ("closed pool") to whatever was in flight at a stop.
func serve(ctx context.Context, server *http.Server, l net.Listener, grace time.Duration) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()
	if err := server.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-done
	return nil
}

// replayJobPoll is how often an idle API process looks for a replay job to run.
const replayJobPoll = 500 * time.Millisecond

// statisticsInterval is how often a writing process checks whether its tables need ANALYZE, and
// whether its updated tables need VACUUM.
const statisticsInterval = 5 * time.Second

// gaugeInterval is how often the queue depth and waiting age gauges are refreshed.
const gaugeInterval = 5 * time.Second

// watchQueues keeps the queue depth gauges current.
func (a *App) watchQueues(ctx context.Context) error {
	return everyFromNow(ctx, gaugeInterval, func() {
		depths, err := amqp.QueueDepths(a.cfg.AMQPURL, a.topology.Queues())
		if err != nil && ctx.Err() == nil {
			a.logger.Warn("read queue depths", "err", err)
		}
		for q, n := range depths {
			a.metrics.QueueDepth(q, n)
		}
	})
}

// watchWaiting keeps the age of the oldest waiting delivery per channel current, from the status
// view the projector maintains.
func (a *App) watchWaiting(ctx context.Context) error {
	return everyFromNow(ctx, gaugeInterval, func() {
		ages, err := a.views.OldestWaiting(ctx)
		if err != nil && ctx.Err() == nil {
			a.logger.Warn("read oldest waiting delivery", "err", err)
		}
		for _, channel := range a.channels.Names() {
			a.metrics.OldestWaiting(channel, ages[channel]) // zero when nothing waits
		}
	})
}

// after delays the start of a periodic task by phase. The maintenance loops of a process (the
// partitions', the table statistics', the outbox rotation, the retention pass) tick at multiples
// of each other's intervals from the same start: unshifted, their statements (ANALYZE of the
// current partitions, the catalog reads, a partition leaving) all ran in the same tenth of a
// second, and the accepts waiting beside them made that second's tail. Each is shifted by its
// own fraction of its interval.
func after(phase time.Duration, fn func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(phase):
		}
		return fn(ctx)
	}
}

// everyFromNow runs fn at once and then at every interval until ctx ends.
func everyFromNow(ctx context.Context, interval time.Duration, fn func()) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		fn()
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Serve runs `ledger serve`: it builds the app, says where the API listens, and runs it.
func Serve(ctx context.Context, cfg Config, stdout io.Writer) error {
	logger := cfg.Logger()
	traces, shutdown, err := tracing.Setup(ctx, attribute.String("ledger.roles", cfg.Roles))
	if err != nil {
		return err
	}
	defer func() {
		if err := shutdown(context.WithoutCancel(ctx)); err != nil {
			logger.Warn("flush traces", "err", err)
		}
	}()
	if traces.On {
		logger.Info("tracing on", "endpoint", traces.Endpoint, "protocol", traces.Protocol, "service", traces.Service)
	}
	app, err := Build(ctx, cfg, logger)
	if err != nil {
		return err
	}
	if app.Addr() != "" {
		fmt.Fprintf(stdout, "ledger: API listening on http://%s\n", app.Addr())
	}
	if app.MetricsAddr() != "" {
		fmt.Fprintf(stdout, "ledger: metrics on http://%s/metrics\n", app.MetricsAddr())
	}
	return app.Run(ctx)
}

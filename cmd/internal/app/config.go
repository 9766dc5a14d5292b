// Package app wires the ledger: it builds every dependency of the roles one process runs (the
// API, the relay, the workers, the projector) by hand, in one place, and supervises them while
// they run. The ledger command, its benchmark and the tests share it.
package app

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/mechanisms/limit"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/unsubscribe"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
	"github.com/deliveryledger/ledger/tracing"
)

// Defaults of the contract (docs/design.md, "Configuration").
const (
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/ledger?sslmode=disable"
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
	defaultAMQPPrefix  = "ledger"
	defaultHTTPAddr    = "127.0.0.1:8080"
	// Worker slots per channel. A slot is held for a whole attempt: the start's commit, the call
	// and the outcome's commit, so with a fast destination it waits mostly on the database, and
	// too few slots become the bottleneck; 128 (with the host cap at 64) lets one process keep
	// up with hand-tuned settings (docs/benchmarks.md, "Defaults that serve"). A slow
	// destination cannot take them all: the per-host cap bounds its share at half.
	defaultWorkerConcurrency = 128
	defaultAcceptPaceMaxWait = time.Second
	defaultWebhookTimeout    = 10 * time.Second
	defaultShutdownTimeout   = 30 * time.Second
	defaultRoles             = "api,relay,worker,projector,reconciler"
	defaultReconcileInterval = 30 * time.Second
	// defaultReconcileUnknownAfter gives a provider that may have taken a message while our call
	// timed out a minute to list it before the reconciler asks (a lookup that finds nothing
	// retries the delivery).
	defaultReconcileUnknownAfter = time.Minute
	defaultPriorityShares        = "high=60,normal=30,low=10"
	defaultDatabaseMaxConns      = 32
	defaultRedriveAfter          = 10 * time.Minute
	defaultMetricsAddr           = "127.0.0.1:9464"
	// HTTP server timeouts. A request's headers must arrive within 10 s and the whole request
	// within 30 s (a 1 MiB body at 35 KB/s), so a client trickling a body a byte a second holds a
	// connection and a goroutine for 30 s, not for ever; the answer must be written within 30 s
	// of the headers (a DLQ page of 500 replays takes a few seconds); an idle keep-alive
	// connection is closed after 2 minutes.
	defaultHTTPReadHeaderTimeout = 10 * time.Second
	defaultHTTPReadTimeout       = 30 * time.Second
	defaultHTTPWriteTimeout      = 30 * time.Second
	defaultHTTPIdleTimeout       = 2 * time.Minute
)

// allRoles are the roles `serve` can run.
var allRoles = []string{"api", "relay", "worker", "projector", "reconciler"}

// Config is every setting of the ledger. Each field is a flag and an environment variable of the
// same name (--database-url / LEDGER_DATABASE_URL).
type Config struct {
	// ConfigFile names the YAML file of channels and providers (see File); empty serves the
	// webhook channel alone.
	ConfigFile       string
	WebhookSecrets   string
	DatabaseURL      string
	DatabaseMaxConns int
	AMQPURL          string
	AMQPPrefix       string
	AMQPQueueType    string
	AMQPDeliveryLim  int
	HTTPAddr         string
	MetricsAddr      string
	APIKeys          string
	// Timeouts of the HTTP server.
	HTTPReadHeaderTimeout time.Duration
	HTTPReadTimeout       time.Duration
	HTTPWriteTimeout      time.Duration
	HTTPIdleTimeout       time.Duration
	MaxFanOutBytes        int
	WebhookAllowCIDRs     string
	WebhookTimeout        time.Duration
	WorkerConcurrency     int
	RetryBase             time.Duration
	RetryCap              time.Duration
	MaxAttempts           int
	RetryAfterMax         time.Duration
	RedriveAfter          time.Duration
	// DueGrace is how long a retry or deferral may be overdue before the due pass sends its
	// work again (the delay tier's copy is presumed lost).
	DueGrace        time.Duration
	ShutdownTimeout time.Duration
	LogLevel        string
	Roles           string
	PriorityShares  string
	// Backpressure at the worker–provider boundary.
	ProviderConcurrency int
	HostConcurrency     int
	HostRate            float64
	HostRules           string
	SlotWait            time.Duration
	// The projector role.
	ProjectorBatchSize    int
	ProjectorPollInterval time.Duration
	ProjectorGather       time.Duration
	// RelayGather is the relay's wait between a notification and its poll.
	RelayGather time.Duration
	// AcceptPaceBacklog, when above 0, is how many messages may wait in the work queues before
	// an accept waits (up to AcceptPaceMaxWait) ahead of its commit.
	AcceptPaceBacklog int
	AcceptPaceMaxWait time.Duration
	// OutboxShards, when above 0, is recorded at start as the database's outbox shard count
	// (every writer and relay follows the database's); 0 leaves the count as recorded (1 on a
	// fresh database).
	OutboxShards int
	// The reconciler role: how often it looks for receipts overdue and unknowns to ask about.
	ReconcileInterval time.Duration
	// ReconcileUnknownAfter is how long after an unknown outcome the reconciler first asks.
	ReconcileUnknownAfter time.Duration
	// Replay jobs (the api role): how long a job whose runner stopped waits before another
	// resumes it, and how many deliveries a runner replays between two records of progress.
	ReplayJobLease time.Duration
	ReplayJobPage  int
	// ReplayJobPause is the wait between two pages of a replay job (0: none).
	ReplayJobPause time.Duration

	// UnsubscribeSecret signs the one-click unsubscribe links of email (at least 32 bytes);
	// empty: messages carry no List-Unsubscribe and the /u/ routes do not exist.
	UnsubscribeSecret string

	// explicit names the flags set on the command line or in the environment, which win over
	// the configuration file.
	explicit map[string]bool
}

// Explicit records which of fs's flags were set (by a flag or its environment variable), so that
// they override the configuration file's settings while defaults do not.
func (c *Config) Explicit(fs *flag.FlagSet) {
	c.explicit = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.explicit[f.Name] = true })
}

// Default values of settings other commands share.
const (
	DefaultDatabaseURL = defaultDatabaseURL
	DefaultAMQPURL     = defaultAMQPURL
)

// DefaultConfig returns a serve configuration with every default applied.
func DefaultConfig() Config {
	var c Config
	fs := flag.NewFlagSet("defaults", flag.ContinueOnError)
	c.ServeFlags(fs)
	_ = fs.Parse(nil)
	return c
}

// ConnectionFlags registers the settings every command needs.
func (c *Config) ConnectionFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DatabaseURL, "database-url", defaultDatabaseURL, "PostgreSQL URL (a search_path parameter selects a schema)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
}

// ServeFlags registers the settings of `serve`.
func (c *Config) ServeFlags(fs *flag.FlagSet) {
	c.ConnectionFlags(fs)
	fs.StringVar(&c.ConfigFile, "config", "", "YAML file of channels, their providers in order, per-channel retry and provider settings (empty: the webhook channel alone)")
	fs.StringVar(&c.WebhookSecrets, "webhook-secrets", "", "tenant:whsec_... pairs signing each tenant's webhooks (Standard Webhooks); a tenant twice has two secrets (rotation)")
	fs.StringVar(&c.UnsubscribeSecret, "unsubscribe-secret", "", fmt.Sprintf("key (at least %d bytes) signing the one-click unsubscribe links of email messages of a category that is not required (empty: no List-Unsubscribe header)", unsubscribe.MinSecretLen))
	fs.StringVar(&c.AMQPURL, "amqp-url", defaultAMQPURL, "RabbitMQ URL; a cluster's nodes as several URLs separated by commas (the ledger connects to the first that answers and moves to another when it goes away)")
	fs.IntVar(&c.DatabaseMaxConns, "database-max-conns", defaultDatabaseMaxConns, "size of the database connection pool")
	fs.StringVar(&c.AMQPPrefix, "amqp-prefix", defaultAMQPPrefix, "prefix of every exchange and queue name")
	fs.StringVar(&c.AMQPQueueType, "amqp-queue-type", amqp.QueueClassic, "type of every queue: classic, or quorum (replicated on a cluster; an existing queue cannot change type: use a new --amqp-prefix)")
	fs.IntVar(&c.AMQPDeliveryLim, "amqp-delivery-limit", amqp.DefaultDeliveryLimit, "quorum work queues: deliveries of one message before it is dead-lettered (a message that crashes every consumer)")
	fs.StringVar(&c.HTTPAddr, "http-addr", defaultHTTPAddr, "address the HTTP API listens on")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", defaultMetricsAddr, "address /metrics (Prometheus) is served on, by every role, apart from the API (off: not served)")
	fs.DurationVar(&c.HTTPReadHeaderTimeout, "http-read-header-timeout", defaultHTTPReadHeaderTimeout, "longest wait for a request's headers")
	fs.DurationVar(&c.HTTPReadTimeout, "http-read-timeout", defaultHTTPReadTimeout, "longest time to read a whole request, body included")
	fs.DurationVar(&c.HTTPWriteTimeout, "http-write-timeout", defaultHTTPWriteTimeout, "longest time from a request's headers to the end of its answer")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", defaultHTTPIdleTimeout, "how long an idle keep-alive connection stays open")
	fs.IntVar(&c.MaxFanOutBytes, "max-fan-out-bytes", commands.DefaultMaxFanOutBytes, "most bytes one accept may fan out: the payload's size times its recipients")
	fs.StringVar(&c.APIKeys, "api-keys", "", "comma-separated tenant:key pairs; requests need the header Authorization: Bearer KEY")
	fs.StringVar(&c.WebhookAllowCIDRs, "webhook-allow-cidrs", "", "CIDRs the webhook SSRF guard lets through (empty: public addresses only)")
	fs.DurationVar(&c.WebhookTimeout, "webhook-timeout", defaultWebhookTimeout, "timeout of one webhook call")
	fs.IntVar(&c.WorkerConcurrency, "worker-concurrency", defaultWorkerConcurrency, "messages in flight per channel worker")
	fs.DurationVar(&c.RetryBase, "retry-base", domain.DefaultRetryBase, "ceiling of the first retry delay (doubles per attempt; at least 1ms)")
	fs.DurationVar(&c.RetryCap, "retry-cap", domain.DefaultRetryCap, "largest retry delay (at most 2^32-1 ms, RabbitMQ's longest queue TTL)")
	fs.IntVar(&c.MaxAttempts, "max-attempts", domain.DefaultMaxAttempts, "attempts per delivery (default and maximum of a request's max_attempts; at most 100)")
	fs.DurationVar(&c.RetryAfterMax, "retry-after-max", domain.DefaultRetryAfterMax, "longest provider Retry-After honoured")
	fs.DurationVar(&c.RedriveAfter, "redrive-after", defaultRedriveAfter, "resend the work message of a delivery that has waited this long past its due time with no progress (0: never)")
	fs.DurationVar(&c.DueGrace, "due-grace", commands.DefaultDueGrace, "how long past its due time a retry or deferral waits for its delayed message before the due pass sends the work again")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long in-flight attempts may finish after SIGTERM")
	fs.StringVar(&c.Roles, "roles", defaultRoles, "comma-separated roles to run: "+strings.Join(allRoles, ", "))
	fs.StringVar(&c.PriorityShares, "priority-shares", defaultPriorityShares, "reserved share (percent) of worker slots per priority class; unused share is lent")
	def := limit.DefaultConfig()
	fs.IntVar(&c.ProviderConcurrency, "provider-concurrency", ProviderDefault, "calls in flight per provider per process (-1: each provider's own default; 0: unlimited)")
	fs.IntVar(&c.HostConcurrency, "host-concurrency", def.DefaultHost.Concurrency, "calls in flight per destination host (0: unlimited)")
	fs.Float64Var(&c.HostRate, "host-rate", def.DefaultHost.Rate, "calls per second per destination host (0: unlimited)")
	fs.StringVar(&c.HostRules, "host-rules", "", "per-host overrides: host=concurrency[:rate[:burst]],...")
	fs.DurationVar(&c.SlotWait, "slot-wait", def.SlotWait, "how long an attempt waits for a slot of a full provider or host concurrency cap before it is deferred (0: deferred at once)")
	fs.IntVar(&c.ProjectorBatchSize, "projector-batch-size", projections.DefaultBatchSize, "events the projector applies per transaction")
	fs.DurationVar(&c.ProjectorPollInterval, "projector-poll-interval", projections.DefaultPollInterval, "longest wait of an idle projector before it reads the log again")
	fs.DurationVar(&c.RelayGather, "relay-gather", postgres.DefaultRelayGather, "how long the relay waits after an append's notification before it reads the outbox, so that close appends travel in one batch (0: at once)")
	fs.IntVar(&c.AcceptPaceBacklog, "accept-pace-backlog", 0, "messages waiting in the work queues (ready, not yet taken by a worker) above which an accept waits before it commits, longer the further above, so that callers who wait for their 202 slow towards the delivery rate instead of growing the queue; read from the broker every 250 ms (0: never)")
	fs.DurationVar(&c.AcceptPaceMaxWait, "accept-pace-max-wait", defaultAcceptPaceMaxWait, "the longest an accept waits for --accept-pace-backlog, reached at twice the backlog; then it commits")
	fs.IntVar(&c.OutboxShards, "outbox-shards", 0, fmt.Sprintf("shards of the outbox, each moved by a relay of its own (a delivery's messages share one): recorded in the database at start, and followed by every process (0: the database's count, 1 on a fresh database; at most %d)", postgres.MaxOutboxShards))
	fs.DurationVar(&c.ProjectorGather, "projector-gather", projections.DefaultGather, "shortest time between two reads of the log by a projector that has caught up, so that a busy log's events are applied together (0: read at every append)")
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", defaultReconcileInterval, "how often the reconciler asks providers about receipts overdue and unknown outcomes")
	fs.DurationVar(&c.ReconcileUnknownAfter, "reconcile-unknown-after", defaultReconcileUnknownAfter, "how long after an unknown outcome the reconciler first asks its provider (one that took the message while the call timed out may not list it at once, and a lookup that finds nothing retries the delivery)")
	fs.DurationVar(&c.ReplayJobLease, "replay-job-lease", commands.DefaultReplayJobLease, "how long a replay job whose process died waits before another api process (or this one restarted) resumes it; longer than a page of replays takes")
	fs.IntVar(&c.ReplayJobPage, "replay-job-page", commands.DefaultReplayJobPage, "deliveries a replay job replays between two records of its progress")
	fs.DurationVar(&c.ReplayJobPause, "replay-job-pause", 0, "wait between two pages of a replay job, to spread a large replay over time instead of handing it to the workers and providers at once (0: none; shorter than --replay-job-lease)")
}

// Validate reports every problem of a serve configuration at once.
func (c *Config) Validate() error {
	var errs []error
	if c.AMQPPrefix == "" {
		errs = append(errs, errors.New("--amqp-prefix is empty"))
	}
	if n := len(c.UnsubscribeSecret); n > 0 && n < unsubscribe.MinSecretLen {
		// Never the value: it is a secret, however short.
		errs = append(errs, fmt.Errorf("--unsubscribe-secret (LEDGER_UNSUBSCRIBE_SECRET) is %d bytes: at least %d, or unset", n, unsubscribe.MinSecretLen))
	}
	if err := amqp.ValidateURLs(c.AMQPURL); err != nil {
		errs = append(errs, fmt.Errorf("--amqp-url: %w", err))
	}
	if c.AMQPQueueType != amqp.QueueClassic && c.AMQPQueueType != amqp.QueueQuorum {
		errs = append(errs, fmt.Errorf("--amqp-queue-type %q: want classic or quorum", c.AMQPQueueType))
	}
	if c.AMQPDeliveryLim < 1 {
		errs = append(errs, fmt.Errorf("--amqp-delivery-limit %d is below 1", c.AMQPDeliveryLim))
	}
	if c.WorkerConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--worker-concurrency %d is below 1", c.WorkerConcurrency))
	}
	errs = append(errs, c.validateRetry()...)
	if c.WebhookTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--webhook-timeout %s is not positive", c.WebhookTimeout))
	}
	if c.ProjectorBatchSize < 1 {
		errs = append(errs, fmt.Errorf("--projector-batch-size %d is below 1", c.ProjectorBatchSize))
	}
	if c.ReconcileUnknownAfter < 0 {
		errs = append(errs, fmt.Errorf("--reconcile-unknown-after %s is negative", c.ReconcileUnknownAfter))
	}
	if c.ReconcileInterval <= 0 {
		errs = append(errs, fmt.Errorf("--reconcile-interval %s is not positive", c.ReconcileInterval))
	}
	if c.ReplayJobLease <= 0 {
		errs = append(errs, fmt.Errorf("--replay-job-lease %s is not positive", c.ReplayJobLease))
	}
	if c.ReplayJobPause < 0 || c.ReplayJobPause >= c.ReplayJobLease {
		errs = append(errs, fmt.Errorf("--replay-job-pause %s: want 0 or more and shorter than --replay-job-lease %s", c.ReplayJobPause, c.ReplayJobLease))
	}
	if c.ReplayJobPage < 1 {
		errs = append(errs, fmt.Errorf("--replay-job-page %d is below 1", c.ReplayJobPage))
	}
	if c.AcceptPaceBacklog < 0 {
		errs = append(errs, fmt.Errorf("--accept-pace-backlog %d is negative", c.AcceptPaceBacklog))
	}
	if c.AcceptPaceMaxWait < 0 {
		errs = append(errs, fmt.Errorf("--accept-pace-max-wait %s is negative", c.AcceptPaceMaxWait))
	}
	if c.OutboxShards < 0 || c.OutboxShards > postgres.MaxOutboxShards {
		errs = append(errs, fmt.Errorf("--outbox-shards %d: want 1 to %d (0: the database's count)", c.OutboxShards, postgres.MaxOutboxShards))
	}
	if c.RelayGather < 0 {
		errs = append(errs, fmt.Errorf("--relay-gather %s is negative", c.RelayGather))
	}
	if c.ProjectorGather < 0 {
		errs = append(errs, fmt.Errorf("--projector-gather %s is negative", c.ProjectorGather))
	}
	if c.ProjectorPollInterval <= 0 {
		errs = append(errs, fmt.Errorf("--projector-poll-interval %s is not positive", c.ProjectorPollInterval))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--http-read-header-timeout", c.HTTPReadHeaderTimeout}, {"--http-read-timeout", c.HTTPReadTimeout},
		{"--http-write-timeout", c.HTTPWriteTimeout}, {"--http-idle-timeout", c.HTTPIdleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s is not positive", d.flag, d.v))
		}
	}
	if c.MaxFanOutBytes < 1 {
		errs = append(errs, fmt.Errorf("--max-fan-out-bytes %d is below 1", c.MaxFanOutBytes))
	}
	if c.MetricsAddr == "" {
		errs = append(errs, errors.New("--metrics-addr is empty (off turns /metrics off)"))
	}
	if math.IsNaN(c.HostRate) || math.IsInf(c.HostRate, 0) || c.HostRate < 0 {
		errs = append(errs, fmt.Errorf("--host-rate %v: want a finite number of calls a second, 0 or more", c.HostRate))
	}
	if c.ProviderConcurrency < ProviderDefault {
		errs = append(errs, fmt.Errorf("--provider-concurrency %d: want -1 (the provider's default), 0 (unlimited) or a cap", c.ProviderConcurrency))
	}
	if _, err := c.roles(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateRetry checks the server's retry policy by its flags: the bounds of every policy
// (domain.RetryPolicy.Validate), which the delay queues and the attempts' count need.
func (c *Config) validateRetry() []error {
	var errs []error
	switch {
	case c.RetryBase <= 0 || c.RetryCap < c.RetryBase:
		errs = append(errs, fmt.Errorf("--retry-base %s and --retry-cap %s: need 0 < base <= cap", c.RetryBase, c.RetryCap))
	case c.RetryBase < domain.MinRetryDelay:
		errs = append(errs, fmt.Errorf("--retry-base %s is below %s: delay queues count whole milliseconds", c.RetryBase, domain.MinRetryDelay))
	case c.RetryCap > domain.MaxRetryDelay:
		errs = append(errs, fmt.Errorf("--retry-cap %s is beyond %s, the longest TTL RabbitMQ documents for a delay queue (2^32-1 ms)", c.RetryCap, domain.MaxRetryDelay))
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > domain.MaxAttemptsLimit {
		errs = append(errs, fmt.Errorf("--max-attempts %d: want 1 to %d", c.MaxAttempts, domain.MaxAttemptsLimit))
	}
	if c.RetryAfterMax < 0 {
		errs = append(errs, fmt.Errorf("--retry-after-max %s is negative", c.RetryAfterMax))
	}
	if len(errs) > 0 {
		return errs
	}
	// What no one flag shows: too many distinct delays (base and cap far apart).
	if err := c.policy().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--retry-base %s, --retry-cap %s: %w", c.RetryBase, c.RetryCap, err))
	}
	return errs
}

// roles parses --roles.
func (c *Config) roles() (map[string]bool, error) {
	roles := map[string]bool{}
	for _, r := range strings.Split(c.Roles, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		known := false
		for _, k := range allRoles {
			known = known || k == r
		}
		if !known {
			return nil, fmt.Errorf("--roles: unknown role %q (known: %s)", r, strings.Join(allRoles, ", "))
		}
		roles[r] = true
	}
	if len(roles) == 0 {
		return nil, errors.New("--roles: no role given")
	}
	return roles, nil
}

// ProviderDefault is --provider-concurrency's default: each provider keeps the limit its channel
// gives it (commands.Channel.ProviderLimit).
const ProviderDefault = -1

// limiter builds the backpressure limits of the worker role: each channel's providers with
// their channel's default limit (or --provider-concurrency), and the per-host rules.
func (c *Config) limiter(channels *commands.Channels) (*limit.Limiter, error) {
	cfg := limit.DefaultConfig()
	for _, name := range channels.Names() {
		ch, _ := channels.Lookup(name)
		rule := limit.Rule(ch.ProviderLimit)
		if c.ProviderConcurrency != ProviderDefault {
			rule.Concurrency = c.ProviderConcurrency
		}
		dest := limit.Rule(ch.DestinationLimit)
		for _, p := range ch.Providers {
			cfg.Providers[p.Provider()] = rule
			if dest != (limit.Rule{}) {
				cfg.Destinations[p.Provider()] = dest
			}
		}
	}
	cfg.DefaultHost.Concurrency = c.HostConcurrency
	cfg.SlotWait = c.SlotWait
	cfg.DefaultHost.Rate = c.HostRate
	if c.HostRate > 0 && cfg.DefaultHost.Burst == 0 {
		cfg.DefaultHost.Burst = int(c.HostRate) + 1
	}
	hosts, err := limit.ParseHostRules(c.HostRules)
	if err != nil {
		return nil, fmt.Errorf("--host-rules: %w", err)
	}
	cfg.Hosts = hosts
	return limit.New(cfg, time.Now)
}

// policy is the server's retry policy.
func (c *Config) policy() domain.RetryPolicy {
	return domain.RetryPolicy{Strategy: domain.Exponential{Base: c.RetryBase, Cap: c.RetryCap}, MaxAttempts: c.MaxAttempts, RetryAfterMax: c.RetryAfterMax}
}

// Logger builds the process logger.
func (c *Config) Logger() *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(tracing.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}

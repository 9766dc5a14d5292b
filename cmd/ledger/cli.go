package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/cmd/internal/app"
	"github.com/deliveryledger/ledger/cmd/internal/bench"
)

// envPrefix maps a flag --database-url to the variable LEDGER_DATABASE_URL.
const envPrefix = "LEDGER"

// run parses the command line and runs a command; it returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg app.Config

	serveFS := flag.NewFlagSet("ledger serve", flag.ContinueOnError)
	cfg.ServeFlags(serveFS)
	serve := &ffcli.Command{
		Name:       "serve",
		ShortUsage: "ledger serve [flags]",
		ShortHelp:  "run the chosen roles (api, relay, worker, projector) in one process",
		LongHelp: "Runs the HTTP API, the outbox relay, the workers and the projector (by default all of them).\n" +
			"Refuses to start when the database schema is behind: run `ledger migrate` first.\n" +
			"Every flag can also be set by an environment variable: --http-addr is LEDGER_HTTP_ADDR.\n" +
			"Traces: set OTEL_EXPORTER_OTLP_ENDPOINT (and, if needed, OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf\n" +
			"or grpc, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES) to export OpenTelemetry\n" +
			"traces over OTLP; without an endpoint tracing is off. See docs/observability.md.",
		FlagSet: serveFS,
		Options: []ff.Option{ff.WithEnvVarPrefix(envPrefix)},
		Exec: func(ctx context.Context, _ []string) error {
			cfg.Explicit(serveFS)
			if err := cfg.Validate(); err != nil {
				return err
			}
			return app.Serve(ctx, cfg, stdout)
		},
	}

	migrateFS := flag.NewFlagSet("ledger migrate", flag.ContinueOnError)
	cfg.ConnectionFlags(migrateFS)
	target := migrateFS.String("to", "latest", "schema version to move to, up or down (a number, or latest)")
	migrateFS.StringVar(&cfg.ConfigFile, "config", "", "the configuration file `serve` will read: at the latest version, the partitions ahead are created of its retention.partition width (empty: the first process to start creates them)")
	migrate := &ffcli.Command{
		Name:       "migrate",
		ShortUsage: "ledger migrate [flags]",
		ShortHelp:  "apply the embedded schema migrations (idempotent)",
		LongHelp: "Moves the schema to --to (default: the latest version) and prints each step. With --config,\n" +
			"a schema at the latest version gets the time partitions ahead, of the file's retention.partition width.",
		FlagSet: migrateFS,
		Options: []ff.Option{ff.WithEnvVarPrefix(envPrefix)},
		Exec: func(ctx context.Context, _ []string) error {
			to := -1
			if *target != "latest" {
				v, err := strconv.Atoi(*target)
				if err != nil || v < 0 {
					return fmt.Errorf("--to %q: want a version number or latest", *target)
				}
				to = v
			}
			return migrateCommand(ctx, cfg, to, stdout)
		},
	}

	sinkFS := flag.NewFlagSet("ledger sink", flag.ContinueOnError)
	var so sinkOptions
	sinkFS.StringVar(&so.webhookAddr, "addr", "127.0.0.1:8081", "address of the webhook receiver (port 0: any free port)")
	sinkFS.IntVar(&so.webhookStatus, "webhook-status", http.StatusOK, "HTTP status the webhook receiver answers (503 to see retries, 410 to see a delivery die)")
	sinkFS.StringVar(&so.smtpAddr, "smtp-addr", "127.0.0.1:2525", "loopback address of the SMTP server (off or empty: none)")
	sinkFS.StringVar(&so.smtpBehaviour, "smtp-behaviour", "", "SMTP failures to answer, e.g. fail=rcpt:451,times=1 or drop-after-data (see adapters/providers/email/smtpfake)")
	sinkFS.StringVar(&so.telegramAddr, "telegram-addr", "127.0.0.1:8082", "loopback address of the Telegram Bot API (off or empty: none)")
	sinkFS.StringVar(&so.telegramToken, "telegram-token", "123456:dev-bot-token", "the one bot token the Telegram fake accepts")
	sinkFS.StringVar(&so.telegramBehaviour, "telegram-behaviour", "", "Telegram failures to answer, e.g. 429=2:3; chat-not-found=-100123 (see adapters/providers/telegram/telegramfake)")
	sinkFS.StringVar(&so.twilioAddr, "twilio-addr", "127.0.0.1:8083", "loopback address of the Twilio Messages API, the twilio provider's base_url (off or empty: none)")
	sinkFS.StringVar(&so.twilioAccountSID, "twilio-account-sid", defaultTwilioAccountSID, "the one account SID the Twilio fake accepts (basic auth user and the path's account; the provider's account_sid)")
	sinkFS.StringVar(&so.twilioAuthToken, "twilio-auth-token", defaultTwilioAuthToken, "the auth token the Twilio fake accepts (basic auth password) and signs status callbacks with (X-Twilio-Signature); the ledger's auth_token_env holds the same")
	sinkFS.StringVar(&so.twilioBehaviour, "twilio-behaviour", "", "Twilio failures to answer and callback timing, e.g. error=21211@+15005550001; error=20429*2; undelivered=30003@+15005550006; callback-delay=2s (see adapters/providers/twilio/twiliofake)")
	sinkFS.StringVar(&so.vonageAddr, "vonage-addr", "127.0.0.1:8084", "loopback address of the Vonage SMS API, the vonage provider's base_url (off or empty: none)")
	sinkFS.StringVar(&so.vonageAPIKey, "vonage-api-key", defaultVonageAPIKey, "the one API key the Vonage fake accepts (the provider's api_key)")
	sinkFS.StringVar(&so.vonageAPISecret, "vonage-api-secret", defaultVonageAPISecret, "the API secret the Vonage fake accepts with the key; the ledger's api_secret_env holds the same")
	sinkFS.StringVar(&so.vonageBehaviour, "vonage-behaviour", "", "Vonage failures to answer and receipt timing, e.g. status=1:2; dlr=15005550006:failed:3; dlr-delay=2s (see adapters/providers/vonage/vonagefake)")
	sink := &ffcli.Command{
		Name:       "sink",
		ShortUsage: "ledger sink [flags]",
		ShortHelp:  "run local fakes of the providers' protocols (webhook, SMTP, Telegram, Twilio, Vonage) that print what they receive",
		LongHelp: "Runs, on loopback, a webhook receiver, an SMTP server, a Telegram Bot API, a Twilio Messages\n" +
			"API and a Vonage SMS API that speak the real protocols and print every message they receive:\n" +
			"the destinations of a first notification on a machine without outside network (make run\n" +
			"starts it). The SMS fakes post status callbacks and delivery receipts to the callback URL of\n" +
			"each message. Switches make each fail on purpose. Each fake prints the address it listens on\n" +
			"(port 0 picks a free one).",
		FlagSet: sinkFS,
		Exec: func(ctx context.Context, _ []string) error {
			if so.webhookStatus < 200 || so.webhookStatus > 599 {
				return fmt.Errorf("--webhook-status %d: want an HTTP status from 200 to 599", so.webhookStatus)
			}
			return sinkCommand(ctx, so, stdout)
		},
	}

	benchFS := flag.NewFlagSet("ledger bench", flag.ContinueOnError)
	benchCfg := app.DefaultConfig()
	benchFS.StringVar(&benchCfg.DatabaseURL, "database-url", app.DefaultDatabaseURL, "PostgreSQL URL (the benchmark works in its own schemas and drops them)")
	benchFS.StringVar(&benchCfg.AMQPURL, "amqp-url", app.DefaultAMQPURL, "RabbitMQ URL (the benchmark uses its own queue prefix and deletes it)")
	benchFS.StringVar(&benchCfg.AMQPQueueType, "amqp-queue-type", "classic", "queue type of the benchmarked ledger: classic or quorum (the RabbitMQ baseline stays classic)")
	benchFS.IntVar(&benchCfg.WorkerConcurrency, "worker-concurrency", 128, "the benchmarked ledger's messages in flight per channel in the in-process phases (the product default is 128 too); the sink is fast, so slots wait mostly on commits")
	var bopts bench.Options
	benchFS.BoolVar(&bopts.Quick, "quick", false, "short phases (about two minutes in all)")
	benchFS.DurationVar(&bopts.Phase, "phase", 10*time.Second, "duration of each throughput measurement")
	benchFS.IntVar(&bopts.Rate, "rate", 200, "deliveries per second of the fixed-rate latency run")
	benchFS.DurationVar(&bopts.RateFor, "rate-for", 20*time.Second, "duration of the fixed-rate latency run")
	benchFS.IntVar(&bopts.AuditEvents, "audit-events", 1_000_000, "events in the log for the audit query measurement")
	benchFS.IntVar(&bopts.SchedulePending, "schedule-pending", 0, fmt.Sprintf("deliveries the schedule phase holds scheduled far ahead (0: %d, or %d with --quick)", bench.DefaultSchedulePending, 20_000))
	benchFS.IntVar(&bopts.ScheduleRate, "schedule-rate", 0, fmt.Sprintf("deliveries a second the schedule phase has fall due through that schedule (0: %d, or 500 with --quick)", bench.DefaultScheduleRate))
	benchFS.DurationVar(&bopts.ScheduleLead, "schedule-lead", 0, "how far ahead of its send_at each delivery falling due is accepted, while the stream falls due (0: the whole stream is scheduled before it starts, the accepts done; 2s was the method before 2026-12-02)")
	benchFS.DurationVar(&bopts.ScheduleFor, "schedule-for", 0, fmt.Sprintf("how long the schedule phase's deliveries fall due (0: %s, or 5s with --quick)", bench.DefaultScheduleFor))
	benchFS.IntVar(&bopts.SuppressEntries, "suppress-entries", 0, fmt.Sprintf("suppressions the suppress phase fills for the benchmark's tenant, in SQL (0: %d, or %d with --quick)", bench.DefaultSuppressEntries, 20_000))
	benchFS.DurationVar(&bopts.RetentionKeep, "retention-keep", 0, fmt.Sprintf("the retention phase's keep: how long a terminal history stays hot; also its sampling period (0: %s, or 6s with --quick)", bench.DefaultRetentionKeep))
	benchFS.DurationVar(&bopts.RetentionPartition, "retention-partition", 0, fmt.Sprintf("the retention phase's partition width (0: %s, or 2s with --quick)", bench.DefaultRetentionPartition))
	benchFS.IntVar(&bopts.RetentionPeriods, "retention-periods", 0, fmt.Sprintf("how many keeps the retention phase sends for (0: %d, or 4 with --quick)", bench.DefaultRetentionPeriods))
	benchFS.IntVar(&bopts.RetentionRate, "retention-rate", 0, fmt.Sprintf("deliveries per second of the retention phase, open loop (0: %d)", bench.DefaultRetentionRate))
	benchFS.IntVar(&bopts.AuditReads, "audit-reads", 5000, "audit queries to time")
	benchFS.Func("ledger-env", "a `LEDGER_NAME=value` setting for every ledger process the clients and roles phases start, beside their own (repeatable; to measure a setting)", func(v string) error {
		if name, _, ok := strings.Cut(v, "="); !ok || !strings.HasPrefix(name, "LEDGER_") {
			return fmt.Errorf("want LEDGER_NAME=value, got %q", v)
		}
		bopts.LedgerEnv = append(bopts.LedgerEnv, v)
		return nil
	})
	benchFS.IntVar(&bopts.RolesBacklog, "roles-backlog", 0, "deliveries the roles phase holds in the outbox for each timing of the relay alone (0: 5000, or 2000 with --quick)")
	benchFS.IntVar(&bopts.ClientDeliveries, "clients-deliveries", 10_000, "deliveries per closed-loop run of the clients phase (each run also stops sending after 30 s)")
	benchClientList := benchFS.String("clients", "1,16,64", "client counts of the clients phase's closed-loop runs, comma-separated (0: none, the fixed-rate runs only)")
	benchFS.BoolVar(&bopts.Trace, "trace", false, "run the ledger with tracing on (every span sampled, exported over OTLP/HTTP to a discarding endpoint on loopback) to measure its cost; without it tracing is off, whatever OTEL_ variables say")
	benchFS.StringVar(&bopts.Out, "out", "", "also write the JSON report to this file")
	benchFS.StringVar(&bopts.ResultsDir, "results-dir", "bench/results", "directory for the timestamped JSON report and SVG chart")
	benchProfile := benchFS.String("cpuprofile", "", "write a CPU profile of the whole run (ledger and load generator, one process) to this file")
	benchVerbose := benchFS.Bool("verbose", false, "also print the ledger's own warnings and errors during the run")
	benchOnly := benchFS.String("only", "", "run only these phases, comma-separated ("+strings.Join(bench.Phases, ",")+"); ratios need their baseline phase")
	bench := &ffcli.Command{
		Name:       "bench",
		ShortUsage: "ledger bench [--quick] [--out FILE] [flags]",
		ShortHelp:  "measure the ledger against raw PostgreSQL and RabbitMQ baselines, in one run",
		LongHelp: "Measures raw baselines (PostgreSQL transactions of one event row + one outbox row; RabbitMQ\n" +
			"persistent publishes with confirms, consumed with acks), then the ledger: accept throughput over\n" +
			"HTTP at 1, 16 and 64 clients, sustained end-to-end deliveries, end-to-end latency at a fixed rate\n" +
			"(from each request's scheduled send time), relay lag, and audit query latency on a log of a\n" +
			"million events. The clients phase runs this binary's `serve` as a process of its own, once with\n" +
			"the product's defaults and once tuned, offers it 1, 16 and 64 closed-loop clients and then the\n" +
			"fixed rate, and reports deliveries per second and publish → delivery latency at a local webhook\n" +
			"sink, CPU per delivery of the ledger process, PostgreSQL and RabbitMQ, and the ledger's peak\n" +
			"RSS. The schedule phase holds a million deliveries scheduled far ahead and times a stream\n" +
			"falling due through them (attempt start − send_at), the accept with send_at against without,\n" +
			"and what the schedule keeps in PostgreSQL and RabbitMQ. The suppress phase fills a million\n" +
			"suppressions and times the accept against a ledger whose list is empty. The retention phase\n" +
			"sends a steady rate through a ledger whose retention archives and drops its partitions, in\n" +
			"compressed time, and samples PostgreSQL's size, the hot store and the archive each keep, and\n" +
			"the accept's p99 while a partition leaves against outside. Prints a table,\n" +
			"writes JSON and an SVG chart. A run whose counts do not balance is reported as void.",
		FlagSet: benchFS,
		Options: []ff.Option{ff.WithEnvVarPrefix(envPrefix)},
		Exec: func(ctx context.Context, _ []string) error {
			bopts.ApplyQuick()
			// The clients phase runs this binary's `serve` as the ledger under test.
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			bopts.Ledger = []string{exe, "serve"}
			if *benchVerbose {
				bopts.Logs = stderr
			}
			if *benchOnly != "" {
				for _, p := range strings.Split(*benchOnly, ",") {
					if p = strings.TrimSpace(p); !slices.Contains(bench.Phases, p) {
						return fmt.Errorf("--only: unknown phase %q (phases: %s)", p, strings.Join(bench.Phases, ", "))
					}
					bopts.Only = append(bopts.Only, strings.TrimSpace(p))
				}
			}
			for _, f := range strings.Split(*benchClientList, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 0 {
					return fmt.Errorf("--clients: %q is not a client count", f)
				}
				if n > 0 {
					bopts.Clients = append(bopts.Clients, n)
				}
			}
			if len(bopts.Clients) == 0 {
				bopts.Clients = []int{0}
			}
			if *benchProfile != "" {
				f, err := os.Create(*benchProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			rep, err := bench.Run(ctx, benchCfg, bopts, stderr)
			if err != nil {
				return err
			}
			bench.PrintTable(rep, stdout)
			files, err := bench.WriteReport(rep, bopts.Out, bopts.ResultsDir)
			for _, f := range files {
				fmt.Fprintf(stdout, "wrote %s\n", f)
			}
			return err
		},
	}

	checkFS := flag.NewFlagSet("ledger config check", flag.ContinueOnError)
	checkCfg := app.DefaultConfig()
	checkCmd := &ffcli.Command{
		Name:       "check",
		ShortUsage: "ledger config check FILE",
		ShortHelp:  "validate a configuration file without starting the ledger",
		LongHelp: "Reads FILE, checks every key and value (each refusal names its line and field), reads the\n" +
			"secrets its *_env keys name from the environment, builds every channel and provider it\n" +
			"describes, and prints them. Exit status 1 on any problem.",
		FlagSet: checkFS,
		Exec: func(_ context.Context, args []string) error {
			if len(args) != 1 {
				return errors.New("name one configuration file")
			}
			lines, err := app.CheckFile(args[0], checkCfg)
			if err != nil {
				return err
			}
			for _, l := range lines {
				fmt.Fprintln(stdout, l)
			}
			fmt.Fprintf(stdout, "%s: ok\n", args[0])
			return nil
		},
	}
	configFS := flag.NewFlagSet("ledger config", flag.ContinueOnError)
	configCmd := &ffcli.Command{
		Name:        "config",
		ShortUsage:  "ledger config check FILE",
		ShortHelp:   "work with configuration files",
		FlagSet:     configFS,
		Subcommands: []*ffcli.Command{checkCmd},
		Exec:        func(context.Context, []string) error { return flag.ErrHelp },
	}

	// The operator's commands (deliveries, dlq, replay, replays, reconcile, suppressions,
	// preferences) work through the HTTP API; operator.go.
	ops := newOperatorCommands(stdout, stderr)
	rootFS := flag.NewFlagSet("ledger", flag.ContinueOnError)
	root := &ffcli.Command{
		ShortUsage:  "ledger <command> [flags]",
		ShortHelp:   "an event-sourced delivery ledger for notifications",
		LongHelp:    "Commands: migrate, serve, config, projections, export, archive, sink, bench; through the HTTP API: deliveries, notifications, dlq, replay, replays, reconcile, suppressions, preferences. Run `ledger <command> --help` for a command's flags.",
		FlagSet:     rootFS,
		Subcommands: append([]*ffcli.Command{migrate, serve, configCmd, projectionsCommand(stdout, stderr), exportCommand(stdout, stderr), archiveCommand(stdout, stderr), sink, bench}, ops.commands()...),
		Exec: func(context.Context, []string) error {
			return flag.ErrHelp
		},
	}
	for _, fs := range []*flag.FlagSet{rootFS, serveFS, migrateFS, sinkFS, benchFS, checkFS, configFS} {
		fs.SetOutput(stderr)
	}
	if err := root.ParseAndRun(ctx, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if len(args) == 0 {
				fmt.Fprintln(stderr, ffcli.DefaultUsageFunc(root))
				return 2
			}
			return 0
		}
		if code, ok := ops.exitCode(err); ok {
			return code
		}
		fmt.Fprintf(stderr, "ledger: %v\n", err)
		return 1
	}
	return 0
}

func migrateCommand(ctx context.Context, cfg app.Config, to int, stdout io.Writer) error {
	pool, err := postgres.Connect(ctx, cfg.DatabaseURL, "", 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	steps, err := postgres.Migrate(ctx, pool, to, func(step string) { fmt.Fprintln(stdout, step) })
	if err != nil {
		return err
	}
	v, err := postgres.SchemaVersion(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema at version %d (%d steps)\n", v, steps)
	if cfg.ConfigFile == "" || postgres.CheckSchema(ctx, pool) != nil {
		return nil
	}
	created, pc, err := app.EnsureFilePartitions(ctx, pool, cfg, time.Now())
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", cfg.ConfigFile, err)
	}
	fmt.Fprintf(stdout, "partitions: %d created, %s wide\n", len(created), pc.Width)
	return nil
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/cmd/internal/app"
)

// Settings the soak gives every ledger process. The retry policy is short so that retries happen
// within the run; the webhook timeout is short so that the sink's slow answers become unknown.
const (
	soakTenant      = "soak"
	soakAPIKey      = "soak-key"
	retryBase       = 50 * time.Millisecond
	retryCap        = 400 * time.Millisecond
	maxAttempts     = 6
	webhookTimeout  = time.Second
	shutdownTimeout = 5 * time.Second

	// ledgerApplication names the ledger processes' database connections, so that the chaos
	// terminates theirs and not the checker's (or anyone else's).
	ledgerApplication  = "ledger-soak"
	checkerApplication = "soak-checker"
)

// environment is what one soak run owns: a schema, a queue name prefix, a directory of logs and
// of the ledger's configuration file.
type environment struct {
	schema string
	prefix string
	dir    string
	// config is the path of the ledger's configuration file (LEDGER_CONFIG), once written;
	// archive is the retention's archive directory it names.
	config  string
	archive string
	// ledgerURL is the database URL of the ledger processes, checkerURL the soak's own.
	ledgerURL  string
	checkerURL string
	amqpURL    string
	queueType  string
	// extra are the --set settings of the ledger processes.
	extra []string
	pool  *pgxpool.Pool
	// declared is set once ledger processes have started (and declared the queues).
	declared bool
}

// topology is the queue topology the ledger processes declare under the soak's prefix: the
// ledger's own (app.TopologyOf), planned from the settings the processes start with, so that
// the soak deletes (and the cluster chaos finds) exactly the queues the ledger declared.
func (e *environment) topology() (amqp.Topology, error) {
	var cfg app.Config
	fs := flag.NewFlagSet("soak topology", flag.ContinueOnError)
	cfg.ServeFlags(fs)
	for _, kv := range ledgerEnv(e, "topology", "127.0.0.1:0", options{LogLevel: "warn", Extra: e.extra}) {
		name, value, _ := strings.Cut(kv, "=")
		setting, ok := strings.CutPrefix(name, "LEDGER_")
		if !ok {
			// The configuration file names the SMS fakes' secrets: the soak's own, which the
			// ledger reads from its environment, and so does app.TopologyOf in this process.
			if name == twilioTokenVar || name == vonageSecretVar || name == vonageCallbackVar {
				_ = os.Setenv(name, value)
			}
			continue
		}
		if f := fs.Lookup(strings.ReplaceAll(strings.ToLower(setting), "_", "-")); f != nil {
			if err := fs.Set(f.Name, value); err != nil {
				return amqp.Topology{}, fmt.Errorf("the ledger's topology: %s: %w", name, err)
			}
		}
	}
	cfg.Explicit(fs)
	topo, err := app.TopologyOf(cfg)
	if err != nil {
		return topo, fmt.Errorf("the ledger's topology: %w", err)
	}
	return topo, nil
}

// setUp creates the database if missing, a fresh schema, a unique queue prefix and a log
// directory (with the archive directory's place in it); migrate migrates the schema once the
// configuration file is written.
func setUp(ctx context.Context, o options) (*environment, error) {
	suffix := randomHex(4)
	e := &environment{schema: "soak_" + suffix, prefix: "soak-" + suffix, amqpURL: o.AMQPURL, queueType: amqp.QueueClassic, extra: o.Extra}
	if o.Cluster != "" {
		e.queueType = amqp.QueueQuorum
	}
	var err error
	if e.dir, err = os.MkdirTemp("", "ledger-soak-"+suffix+"-"); err != nil {
		return nil, err
	}
	if err := ensureDatabase(ctx, o.DatabaseURL); err != nil {
		return e, err
	}
	if e.ledgerURL, err = withParams(o.DatabaseURL, e.schema, ledgerApplication); err != nil {
		return e, err
	}
	if e.checkerURL, err = withParams(o.DatabaseURL, e.schema, checkerApplication); err != nil {
		return e, err
	}
	admin, err := pgx.Connect(ctx, e.checkerURL)
	if err != nil {
		return e, fmt.Errorf("connect to the soak database: %w", err)
	}
	_, err = admin.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{e.schema}.Sanitize())
	admin.Close(ctx)
	if err != nil {
		return e, fmt.Errorf("create schema %s: %w", e.schema, err)
	}
	if e.pool, err = postgres.Connect(ctx, e.checkerURL, e.schema, 4); err != nil {
		return e, err
	}
	e.archive = filepath.Join(e.dir, "archive")
	return e, nil
}

// migrate runs `ledger migrate` with the ledger's configuration file, which cuts the partitions
// ahead of its retention.partition width before any process starts.
func (e *environment) migrate(ctx context.Context, o options) (string, error) {
	migrate := exec.CommandContext(ctx, o.Ledger, "migrate")
	migrate.Env = ledgerEnv(e, "migrate", "127.0.0.1:0", options{LogLevel: "warn", Extra: e.extra})
	out, err := migrate.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ledger migrate: %w\n%s", err, out)
	}
	return lastLine(strings.TrimSpace(string(out))), nil
}

// tearDown drops the schema, deletes the queues and exchanges and removes the logs. With keep
// set it leaves them and says where they are.
func (e *environment) tearDown(keep bool, say func(string, ...any)) {
	if keep {
		say("kept: schema %s (search_path in %s), queue prefix %s, logs in %s", e.schema, e.checkerURL, e.prefix, e.dir)
		if e.pool != nil {
			e.pool.Close()
		}
		return
	}
	var errs []error
	if e.pool != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := e.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{e.schema}.Sanitize()+` CASCADE`)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("drop schema %s: %w", e.schema, err))
		}
		e.pool.Close()
	}
	if e.declared {
		topo, err := e.topology()
		if err != nil {
			errs = append(errs, fmt.Errorf("delete queues %s.*: %w", e.prefix, err))
		} else if conn, err := amqp.Dial(e.amqpURL); err != nil {
			errs = append(errs, fmt.Errorf("delete queues %s.*: %w", e.prefix, err))
		} else {
			if err := topo.Delete(conn); err != nil {
				errs = append(errs, fmt.Errorf("delete queues %s.*: %w", e.prefix, err))
			}
			conn.Close()
		}
	}
	if e.dir != "" {
		if err := os.RemoveAll(e.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		say("clean-up: %v", err)
	}
}

// ensureDatabase creates the database of rawURL if it does not exist.
func ensureDatabase(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" {
		return errors.New("--database-url names no database")
	}
	admin := *u
	admin.Path = "/postgres"
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return fmt.Errorf("connect to %s: %w", admin.Redacted(), err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// withParams sets the search_path and application_name of a database URL.
func withParams(rawURL, schema, application string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("--database-url: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", application)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// urlFor is the ledger processes' database URL with process name's application_name.
func (e *environment) urlFor(name string) string {
	u, err := url.Parse(e.ledgerURL)
	if err != nil {
		return e.ledgerURL // setUp parsed it already
	}
	q := u.Query()
	q.Set("application_name", ledgerApplication+"/"+name)
	u.RawQuery = q.Encode()
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ledgerEnv is the environment of the soak's ledger process name. Each connects to the
// database under an application_name of its own, ledger-soak/<name>: the chaos terminates
// them all, and the handover measurement tells whose backends are left.
func ledgerEnv(e *environment, name, httpAddr string, o options) []string {
	var base []string
	for _, kv := range os.Environ() {
		// The soak sets every LEDGER_ variable it means; none may leak in from the caller.
		if !strings.HasPrefix(kv, "LEDGER_") {
			base = append(base, kv)
		}
	}
	env := append(base,
		"LEDGER_DATABASE_URL="+e.urlFor(name),
		"LEDGER_AMQP_URL="+e.amqpURL,
		"LEDGER_AMQP_QUEUE_TYPE="+e.queueType,
		"LEDGER_AMQP_PREFIX="+e.prefix,
		"LEDGER_API_KEYS="+soakTenant+":"+soakAPIKey,
		"LEDGER_WEBHOOK_ALLOW_CIDRS=127.0.0.0/8",
		"LEDGER_HTTP_ADDR="+httpAddr,
		// Every process serves its own metrics; a free port each, so they do not collide.
		"LEDGER_METRICS_ADDR=127.0.0.1:0",
		"LEDGER_RETRY_BASE="+retryBase.String(),
		"LEDGER_RETRY_CAP="+retryCap.String(),
		fmt.Sprintf("LEDGER_MAX_ATTEMPTS=%d", maxAttempts),
		"LEDGER_WEBHOOK_TIMEOUT="+webhookTimeout.String(),
		"LEDGER_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(),
		"LEDGER_DATABASE_MAX_CONNS=8",
		"LEDGER_LOG_LEVEL="+o.LogLevel,
		"LEDGER_RECONCILE_INTERVAL="+reconcileInterval.String(),
		// The fakes list a message as soon as they take it: no minute's grace before a lookup.
		"LEDGER_RECONCILE_UNKNOWN_AFTER=2s",
		// The secrets the configuration file names.
		twilioTokenVar+"="+smsAuthToken,
		vonageSecretVar+"="+smsAPISecret,
		vonageCallbackVar+"="+smsCallbackToken,
	)
	if e.config != "" {
		env = append(env, "LEDGER_CONFIG="+e.config)
	}
	// Later entries win (os/exec keeps the last value of a repeated name).
	return append(env, o.Extra...)
}

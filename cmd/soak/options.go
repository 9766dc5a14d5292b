package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Defaults of the soak's flags.
const (
	defaultDeliveries  = 2000
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/ledger_soak?sslmode=disable"
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
	defaultSMSShare    = 0.2
)

// options are the soak's settings.
type options struct {
	// Ledger is the path of the built ledger binary.
	Ledger      string
	Deliveries  int
	DatabaseURL string
	AMQPURL     string
	// KillEvery is the pause between two SIGKILLs of a random role process.
	KillEvery time.Duration
	// Timeout bounds the whole run: producing, delivering and settling.
	Timeout time.Duration
	// Clients is the number of concurrent producers.
	Clients int
	// Rate is the average of accepts per second (0: as fast as the API answers), so that
	// production overlaps with many kills; Burst is the size of the waves they are sent in.
	Rate  float64
	Burst int
	// SMSShare is the share of the deliveries sent to the sms channel (the rest go to the
	// webhook sink).
	SMSShare float64
	// Seed makes the chaos schedule repeatable (0: a random seed, printed).
	Seed uint64
	// Keep leaves the schema, the queues and the process logs in place for investigation:
	// never, failed (when a check failed) or always.
	Keep string
	// LogLevel is the ledger processes' log level.
	LogLevel string
	// Extra are LEDGER_ settings added to (or overriding) the soak's own, for investigation.
	Extra []string
	// Cluster is scripts/rabbitmq-cluster.sh when the soak runs on that cluster: quorum
	// queues, and instead of restarting the broker the node that leads the work queue is
	// SIGKILLed halfway and restarted after ClusterDown.
	Cluster     string
	ClusterDown time.Duration
	// PGFailover is scripts/pg-failover.sh when the soak runs on its primary and standby
	// (--database-url their multi-host URL): two fifths in, the primary is killed and the
	// standby promoted.
	PGFailover string
	// Twice runs two processes of every role (api, relay, worker, reconciler, projector) and
	// measures the relay's and the projector's handover when one of the two is killed.
	Twice bool
	// RestartBroker restarts the RabbitMQ node halfway (rabbitmqctl stop_app, start_app); off,
	// the soak leaves a broker that others share alone.
	RestartBroker bool
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.StringVar(&o.Ledger, "ledger", "bin/ledger", "path of the built ledger binary (make build)")
	fs.IntVar(&o.Deliveries, "deliveries", envInt("SOAK_DELIVERIES", defaultDeliveries), "deliveries to send (default: $SOAK_DELIVERIES, else 2000)")
	fs.StringVar(&o.DatabaseURL, "database-url", defaultDatabaseURL, "PostgreSQL database for the soak (created if missing; the soak works in its own schema and drops it)")
	fs.StringVar(&o.AMQPURL, "amqp-url", defaultAMQPURL, "RabbitMQ (the soak uses its own name prefix and deletes its queues)")
	fs.DurationVar(&o.KillEvery, "kill-every", 1500*time.Millisecond, "pause between two SIGKILLs of a random role process")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "limit of the whole run")
	fs.IntVar(&o.Clients, "clients", 16, "concurrent producers")
	fs.Float64Var(&o.Rate, "rate", 25, "average accepts per second (0: unlimited)")
	fs.IntVar(&o.Burst, "burst", 100, "deliveries per wave: each wave is sent as fast as the API takes it")
	fs.Float64Var(&o.SMSShare, "sms-share", defaultSMSShare, "share of the deliveries sent as SMS, to the Twilio fake first and the Vonage fake after it (0 to 1; the rest are webhooks)")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the chaos schedule (0: random)")
	fs.StringVar(&o.Keep, "keep", "never", "keep the schema, queues, process logs and sink record after the run: never, failed or always")
	fs.StringVar(&o.Cluster, "cluster", "", "path of scripts/rabbitmq-cluster.sh: run on that cluster (--amqp-url its nodes) with quorum queues, and SIGKILL the node that leads the work queue instead of restarting the broker")
	fs.DurationVar(&o.ClusterDown, "cluster-down", 10*time.Second, "with --cluster, how long the killed node stays down")
	fs.StringVar(&o.PGFailover, "pg-failover", "", "path of scripts/pg-failover.sh: run on its primary and standby (--database-url their multi-host URL) and, two fifths in, kill the primary and promote the standby")
	fs.BoolVar(&o.Twice, "twice", false, "run two processes of every role (the second API takes the DLQ replays) and measure how long the relays and projectors take to hand over when one is killed")
	fs.BoolVar(&o.RestartBroker, "restart-broker", true, "restart the RabbitMQ node halfway (false: leave a broker that other work shares alone; --cluster kills a cluster node instead)")
	fs.StringVar(&o.LogLevel, "log-level", "warn", "log level of the ledger processes (debug shows every worker decision)")
	fs.Func("set", "an extra `LEDGER_NAME=value` setting for the ledger processes (repeatable)", func(s string) error {
		if !strings.HasPrefix(s, "LEDGER_") || !strings.Contains(s, "=") {
			return fmt.Errorf("want LEDGER_NAME=value, got %q", s)
		}
		o.Extra = append(o.Extra, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if o.Deliveries < 1 {
		errs = append(errs, fmt.Errorf("--deliveries %d is below 1", o.Deliveries))
	}
	if o.KillEvery <= 0 {
		errs = append(errs, fmt.Errorf("--kill-every %s is not positive", o.KillEvery))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s is not positive", o.Timeout))
	}
	if o.Keep != "never" && o.Keep != "failed" && o.Keep != "always" {
		errs = append(errs, fmt.Errorf("--keep %q: want never, failed or always", o.Keep))
	}
	if o.Burst < 1 {
		errs = append(errs, fmt.Errorf("--burst %d is below 1", o.Burst))
	}
	if o.SMSShare < 0 || o.SMSShare > 1 {
		errs = append(errs, fmt.Errorf("--sms-share %g: want a share from 0 to 1", o.SMSShare))
	}
	if o.Clients < 1 {
		errs = append(errs, fmt.Errorf("--clients %d is below 1", o.Clients))
	}
	if o.PGFailover != "" {
		if _, err := os.Stat(o.PGFailover); err != nil {
			errs = append(errs, fmt.Errorf("--pg-failover: %w", err))
		}
	}
	if o.Cluster != "" {
		if _, err := os.Stat(o.Cluster); err != nil {
			errs = append(errs, fmt.Errorf("--cluster: %w", err))
		}
	}
	if _, err := os.Stat(o.Ledger); err != nil {
		errs = append(errs, fmt.Errorf("--ledger: %w (run make build)", err))
	}
	return o, errors.Join(errs...)
}

// envInt reads a positive integer from the environment, or returns def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

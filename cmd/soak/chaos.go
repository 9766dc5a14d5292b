package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Bounds of the pause between a SIGKILL and the restart of the killed process.
const (
	minRestartPause = 100 * time.Millisecond
	maxRestartPause = 1200 * time.Millisecond
)

// incident is something the chaos did, kept to explain what the checker finds.
type incident struct {
	At, End time.Time
	Kind    string // kill, rabbitmq-restart, pg-terminate, provider-kill
	Target  string
	Detail  string
}

// chaos kills processes and disturbs the broker and the database, and remembers when.
type chaos struct {
	procs []*process
	rng   *rand.Rand
	say   func(string, ...any)
	// handovers, with --twice, measures what each kill of a relay or a projector hands over.
	handovers *handoverWatch

	mu        sync.Mutex
	incidents []incident
	failures  []string
}

func newChaos(procs []*process, seed uint64, say func(string, ...any)) *chaos {
	return &chaos{procs: procs, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), say: say}
}

func (c *chaos) record(in incident) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.incidents = append(c.incidents, in)
}

func (c *chaos) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, fmt.Sprintf(format, args...))
}

// killLoop sends SIGKILL to a random running process every interval until ctx ends; each is
// restarted after a random pause.
func (c *chaos) killLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var up []*process
		for _, p := range c.procs {
			if p.isRunning() {
				up = append(up, p)
			}
		}
		if len(up) == 0 {
			continue
		}
		c.mu.Lock()
		p := up[c.rng.IntN(len(up))]
		pause := minRestartPause + time.Duration(c.rng.Int64N(int64(maxRestartPause-minRestartPause)))
		c.mu.Unlock()
		held := false
		if c.handovers != nil {
			held = c.handovers.before(ctx, p.name)
		}
		if p.kill(pause) {
			at := time.Now()
			c.record(incident{At: at, Kind: "kill", Target: p.name, Detail: "restart after " + pause.Round(time.Millisecond).String()})
			if c.handovers != nil {
				go c.handovers.killed(context.WithoutCancel(ctx), p.name, at, held)
			}
		}
	}
}

// restartRabbitMQ stops and starts the broker application and waits until it accepts
// connections again. Once begun it runs to the end even if ctx ends: a broker left stopped would
// break every other user of this machine's RabbitMQ.
func (c *chaos) restartRabbitMQ(ctx context.Context, amqpURL string) {
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	c.say("chaos: restarting RabbitMQ (rabbitmqctl stop_app, start_app)")
	// start_app runs even when stop_app failed: it is a no-op on a running broker.
	for _, step := range []string{"stop_app", "start_app"} {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		out, err := exec.CommandContext(cctx, "rabbitmqctl", step).CombinedOutput()
		cancel()
		if err != nil {
			c.fail("RabbitMQ restart: rabbitmqctl %s: %v: %s", step, err, strings.TrimSpace(string(out)))
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conn, err := amqp.Dial(amqpURL)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			c.fail("RabbitMQ restart: the broker does not accept connections again: %v", err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	end := time.Now()
	c.record(incident{At: start, End: end, Kind: "rabbitmq-restart", Target: "rabbitmq", Detail: "down for " + end.Sub(start).Round(time.Millisecond).String()})
	c.say("chaos: RabbitMQ is back after %s", end.Sub(start).Round(time.Millisecond))
}

// killLeader SIGKILLs the cluster node that leads queue, keeps it down for down, and starts it
// again; the ledger's connections to it move to the other nodes, and the quorum queue elects a
// new leader among them. Once begun it runs to the end even if ctx ends: a node left down would
// leave the cluster without its majority for the next run.
func (c *chaos) killLeader(ctx context.Context, script, queue string, down time.Duration) {
	ctx = context.WithoutCancel(ctx)
	out, err := exec.CommandContext(ctx, script, "leader", queue).Output()
	leader := strings.TrimSpace(string(out))
	if err != nil || leader == "" {
		c.fail("cluster: find the leader of %s: %v", queue, err)
		return
	}
	start := time.Now()
	c.say("chaos: SIGKILL of RabbitMQ node %s, the leader of %s, for %s", leader, queue, down)
	if out, err := exec.CommandContext(ctx, script, "kill", leader).CombinedOutput(); err != nil {
		c.fail("cluster: kill node %s: %v: %s", leader, err, strings.TrimSpace(string(out)))
		return
	}
	time.Sleep(down)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	out, err = exec.CommandContext(cctx, script, "restart", leader).CombinedOutput()
	cancel()
	if err != nil {
		c.fail("cluster: restart node %s: %v: %s", leader, err, strings.TrimSpace(string(out)))
	}
	end := time.Now()
	c.record(incident{At: start, End: end, Kind: "rabbitmq-restart", Target: "rabbitmq node " + leader,
		Detail: "SIGKILL of the leader of " + queue + ", down for " + end.Sub(start).Round(time.Millisecond).String()})
	c.say("chaos: node %s is back after %s", leader, end.Sub(start).Round(time.Millisecond))
}

// failOverDatabase kills the PostgreSQL primary (immediate shutdown) and promotes its standby,
// as a failover manager would; the ledger's connections find the new primary through their
// multi-host URL (target_session_attrs=read-write).
func (c *chaos) failOverDatabase(ctx context.Context, script string) {
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	c.say("chaos: PostgreSQL failover (the primary killed, the standby promoted)")
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	out, err := exec.CommandContext(cctx, script, "failover").CombinedOutput()
	cancel()
	if err != nil {
		c.fail("PostgreSQL failover: %v: %s", err, strings.TrimSpace(string(out)))
		return
	}
	end := time.Now()
	c.record(incident{At: start, End: end, Kind: "pg-failover", Target: "postgresql",
		Detail: "primary killed, standby promoted in " + end.Sub(start).Round(time.Millisecond).String()})
	c.say("chaos: the standby is the primary after %s", end.Sub(start).Round(time.Millisecond))
}

// killTwilio kills the Twilio fake for good (see smsFakes), after reading its list of messages.
func (c *chaos) killTwilio(ctx context.Context, fakes *smsFakes) {
	killed, err := fakes.killTwilio(ctx)
	if err != nil {
		c.fail("list the Twilio fake's messages before its kill: %v", err)
	}
	if !killed {
		c.fail("kill the Twilio fake: it was not running")
		return
	}
	c.record(incident{At: fakes.killedAt, Kind: "provider-kill", Target: twilioProvider, Detail: "SIGKILL, not restarted"})
	c.say("chaos: killed the Twilio fake for good (%d messages listed before); SMS fail over to Vonage", len(fakes.listed))
}

// terminateConnections ends every database connection of the ledger processes (they connect
// with application_name ledger-soak/<process>; the checker's own are left alone).
func (c *chaos) terminateConnections(ctx context.Context, pool *pgxpool.Pool) {
	var n int
	err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE $1 || '/%' AND pid <> pg_backend_pid()`,
		ledgerApplication).Scan(&n)
	if err != nil {
		c.fail("terminate the ledger's database connections: %v", err)
		return
	}
	c.record(incident{At: time.Now(), Kind: "pg-terminate", Target: "postgresql", Detail: fmt.Sprintf("%d connections", n)})
	c.say("chaos: terminated %d database connections of the ledger processes", n)
	if n == 0 {
		c.fail("terminate the ledger's database connections: none found")
	}
}

// snapshot returns what the chaos did and what it failed to do.
func (c *chaos) snapshot() ([]incident, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]incident(nil), c.incidents...), append([]string(nil), c.failures...)
}

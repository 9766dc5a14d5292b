package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands/commandstest"
	"github.com/deliveryledger/ledger/domain"
)

// killable is `ledger serve` as a process of its own (the test binary, see TestMain) that a test
// may SIGKILL: unlike startLedger's, its cleanup expects a killed process to have died so.
type killable struct {
	cmd    *exec.Cmd
	base   string
	mu     sync.Mutex
	log    bytes.Buffer
	done   chan struct{}
	killed bool
}

func (p *killable) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// kill ends the process with SIGKILL, as a crash or an OOM kill would, and waits for it.
func (p *killable) kill(t *testing.T) {
	t.Helper()
	p.killed = true
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// startKillable runs the ledger with env and returns it once its API listens.
func startKillable(t *testing.T, roles string, env []string) *killable {
	t.Helper()
	p := &killable{cmd: exec.Command(os.Args[0]), done: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEDGER_") && !strings.HasPrefix(kv, "OTEL_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(append(p.cmd.Env, env...), serveEnv+"="+roles)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &lockedWriter{p}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if a, ok := strings.CutPrefix(line, "ledger: API listening on http://"); ok {
				addr <- a
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.killed {
			return
		}
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
			if !p.cmd.ProcessState.Success() {
				t.Errorf("ledger stopped with %v; its log:\n%s", p.cmd.ProcessState, p.logText())
			}
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("ledger did not stop on SIGINT")
		}
	})
	select {
	case a := <-addr:
		p.base = "http://" + a
	case <-p.done:
		t.Fatalf("ledger exited before listening:\n%s", p.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("ledger did not listen within 30s:\n%s", p.logText())
	}
	return p
}

// lockedWriter appends a process's stderr to its log.
type lockedWriter struct{ p *killable }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.log.Write(b)
}

// call sends a request to the process as tenant acme.
func (p *killable) call(t *testing.T, method, path, idemKey, body string) (*http.Response, []byte) {
	t.Helper()
	r, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer acme-key")
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		r.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", method, path, err, p.logText())
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

// replayJobProgress reads a job's counts straight from the database (the process may be dead).
func replayJobProgress(t *testing.T, schema *pgtest.Schema, id string) (state string, matched, replayed, skipped int) {
	t.Helper()
	err := schema.Pool.QueryRow(context.Background(), `SELECT state, matched, replayed, skipped FROM replay_jobs WHERE id = $1`, id).
		Scan(&state, &matched, &replayed, &skipped)
	if err != nil {
		t.Fatal(err)
	}
	return state, matched, replayed, skipped
}

// TestReplayJobSurvivesSIGKILLOfItsProcess: a replay job over 400 dead deliveries (and an unknown
// one it must leave alone) runs in a ledger process that is SIGKILLed part-way; a new process
// resumes it once the lease runs out. Every dead delivery has exactly one replay event, made by
// the job, the counts add up, the unknown and another tenant's dead delivery are untouched, and
// the same key answers the same job from the new process.
func TestReplayJobSurvivesSIGKILLOfItsProcess(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	const n = 400
	dead := make([]string, 0, n)
	for range n {
		dead = append(dead, commandstest.DeadDelivery(t, store, "acme", "http://127.0.0.1:9/h", false))
	}
	unknown := commandstest.DeadDelivery(t, store, "acme", "http://127.0.0.1:9/h", true)
	other := commandstest.DeadDelivery(t, store, "globex", "http://127.0.0.1:9/h", false)

	prefix := amqptest.Prefix()
	env := []string{
		"LEDGER_DATABASE_URL=" + schema.URL,
		"LEDGER_AMQP_URL=" + amqptest.URL(),
		"LEDGER_AMQP_PREFIX=" + prefix,
		"LEDGER_AMQP_QUEUE_TYPE=" + testQueueType(),
		"LEDGER_API_KEYS=acme:acme-key,globex:globex-key",
		"LEDGER_HTTP_ADDR=127.0.0.1:0",
		"LEDGER_METRICS_ADDR=off",
		"LEDGER_LOG_LEVEL=warn",
		// Small pages, so that the kill lands mid-job; a short lease, so that the new process
		// resumes within a second instead of the default 30 s.
		"LEDGER_REPLAY_JOB_PAGE=15",
		"LEDGER_REPLAY_JOB_LEASE=1s",
	}
	t.Cleanup(func() {
		cfg := DefaultConfig()
		cfg.AMQPPrefix = prefix
		top, err := TopologyOf(cfg)
		if err != nil {
			t.Error(err)
			return
		}
		conn, err := amqp091.Dial(amqptest.URL())
		if err != nil {
			t.Errorf("clean up: %v", err)
			return
		}
		defer conn.Close()
		if err := top.Delete(conn); err != nil {
			t.Errorf("clean up topology: %v", err)
		}
	})
	// No relay and no workers: the replays stay in the outbox, the log is all the test reads.
	first := startKillable(t, "api,projector", env)
	deadline := time.Now().Add(30 * time.Second)
	for { // the projector (of the first process) must list them before a job can select them
		var count int
		if err := schema.Pool.QueryRow(context.Background(), `SELECT count(*) FROM dlq_view`).Scan(&count); err != nil {
			t.Fatal(err)
		}
		if count == n+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DLQ view holds %d of %d", count, n+2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	body := `{"reason":"receiver fixed","channel":"webhook"}`
	resp, raw := first.call(t, "POST", "/v1/replays", "bulk-kill", body)
	var job replayJobAnswer
	if err := json.Unmarshal(raw, &job); err != nil || resp.StatusCode != http.StatusAccepted || job.Matched != n {
		t.Fatalf("create: %d %s", resp.StatusCode, raw)
	}

	// SIGKILL once some pages are recorded, long before the last.
	deadline = time.Now().Add(30 * time.Second)
	for {
		if _, _, replayed, _ := replayJobProgress(t, schema, job.ID); replayed >= 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job made no progress in 30s:\n%s", first.logText())
		}
		time.Sleep(2 * time.Millisecond)
	}
	first.kill(t)
	state, _, replayed, skipped := replayJobProgress(t, schema, job.ID)
	if state != "running" || replayed+skipped >= n {
		t.Fatalf("after the kill: %s, %d replayed, %d skipped: the kill did not land mid-job", state, replayed, skipped)
	}
	t.Logf("killed after %d of %d were recorded replayed", replayed, n)

	restarted := time.Now()
	second := startKillable(t, "api,projector", env)
	resp, raw = second.call(t, "POST", "/v1/replays", "bulk-kill", body)
	var again replayJobAnswer
	_ = json.Unmarshal(raw, &again)
	if resp.StatusCode != http.StatusAccepted || again.ID != job.ID || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same key after the restart: %d %s, want job %s", resp.StatusCode, raw, job.ID)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		_, raw = second.call(t, "GET", "/v1/replays/"+job.ID, "", "")
		if err := json.Unmarshal(raw, &job); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if job.State == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job was not resumed to done: %s\n%s", raw, second.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if job.Matched != n || job.Replayed+job.Skipped != job.Matched || job.Replayed != n {
		t.Fatalf("done job %s: want %d matched, all replayed", raw, n)
	}
	// Resumed once the 1 s lease ran out, not the default 30 s.
	if took := time.Since(restarted); took > 20*time.Second {
		t.Fatalf("the job took %s to finish after the restart: LEDGER_REPLAY_JOB_LEASE is not honoured", took)
	}

	// The log decides: one replay event per dead delivery, each the job's.
	rows, err := schema.Pool.Query(context.Background(), `SELECT delivery_id::text, count(*),
	count(*) FILTER (WHERE data->>'reason' = $1 AND data->>'actor' = 'tenant:acme')
FROM events WHERE type = $2 GROUP BY delivery_id`, fmt.Sprintf("receiver fixed (replay job %s)", job.ID), string(domain.EventReplayed))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int{}
	for rows.Next() {
		var id string
		var all, byJob int
		if err := rows.Scan(&id, &all, &byJob); err != nil {
			t.Fatal(err)
		}
		got[id] = [2]int{all, byJob}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range dead {
		if got[id] != [2]int{1, 1} {
			t.Fatalf("delivery %s: %d replay events, %d of them the job's; want exactly one", id, got[id][0], got[id][1])
		}
	}
	if _, ok := got[unknown]; ok {
		t.Fatalf("the unknown delivery was replayed without include_unknown")
	}
	if _, ok := got[other]; ok {
		t.Fatalf("another tenant's dead delivery was replayed")
	}
	if len(got) != n {
		t.Fatalf("%d deliveries replayed, want %d", len(got), n)
	}
}

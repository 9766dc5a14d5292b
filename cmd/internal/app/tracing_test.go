package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing/otlptest"
)

// serveEnv, set in a test binary's environment, makes it `ledger serve` instead of the tests
// (see TestMain): the tests that need the ledger as separate processes run the test binary
// itself, configured by LEDGER_ variables as `ledger serve` is, rather than build cmd/ledger.
const serveEnv = "LEDGER_TEST_SERVE_ROLES"

func TestMain(m *testing.M) {
	if roles := os.Getenv(serveEnv); roles != "" {
		os.Exit(ServeFromEnvironment(roles))
	}
	os.Exit(m.Run())
}

// ledgerProcess is `ledger serve` running as a process of its own, its log kept.
type ledgerProcess struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	addr chan string
}

func (p *ledgerProcess) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startLedger runs `ledger serve --roles roles` (the test binary, see TestMain) with env until the test ends, and returns it
// once it says where its API listens (roles with the api) or at once.
func startLedger(t *testing.T, roles string, env []string) *ledgerProcess {
	t.Helper()
	p := &ledgerProcess{addr: make(chan string, 1)}
	p.cmd = exec.Command(os.Args[0])
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEDGER_") && !strings.HasPrefix(kv, "OTEL_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Env = append(p.cmd.Env, serveEnv+"="+roles)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pipes sync.WaitGroup
	pipes.Add(2)
	keep := func(r io.Reader, watch bool) {
		defer pipes.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if a, ok := strings.CutPrefix(line, "ledger: API listening on http://"); watch && ok {
				p.addr <- a
			}
		}
	}
	go keep(stdout, true)
	go keep(stderr, false)
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { pipes.Wait(); done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ledger %s stopped with %v; its log:\n%s", roles, err, p.logText())
			}
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("ledger %s did not stop on SIGINT", roles)
		}
	})
	return p
}

// traceEnv is the environment of a traced ledger process over schema and prefix, exporting to
// receiver as service.
func traceEnv(schema *pgtest.Schema, prefix, receiver, service string) []string {
	return []string{
		"LEDGER_DATABASE_URL=" + schema.URL,
		"LEDGER_AMQP_URL=" + amqptest.URL(),
		"LEDGER_AMQP_PREFIX=" + prefix,
		"LEDGER_AMQP_QUEUE_TYPE=" + testQueueType(),
		"LEDGER_API_KEYS=acme:acme-key",
		"LEDGER_HTTP_ADDR=127.0.0.1:0",
		"LEDGER_METRICS_ADDR=127.0.0.1:0",
		"LEDGER_WEBHOOK_ALLOW_CIDRS=127.0.0.0/8",
		"LEDGER_RETRY_BASE=20ms",
		"LEDGER_RETRY_CAP=80ms",
		"LEDGER_MAX_ATTEMPTS=3",
		"LEDGER_LOG_LEVEL=debug",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + receiver,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_SERVICE_NAME=" + service,
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test",
		"OTEL_TRACES_SAMPLER=parentbased_always_on",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
}

// TestOneTraceFromAcceptToProviderAcrossProcesses: with the API and relay in one process and
// the worker in another, both exporting to a real OTLP endpoint, a delivery accepted under the
// caller's traceparent is one trace: the HTTP accept (server span, child of the caller's), the
// wait for the group commit and its statements, the relay's publish, RabbitMQ, the worker's
// consume, the attempt, the provider call and its HTTP client span (whose traceparent the
// receiver gets), and the outcome's append. A retry continues the same trace, a replay days
// later too (linked to the operator's request), each consumed under the accept's span as a
// later hop; and the log lines about a delivery carry its delivery_id, trace_id and span_id.
func TestOneTraceFromAcceptToProviderAcrossProcesses(t *testing.T) {
	t.Parallel()
	receiver := otlptest.Start(t)
	schema := pgtest.New(t)
	prefix := amqptest.Prefix()
	// Declared here, so that it is deleted when the test ends, after the processes stopped.
	policy := domain.RetryPolicy{Strategy: domain.Exponential{Base: 20 * time.Millisecond, Cap: 80 * time.Millisecond}, MaxAttempts: 3}
	amqptest.Declare(t, amqp.Topology{Prefix: prefix, Channels: []string{"webhook"}, Tiers: policy.Tiers(), QueueType: testQueueType()})

	sink := newSink(t)
	var received sync.Map // path → traceparent the provider call carried
	sink.script(func(r *http.Request, n int) (int, http.Header) {
		received.Store(r.URL.Path+fmt.Sprint(n), r.Header.Get("traceparent"))
		switch {
		case r.URL.Path == "/flaky" && n == 1:
			return http.StatusServiceUnavailable, nil
		case r.URL.Path == "/gone" && n == 1:
			return http.StatusNotFound, nil
		}
		return http.StatusOK, nil
	})

	api := startLedger(t, "api,relay", traceEnv(schema, prefix, receiver.Endpoint(), "ledger-api"))
	worker := startLedger(t, "worker", traceEnv(schema, prefix, receiver.Endpoint(), "ledger-worker"))
	var base string
	select {
	case addr := <-api.addr:
		base = "http://" + addr
	case <-time.After(30 * time.Second):
		t.Fatalf("the api process did not start; its log:\n%s", api.logText())
	}
	b := &e2eBundle{schema: schema, sink: sink, base: base, key: "acme-key"}

	// The caller's own trace: the accept continues it.
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	accept := func(key, path, traceparent string) string {
		resp, out := b.doWith(t, "POST", "/v1/deliveries", key,
			map[string]any{"channel": "webhook", "recipient": sink.URL + path, "payload": map[string]any{"n": 1}},
			http.Header{"Traceparent": {traceparent}})
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("accept: %d %s", resp.StatusCode, out)
		}
		var d struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(out, &d)
		return d.ID
	}
	first := accept("trace-1", "/ok", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	b.waitState(t, first, domain.StateDelivered, 30*time.Second)

	// One trace, from the caller's span to the outcome's append, across both processes.
	byName := func(spans []otlptest.Span, name string) []otlptest.Span {
		var out []otlptest.Span
		for _, s := range spans {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	spans := receiver.WaitFor(t, "trace from accept to outcome", 30*time.Second, func(all []otlptest.Span) bool {
		tr := filterTrace(all, callerTrace)
		// Two processes export in batches of their own, and a parent span ends (and is
		// exported) after its children: wait for every span the checks below name.
		for _, name := range []string{"POST /v1/deliveries", "accept: wait for group commit", "send " + prefix + ".webhook",
			"process " + prefix + ".webhook", "attempt webhook", "call webhook", "POST", "record outcome", "append: wait for group commit"} {
			if len(byName(tr, name)) == 0 {
				return false
			}
		}
		return true
	})
	tr := filterTrace(spans, callerTrace)
	t.Logf("the trace of one delivery, as exported:\n%s", otlptest.Render(tr))
	ids := map[string]otlptest.Span{}
	for _, s := range tr {
		ids[s.SpanID] = s
	}
	one := func(name, service, kind string) otlptest.Span {
		t.Helper()
		got := byName(tr, name)
		if len(got) != 1 {
			t.Fatalf("%d spans %q in the trace, want 1:\n%s", len(got), name, otlptest.Render(tr))
		}
		s := got[0]
		if s.Service != service || s.Kind != kind {
			t.Fatalf("span %q from %s (%s), want %s (%s)", name, s.Service, s.Kind, service, kind)
		}
		return s
	}
	childOf := func(child, parent otlptest.Span) {
		t.Helper()
		for s, ok := child, true; ok; s, ok = ids[s.ParentID] {
			if s.ParentID == parent.SpanID {
				return
			}
		}
		t.Errorf("span %q is not under %q:\n%s", child.Name, parent.Name, otlptest.Render(tr))
	}
	server := one("POST /v1/deliveries", "ledger-api", "server")
	if server.ParentID != "00f067aa0ba902b7" {
		t.Errorf("the accept's span has parent %q, want the caller's span", server.ParentID)
	}
	if server.Attributes["http.route"] != "/v1/deliveries" || server.Attributes["http.response.status_code"] != "202" {
		t.Errorf("server span attributes %v", server.Attributes)
	}
	if server.Resource["deployment.environment.name"] != "test" || server.Resource["ledger.roles"] != "api,relay" {
		t.Errorf("resource %v: want OTEL_RESOURCE_ATTRIBUTES and the roles", server.Resource)
	}
	wait := one("accept: wait for group commit", "ledger-api", "internal")
	childOf(wait, server)
	send := one("send "+prefix+".webhook", "ledger-api", "producer")
	childOf(send, server)
	if send.Attributes["messaging.system"] != "rabbitmq" || send.Attributes["messaging.operation.type"] != "send" ||
		send.Attributes["messaging.destination.name"] != prefix+".webhook" {
		t.Errorf("publish span attributes %v", send.Attributes)
	}
	process := one("process "+prefix+".webhook", "ledger-worker", "consumer")
	if process.ParentID != send.SpanID {
		t.Errorf("the consume's parent is %q, want the publish %q", process.ParentID, send.SpanID)
	}
	if process.Attributes["messaging.operation.type"] != "process" || process.Attributes["ledger.verdict"] != "ack" {
		t.Errorf("consume span attributes %v", process.Attributes)
	}
	attempt := one("attempt webhook", "ledger-worker", "internal")
	childOf(attempt, process)
	if attempt.Attributes["ledger.delivery.id"] != first || attempt.Attributes["ledger.attempt"] != "1" ||
		attempt.Attributes["ledger.provider"] != "webhook" || attempt.Attributes["ledger.outcome"] != "delivered" ||
		attempt.Attributes["ledger.state"] != "delivered" {
		t.Errorf("attempt span attributes %v", attempt.Attributes)
	}
	call := one("call webhook", "ledger-worker", "internal")
	childOf(call, attempt)
	client := one("POST", "ledger-worker", "client")
	childOf(client, call)
	if client.Attributes["http.response.status_code"] != "200" || client.Attributes["url.full"] != strings.TrimSuffix(sink.URL, "/") {
		t.Errorf("client span attributes %v (url.full must leave out the path)", client.Attributes)
	}
	if tp, _ := received.Load("/ok1"); tp != "00-"+callerTrace+"-"+client.SpanID+"-01" {
		t.Errorf("the provider got traceparent %v, want the client span's", tp)
	}
	record := one("record outcome", "ledger-worker", "internal")
	childOf(record, attempt)
	var statements int
	for _, s := range tr {
		if s.Attributes["db.system.name"] == "postgresql" {
			statements++
			if strings.Contains(s.Attributes["db.query.text"], sink.URL) {
				t.Errorf("a statement span holds an argument: %v", s.Attributes)
			}
		}
	}
	if statements < 3 {
		t.Errorf("%d database spans in the trace, want the accept's, the attempt start's and the outcome's", statements)
	}
	// (How a shared commit links to the requests it served: adapters/postgres
	// TestGroupCommitShowsInEveryCallersTrace.)

	// A retry continues the same trace: two attempts, the second consumed from the retry
	// message the first one's outcome wrote.
	const retryTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
	flaky := accept("trace-2", "/flaky", "00-"+retryTrace+"-00f067aa0ba902b8-01")
	b.waitState(t, flaky, domain.StateDelivered, 30*time.Second)
	// The relay's publish to the delay tier is exported by another process than the attempts,
	// in a batch of its own: wait for it too.
	spans = receiver.WaitFor(t, "two attempts and the retry's publish in the retried delivery's trace", 30*time.Second, func(all []otlptest.Span) bool {
		trace := filterTrace(all, retryTrace)
		sent := false
		for _, s := range trace {
			sent = sent || strings.HasPrefix(s.Name, "send ") && strings.Contains(s.Name, ".retry.")
		}
		return sent && len(byName(trace, "attempt webhook")) == 2 && len(byName(trace, "record outcome")) == 2
	})
	retried := filterTrace(spans, retryTrace)
	attempts := byName(retried, "attempt webhook")
	if attempts[0].Attributes["ledger.attempt"] == "2" {
		attempts[0], attempts[1] = attempts[1], attempts[0]
	}
	if attempts[0].Attributes["ledger.outcome"] != "transient" || attempts[0].Attributes["ledger.state"] != "retrying" ||
		attempts[1].Attributes["ledger.attempt"] != "2" || attempts[1].Attributes["ledger.outcome"] != "delivered" {
		t.Errorf("the retried delivery's attempts:\n%s", otlptest.Render(retried))
	}
	// The second attempt is a later hop: consumed under the delivery's root (the accept's span),
	// not under the first attempt's spans, which ended before the retry's delay; it links to
	// the outcome that scheduled it.
	retriedIDs := map[string]otlptest.Span{}
	for _, s := range retried {
		retriedIDs[s.SpanID] = s
	}
	retryRoot := byName(retried, "POST /v1/deliveries")
	secondProcess, ok := retriedIDs[attempts[1].ParentID]
	var firstOutcome otlptest.Span
	for _, s := range byName(retried, "record outcome") {
		if s.ParentID == attempts[0].SpanID {
			firstOutcome = s
		}
	}
	if len(retryRoot) != 1 || !ok || !strings.HasPrefix(secondProcess.Name, "process ") || secondProcess.ParentID != retryRoot[0].SpanID ||
		!hasSpanLink(secondProcess, firstOutcome.SpanID) {
		t.Errorf("the retry's consume is not a child of the accept's span linked to the first outcome %q:\n%s",
			firstOutcome.SpanID, otlptest.Render(retried))
	}
	// Its publish, the relay's send to a delay tier, links to that outcome as well.
	var retrySend *otlptest.Span
	for _, s := range retried {
		if strings.HasPrefix(s.Name, "send ") && strings.Contains(s.Name, ".retry.") {
			retrySend = &s
		}
	}
	if retrySend == nil || !hasSpanLink(*retrySend, firstOutcome.SpanID) {
		t.Errorf("the retry's publish does not link to the first outcome %q:\n%s", firstOutcome.SpanID, otlptest.Render(retried))
	}

	// A replay, days later in the operator's own trace, hands the delivery back to its trace.
	const deadTrace, operatorTrace = "6bf92f3577b34da6a3ce929d0e0e4738", "7bf92f3577b34da6a3ce929d0e0e4739"
	dead := accept("trace-3", "/gone", "00-"+deadTrace+"-00f067aa0ba902b9-01")
	b.waitState(t, dead, domain.StateDead, 30*time.Second)
	resp, out := b.doWith(t, "POST", "/v1/deliveries/"+dead+"/replay", "", map[string]any{"reason": "receiver fixed"},
		http.Header{"Traceparent": {"00-" + operatorTrace + "-00f067aa0ba902ba-01"}})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("replay: %d %s", resp.StatusCode, out)
	}
	b.waitState(t, dead, domain.StateDelivered, 30*time.Second)
	spans = receiver.WaitFor(t, "the replayed attempt in the delivery's trace", 30*time.Second, func(all []otlptest.Span) bool {
		return len(byName(filterTrace(all, deadTrace), "attempt webhook")) == 2 &&
			len(byName(filterTrace(all, operatorTrace), "POST /v1/deliveries/{id}/replay")) == 1
	})
	replayRequest := byName(filterTrace(spans, operatorTrace), "POST /v1/deliveries/{id}/replay")[0]
	if !hasLink(replayRequest, deadTrace) {
		t.Errorf("the operator's replay request does not link to the delivery's trace: %v", replayRequest.Links)
	}
	var replayedConsume bool
	deadRoot := byName(filterTrace(spans, deadTrace), "POST /v1/deliveries")
	for _, s := range filterTrace(spans, deadTrace) {
		if strings.HasPrefix(s.Name, "process ") && hasLink(s, operatorTrace) && len(deadRoot) == 1 && s.ParentID == deadRoot[0].SpanID {
			replayedConsume = true
		}
	}
	if !replayedConsume {
		t.Errorf("no consume in the delivery's trace links to the replay request:\n%s", otlptest.Render(filterTrace(spans, deadTrace)))
	}

	// The worker's log lines about the delivery meet its trace.
	line := regexp.MustCompile(`msg="attempt recorded".*delivery_id=` + first + `.*trace_id=` + callerTrace + ` span_id=` + attempt.SpanID)
	if !line.MatchString(worker.logText()) {
		t.Errorf("no worker log line with delivery_id, trace_id and span_id of the attempt; the log:\n%s", worker.logText())
	}
	// And every line of either process about a delivery (a retry, a dead one, a replay among
	// them) carries trace_id and span_id.
	for _, p := range []*ledgerProcess{api, worker} {
		for l := range strings.Lines(p.logText()) {
			if strings.Contains(l, "delivery_id=") && !traced.MatchString(l) {
				t.Errorf("a log line about a delivery without trace_id and span_id: %s", l)
			}
		}
	}
}

// traced matches a log line that carries a trace's ids.
var traced = regexp.MustCompile(`trace_id=[0-9a-f]{32} span_id=[0-9a-f]{16}`)

func filterTrace(spans []otlptest.Span, traceID string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func hasSpanLink(s otlptest.Span, spanID string) bool {
	for _, l := range s.Links {
		if l[1] == spanID {
			return true
		}
	}
	return false
}

func hasLink(s otlptest.Span, traceID string) bool {
	for _, l := range s.Links {
		if l[0] == traceID {
			return true
		}
	}
	return false
}

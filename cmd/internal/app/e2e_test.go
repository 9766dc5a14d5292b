package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/domain"
)

// e2eBundle is a whole ledger (API, relay, worker) over a test schema and a test prefix, with a
// local webhook receiver.
type e2eBundle struct {
	app    *App
	schema *pgtest.Schema
	cfg    Config
	sink   *sink
	base   string
	key    string
	// invalid marks the requests of do as breaking docs/openapi.yaml on purpose (see refusing).
	invalid bool
	// stop stops the app as SIGTERM would and waits for it (idempotent).
	stop func()
}

// refusing is b for requests that break docs/openapi.yaml on purpose, to see how the API refuses
// them: their answers are still checked against the description, the requests are not.
func (b *e2eBundle) refusing() *e2eBundle {
	c := *b
	c.invalid = true
	return &c
}

// sink is a local webhook receiver whose answers a test scripts.
type sink struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string][]time.Time // webhook-id → call times
	// respond answers a call (n is the call number for that delivery, from 1).
	respond  func(r *http.Request, n int) (int, http.Header)
	inFlight int
	maxIn    int
}

func newSink(t *testing.T) *sink {
	s := &sink{calls: map[string][]time.Time{}}
	s.respond = func(*http.Request, int) (int, http.Header) { return http.StatusOK, nil }
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("webhook-id")
		s.mu.Lock()
		s.calls[id] = append(s.calls[id], time.Now())
		n := len(s.calls[id])
		respond := s.respond
		s.inFlight++
		s.maxIn = max(s.maxIn, s.inFlight)
		s.mu.Unlock()
		status, header := respond(r, n)
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
		for k, vs := range header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s
}

// script replaces the sink's answers.
func (s *sink) script(f func(r *http.Request, n int) (int, http.Header)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.respond = f
}

func (s *sink) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls[id])
}

func (s *sink) times(id string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.calls[id]...)
}

func (s *sink) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		n += len(c)
	}
	return n
}

func (s *sink) maxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn
}

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("LEDGER_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// testConfig is a configuration over a fresh schema and prefix, with millisecond retry policies.
func testConfig(t *testing.T, schema *pgtest.Schema) Config {
	cfg := DefaultConfig()
	cfg.DatabaseURL = schema.URL
	cfg.AMQPURL = amqptest.URL()
	cfg.AMQPPrefix = amqptest.Prefix()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.APIKeys = "acme:acme-key,globex:globex-key"
	cfg.WebhookAllowCIDRs = "127.0.0.0/8"
	cfg.WebhookTimeout = 2 * time.Second
	cfg.WorkerConcurrency = 4
	cfg.RetryBase = 20 * time.Millisecond
	cfg.RetryCap = 80 * time.Millisecond
	cfg.MaxAttempts = 3
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.LogLevel = "warn"
	cfg.AMQPQueueType = testQueueType()
	return cfg
}

// testQueueType is the queue type the suite runs on: LEDGER_TEST_AMQP_QUEUE_TYPE (make test runs
// the end-to-end tests once more with quorum), classic by default.
func testQueueType() string {
	if qt := os.Getenv("LEDGER_TEST_AMQP_QUEUE_TYPE"); qt != "" {
		return qt
	}
	return amqp.QueueClassic
}

// setupE2E starts a ledger with millisecond retry policies. roles defaults to all.
func setupE2E(t *testing.T, roles string, adjust ...func(*Config)) *e2eBundle {
	t.Helper()
	schema := pgtest.New(t)
	cfg := testConfig(t, schema)
	if roles != "" {
		cfg.Roles = roles
	}
	for _, f := range adjust {
		f(&cfg)
	}
	return startApp(t, schema, cfg)
}

// startApp runs an App for cfg until the test ends.
func startApp(t *testing.T, schema *pgtest.Schema, cfg Config, options ...Option) *e2eBundle {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	app, err := Build(ctx, cfg, testLogger(), options...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// buildApp declared the topology; remove it when the test ends (from the real test broker,
	// also when the test pointed the app at an unreachable one).
	t.Cleanup(func() {
		conn, err := amqp091.Dial(amqptest.URL())
		if err != nil {
			t.Errorf("clean up: %v", err)
			return
		}
		defer conn.Close()
		if err := app.topology.Delete(conn); err != nil {
			t.Errorf("clean up topology: %v", err)
		}
	})
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("app stopped with: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("app did not stop")
			}
		})
	}
	t.Cleanup(stop)
	b := &e2eBundle{app: app, schema: schema, cfg: cfg, sink: newSink(t), key: "acme-key", stop: stop}
	if app.Addr() != "" {
		b.base = "http://" + app.Addr()
	}
	return b
}

// do sends a request to the API with the bundle's key; the request and the answer are checked
// against docs/openapi.yaml (openapitest), the request unless the bundle is refusing.
func (b *e2eBundle) do(t *testing.T, method, path, idemKey string, body any) (*http.Response, []byte) {
	t.Helper()
	return b.doWith(t, method, path, idemKey, body, nil)
}

// doWith is do with more request headers.
func (b *e2eBundle) doWith(t *testing.T, method, path, idemKey string, body any, header http.Header) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	ctx := context.Background()
	if b.invalid {
		ctx = openapitest.Invalid(ctx)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+b.key)
	req.Header.Set("Content-Type", "application/json")
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := openapitest.Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

type acceptAnswer struct {
	ID         string `json:"id"`
	Deliveries []struct {
		ID string `json:"id"`
	} `json:"deliveries"`
}

func (b *e2eBundle) notify(t *testing.T, key string, recipients ...string) acceptAnswer {
	t.Helper()
	var rs []map[string]string
	for _, r := range recipients {
		rs = append(rs, map[string]string{"channel": "webhook", "recipient": r})
	}
	return b.acceptNotification(t, key, map[string]any{"payload": map[string]any{"text": "hello"}, "recipients": rs})
}

// acceptNotification posts a notification under key and returns the answer, failing the test
// unless it is accepted with one delivery per recipient, in their order.
func (b *e2eBundle) acceptNotification(t *testing.T, key string, notification map[string]any) acceptAnswer {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/notifications", key, notification)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %d %s", resp.StatusCode, body)
	}
	var a acceptAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("accept answer %s: %v", body, err)
	}
	if recipients, _ := notification["recipients"].([]map[string]string); len(a.Deliveries) != len(recipients) {
		t.Fatalf("accept answered %d deliveries for %d recipients: %s", len(a.Deliveries), len(recipients), body)
	}
	return a
}

type statusAnswer struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
}

// waitState polls the status endpoint until the delivery is in state, or fails.
func (b *e2eBundle) waitState(t *testing.T, id string, state domain.State, within time.Duration) statusAnswer {
	t.Helper()
	deadline := time.Now().Add(within)
	var last statusAnswer
	for time.Now().Before(deadline) {
		resp, body := b.do(t, "GET", "/v1/deliveries/"+id, "", nil)
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, &last); err != nil {
				t.Fatal(err)
			}
			if last.State == string(state) {
				return last
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("delivery %s is %q after %s, want %s; history: %s", id, last.State, within, state, b.historyString(t, id))
	return last
}

type historyEvent struct {
	Version    int             `json:"version"`
	Type       string          `json:"type"`
	State      string          `json:"state"`
	RecordedAt time.Time       `json:"recorded_at"`
	Data       json.RawMessage `json:"data"`
}

func (b *e2eBundle) history(t *testing.T, id string) []historyEvent {
	t.Helper()
	resp, body := b.do(t, "GET", "/v1/deliveries/"+id+"/events", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %d %s", resp.StatusCode, body)
	}
	var h struct {
		Events []historyEvent `json:"events"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	return h.Events
}

func (b *e2eBundle) historyString(t *testing.T, id string) string {
	var parts []string
	for _, e := range b.history(t, id) {
		parts = append(parts, fmt.Sprintf("%d:%s→%s", e.Version, e.Type, e.State))
	}
	return strings.Join(parts, " ")
}

func states(events []historyEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.State)
	}
	return out
}

func TestEndToEndAcceptToDelivered(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	assertQueueType(t, b)
	start := time.Now()
	a := b.notify(t, "e2e-1", b.sink.URL+"/hook")
	id := a.Deliveries[0].ID
	b.waitState(t, id, domain.StateDelivered, 20*time.Second)
	t.Logf("accept → delivered observed in %s", time.Since(start))

	events := b.history(t, id)
	want := []string{"accepted", "queued", "processing", "delivered"}
	if got := states(events); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("history states %v, want %v", got, want)
	}
	for i, e := range events {
		if e.Version != i+1 {
			t.Fatalf("event %d has version %d: versions must be consecutive", i, e.Version)
		}
	}
	var delivered domain.AttemptResult
	if err := json.Unmarshal(events[3].Data, &delivered); err != nil {
		t.Fatal(err)
	}
	if delivered.Attempt != 1 || delivered.StatusCode != 200 || delivered.Provider != "webhook" {
		t.Fatalf("delivered event data: %+v", delivered)
	}
	if n := b.sink.count(id); n != 1 {
		t.Fatalf("webhook called %d times, want 1", n)
	}
}

func TestEndToEndFanOutDeliversEachOnce(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	a := b.notify(t, "fan-1", b.sink.URL+"/a", b.sink.URL+"/b", b.sink.URL+"/c")
	seen := map[string]bool{}
	for _, d := range a.Deliveries {
		if seen[d.ID] {
			t.Fatalf("delivery id %s repeated", d.ID)
		}
		seen[d.ID] = true
		b.waitState(t, d.ID, domain.StateDelivered, 20*time.Second)
	}
	for _, d := range a.Deliveries {
		if n := b.sink.count(d.ID); n != 1 {
			t.Fatalf("delivery %s: webhook called %d times, want 1", d.ID, n)
		}
		if got := states(b.history(t, d.ID)); len(got) != 4 {
			t.Fatalf("delivery %s history %v", d.ID, got)
		}
	}
}

// TestDuplicateAMQPMessageCallsWebhookOnce publishes the same work message twice, as a relay
// that crashed between the broker's confirm and its outbox ack would.
// TestEndToEndRecipientRepeatedInNormalFormIsRefused: a notification naming one webhook URL in
// two spellings (issue 25: the sink used to get a POST for each) is refused 400 by the wired
// ledger and nothing is recorded; a notification accepted after it is the only call the sink
// ever gets, so nothing of the refused one was queued behind it.
func TestEndToEndRecipientRepeatedInNormalFormIsRefused(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	u, err := url.Parse(b.sink.URL)
	if err != nil {
		t.Fatal(err)
	}
	hook := "http://" + u.Host + "/hook"
	again := "HTTP://" + u.Host + "/hook#f"
	resp, body := b.do(t, "POST", "/v1/notifications", "normal-1", map[string]any{"payload": map[string]any{"text": "hello"},
		"recipients": []map[string]string{{"channel": "webhook", "recipient": hook}, {"channel": "webhook", "recipient": again}}})
	var problem struct {
		Field  string `json:"field"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(body, &problem); err != nil {
		t.Fatalf("answer %d %s: %v", resp.StatusCode, body, err)
	}
	if resp.StatusCode != http.StatusBadRequest || problem.Field != "recipients[1]" || !strings.Contains(problem.Detail, "recipients[0]") {
		t.Fatalf("answer %d %s, want 400 naming recipients[1] as a repeat of recipients[0]", resp.StatusCode, body)
	}
	var events int
	if err := b.schema.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 0 {
		t.Fatalf("%d events after the refused notification, want 0", events)
	}

	a := b.notify(t, "normal-2", b.sink.URL+"/after")
	b.waitState(t, a.Deliveries[0].ID, domain.StateDelivered, 20*time.Second)
	if n := b.sink.total(); n != 1 {
		t.Fatalf("sink got %d calls, want 1 (the later notification's)", n)
	}
}

func TestDuplicateAMQPMessageCallsWebhookOnce(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "api,worker") // no relay: the test is the relay
	a := b.notify(t, "dup-1", b.sink.URL+"/hook")
	id := a.Deliveries[0].ID

	var envelope struct {
		DestinationTopic string            `json:"destination_topic"`
		UUID             string            `json:"uuid"`
		Payload          []byte            `json:"payload"`
		Metadata         map[string]string `json:"metadata"`
	}
	var raw []byte
	if err := b.schema.Pool.QueryRow(context.Background(), `SELECT payload::text FROM ledger_outbox_all`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &envelope); err != nil {
		t.Fatal(err)
	}
	conn := amqptest.Dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		pub := amqp091.Publishing{Body: envelope.Payload, DeliveryMode: amqp091.Persistent, MessageId: envelope.UUID, ContentType: "application/json"}
		conf, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", envelope.DestinationTopic, true, false, pub)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := conf.WaitContext(context.Background()); err != nil || !ok {
			t.Fatalf("confirm: %v %v", ok, err)
		}
	}
	b.waitState(t, id, domain.StateDelivered, 20*time.Second)
	// Both copies are consumed; wait until the queue is empty and nothing is in flight.
	deadline := time.Now().Add(10 * time.Second)
	for amqptest.QueueDepth(t, conn, envelope.DestinationTopic) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := b.sink.count(id); n != 1 {
		t.Fatalf("webhook called %d times for a duplicated message, want 1", n)
	}
	if got := states(b.history(t, id)); strings.Join(got, ",") != "accepted,queued,processing,delivered" {
		t.Fatalf("history %v", got)
	}
}

// TestAPIAcceptsWhileTheBrokerIsDown: the api role needs only PostgreSQL; a 202 while RabbitMQ is
// unreachable is safe because the work waits in the outbox.
func TestAPIAcceptsWhileTheBrokerIsDown(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	cfg := testConfig(t, schema)
	cfg.Roles = "api"
	cfg.AMQPURL = "amqp://guest:guest@127.0.0.1:1/" // nothing listens there
	b := startApp(t, schema, cfg)
	a := b.notify(t, "broker-down-1", b.sink.URL+"/hook")
	var n int
	if err := schema.Pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_outbox_all`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || len(a.Deliveries) != 1 {
		t.Fatalf("%d outbox rows for %d deliveries, want 1 and 1", n, len(a.Deliveries))
	}
}

// TestRelayAndWorkersWaitForTheBrokerAtStart: a ledger with the relay and worker roles started
// while RabbitMQ cannot be reached waits for it, declares its queues once it answers, and then
// delivers; it gives up only when it is stopped.
func TestRelayAndWorkersWaitForTheBrokerAtStart(t *testing.T) {
	t.Parallel()
	broker, err := url.Parse(amqptest.URL())
	if err != nil {
		t.Fatal(err)
	}
	// A port where nothing listens yet; later a forwarder to the real broker takes it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	schema := pgtest.New(t)
	cfg := testConfig(t, schema)
	cfg.AMQPURL = "amqp://guest:guest@" + addr + "/"

	// Stopped while it waits: it gives up with the reason.
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	_, err = Build(ctx, cfg, testLogger())
	cancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("buildApp stopped while the broker is unreachable: %v, want the deadline", err)
	}

	// The broker comes back a second after the start.
	const outage = time.Second
	go func() {
		time.Sleep(outage)
		forward, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen on %s: %v", addr, err)
			return
		}
		t.Cleanup(func() { forward.Close() })
		for {
			c, err := forward.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", broker.Host)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	start := time.Now()
	b := startApp(t, schema, cfg)
	if waited := time.Since(start); waited < outage {
		t.Fatalf("started after %s, before the broker was reachable", waited)
	}
	id := b.accept(t, "broker-late-1", b.sink.URL+"/hook", domain.PriorityNormal)
	b.waitState(t, id, domain.StateDelivered, 20*time.Second)
}

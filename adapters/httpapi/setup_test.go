package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// Bearer keys of the two tenants every test server knows.
const (
	keyAcme   = "key-acme-0123456789"
	keyGlobex = "key-globex-0123456789"
)

// serverMaxAttempts is the accept handler's default and maximum number of attempts.
const serverMaxAttempts = 10

// serverPolicies gives every channel the default retry policy with serverMaxAttempts.
func serverPolicies(string) domain.RetryPolicy {
	p := domain.DefaultRetryPolicy()
	p.MaxAttempts = serverMaxAttempts
	return p
}

// recipientCheck turns a recipient validator into a channel's acceptance check.
func recipientCheck(validate func(string) error) commands.Check {
	return func(recipient string, _ json.RawMessage) error { return validate(recipient) }
}

// bundle is one test's API server on its own database schema.
type bundle struct {
	schema *pgtest.Schema
	store  *postgres.EventStore
	url    string
	// client sends the requests of do and send, and checks each request and answer against
	// docs/openapi.yaml (openapitest.Transport, reporting to the test that called setup). Use it
	// for any request to url.
	client *http.Client
	// invalid marks every request sent as breaking the description on purpose (see refusing).
	invalid bool
	// handler is the API itself, for tests that call it without a socket (the fuzz targets);
	// wrap it with openapitest.Wrap in the test that calls it.
	handler http.Handler
}

// option adjusts the configuration or dependencies of a test server.
type option func(cfg *httpapi.Config, deps *httpapi.Deps)

func setup(t testing.TB, opts ...option) *bundle {
	t.Helper()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	topics := amqp.Topology{Prefix: "test", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	cfg := httpapi.Config{
		APIKeys:  map[string]string{keyAcme: "acme", keyGlobex: "globex"},
		Channels: map[string]commands.Check{"webhook": webhook.Check},
	}
	replay := commands.NewReplayHandler(store, topics, commands.SystemClock{})
	replay.Requests = store
	deps := httpapi.Deps{
		Accept:           commands.NewAcceptHandler(store, topics, commands.SystemClock{}, serverPolicies),
		Events:           store,
		Requests:         store,
		OperatorRequests: store,
		Views:            postgres.NewViews(schema.Pool),
		Replay:           replay,
		Reconcile: commands.NewReconcileHandler(store, topics, commands.SystemClock{},
			func(string) domain.RetryPolicy { return domain.DefaultRetryPolicy() }),
	}
	for _, opt := range opts {
		opt(&cfg, &deps)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	handler, err := httpapi.New(cfg, deps, logger)
	if err != nil {
		t.Fatalf("new api: %v", err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close) // runs before the schema is dropped: cleanups run last-in first-out
	return &bundle{schema: schema, store: store, url: srv.URL, client: openapitest.Client(t), handler: handler}
}

// refusing is b for requests that break docs/openapi.yaml on purpose, to see how the API refuses
// them (a missing header, a malformed body, an unknown parameter): their answers are still
// checked against the description, the requests are not (openapitest.Invalid).
func (b *bundle) refusing() *bundle {
	c := *b
	c.invalid = true
	return &c
}

// req is one HTTP request of a test. Zero fields are left out of the request.
type req struct {
	method, path string
	apiKey       string
	idemKey      string
	contentType  string
	body         string
}

// resp is an answer, read whole.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (b *bundle) do(t *testing.T, rq req) resp {
	t.Helper()
	return b.doCtx(context.Background(), t, rq)
}

func (b *bundle) doCtx(ctx context.Context, t *testing.T, rq req) resp {
	t.Helper()
	r, err := b.send(ctx, rq)
	if err != nil {
		t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	return r
}

// send performs rq; it does not touch t, so goroutines may call it.
func (b *bundle) send(ctx context.Context, rq req) (resp, error) {
	if b.invalid {
		ctx = openapitest.Invalid(ctx)
	}
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	hr, err := http.NewRequestWithContext(ctx, rq.method, b.url+rq.path, body)
	if err != nil {
		return resp{}, err
	}
	if rq.apiKey != "" {
		hr.Header.Set("Authorization", "Bearer "+rq.apiKey)
	}
	if rq.idemKey != "" {
		hr.Header.Set("Idempotency-Key", rq.idemKey)
	}
	if rq.contentType != "" {
		hr.Header.Set("Content-Type", rq.contentType)
	}
	res, err := b.client.Do(hr)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return resp{}, err
	}
	return resp{status: res.StatusCode, header: res.Header, body: data}, nil
}

// post sends an accept request as tenant acme with a JSON content type.
func (b *bundle) post(t *testing.T, path, idemKey, body string) resp {
	t.Helper()
	return b.do(t, req{method: http.MethodPost, path: path, apiKey: keyAcme, idemKey: idemKey,
		contentType: "application/json", body: body})
}

// get sends a GET as the tenant of apiKey.
func (b *bundle) get(t *testing.T, path, apiKey string) resp {
	t.Helper()
	return b.do(t, req{method: http.MethodGet, path: path, apiKey: apiKey})
}

// expect fails the test unless the answer has the status, and decodes a JSON body into v.
func (r resp) expect(t *testing.T, status int, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if v == nil {
		return
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q, want application/json", ct)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// problemDoc is an RFC 9457 problem detail as the API writes it.
type problemDoc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field"`
}

// expectProblem fails the test unless the answer is a problem+json with the status and field.
func (r resp) expectProblem(t *testing.T, status int, field string) problemDoc {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json; body %s", ct, r.body)
	}
	var p problemDoc
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("decode problem %s: %v", r.body, err)
	}
	if p.Status != status || p.Type == "" || p.Title != http.StatusText(status) || p.Detail == "" {
		t.Fatalf("problem %+v: want status %d, a type, title %q and a detail", p, status, http.StatusText(status))
	}
	if p.Field != field {
		t.Fatalf("problem field %q, want %q (detail %q)", p.Field, field, p.Detail)
	}
	return p
}

// count runs a count(*) query on the test's schema.
func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.schema.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Answers of the accept endpoints, as a client decodes them.
type (
	deliveryAccepted struct {
		ID             string    `json:"id"`
		NotificationID string    `json:"notification_id"`
		State          string    `json:"state"`
		Channel        string    `json:"channel"`
		Recipient      string    `json:"recipient"`
		AcceptedAt     time.Time `json:"accepted_at"`
	}
	notificationAccepted struct {
		ID         string `json:"id"`
		Deliveries []struct {
			ID        string `json:"id"`
			Channel   string `json:"channel"`
			Recipient string `json:"recipient"`
			State     string `json:"state"`
		} `json:"deliveries"`
		AcceptedAt time.Time `json:"accepted_at"`
	}
)

// deliveryBody is a valid POST /v1/deliveries body for recipient.
func deliveryBody(recipient string) string {
	return `{"channel":"webhook","recipient":"` + recipient + `","payload":{"order":42}}`
}

// notificationBody is a valid POST /v1/notifications body for the recipients' webhook URLs.
func notificationBody(recipients ...string) string {
	parts := make([]string, len(recipients))
	for i, r := range recipients {
		parts[i] = `{"channel":"webhook","recipient":"` + r + `"}`
	}
	return `{"payload":{"order":42},"recipients":[` + strings.Join(parts, ",") + `]}`
}

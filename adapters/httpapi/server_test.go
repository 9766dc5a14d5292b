package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/commands"
)

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := deliveryBody("https://example.com/auth")
	tests := []struct {
		name          string
		authorization string
	}{
		{"missing", ""},
		{"wrong key", "Bearer not-a-key"},
		{"other scheme", "Basic " + keyAcme},
		{"no key", "Bearer "},
		{"key without scheme", keyAcme},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, rq := range []struct{ method, path, body string }{
				{http.MethodPost, "/v1/deliveries", body},
				{http.MethodPost, "/v1/notifications", notificationBody("https://example.com/auth")},
				{http.MethodGet, "/v1/deliveries/" + uuid.Must(uuid.NewV7()).String(), ""},
				{http.MethodGet, "/v1/deliveries/" + uuid.Must(uuid.NewV7()).String() + "/events", ""},
			} {
				hr, err := http.NewRequest(rq.method, b.url+rq.path, strings.NewReader(rq.body))
				if err != nil {
					t.Fatal(err)
				}
				if tt.authorization != "" {
					hr.Header.Set("Authorization", tt.authorization)
				}
				hr.Header.Set("Idempotency-Key", "auth-1")
				hr.Header.Set("Content-Type", "application/json")
				res, err := b.client.Do(hr.WithContext(openapitest.Invalid(hr.Context())))
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusUnauthorized {
					t.Fatalf("%s %s: status %d, want 401", rq.method, rq.path, res.StatusCode)
				}
				if h := res.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
					t.Fatalf("%s %s: WWW-Authenticate %q, want Bearer", rq.method, rq.path, h)
				}
				if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("%s %s: content type %q", rq.method, rq.path, ct)
				}
			}
		})
	}
	b.do(t, req{method: http.MethodPost, path: "/v1/deliveries", apiKey: "nope", idemKey: "auth-2",
		contentType: "application/json", body: body}).expectProblem(t, http.StatusUnauthorized, "Authorization")
	if n := b.count(t, `SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("%d events written by unauthenticated requests", n)
	}
	// The scheme is case-insensitive (RFC 9110 section 11.1).
	r := b.refusing().do(t, req{method: http.MethodGet, path: "/v1/deliveries/" + uuid.Must(uuid.NewV7()).String()})
	r.expectProblem(t, http.StatusUnauthorized, "Authorization")
	hr, _ := http.NewRequest(http.MethodGet, b.url+"/v1/deliveries/"+uuid.Must(uuid.NewV7()).String(), nil)
	hr.Header.Set("Authorization", "bearer "+keyAcme)
	res, err := b.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("lower-case bearer scheme: status %d, want 404 (authenticated, unknown id)", res.StatusCode)
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/", "/v1", "/v1/nope", "/v1/deliveries/", "/v2/deliveries"} {
		b.get(t, path, keyAcme).expectProblem(t, http.StatusNotFound, "")
	}
	tests := []struct{ method, path, allow string }{
		{http.MethodDelete, "/v1/deliveries", "GET, HEAD, POST"},
		{http.MethodPost, "/v1/dlq", "GET, HEAD"},
		{http.MethodPut, "/v1/notifications", "POST"},
		{http.MethodDelete, "/v1/deliveries/" + uuid.Must(uuid.NewV7()).String(), "GET, HEAD"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
	}
	for _, tt := range tests {
		r := b.do(t, req{method: tt.method, path: tt.path, apiKey: keyAcme})
		r.expectProblem(t, http.StatusMethodNotAllowed, "")
		if got := r.header.Get("Allow"); got != tt.allow {
			t.Fatalf("%s %s: Allow %q, want %q", tt.method, tt.path, got, tt.allow)
		}
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	var brokerDown atomic.Bool
	b := setup(t, func(_ *httpapi.Config, deps *httpapi.Deps) {
		ping := deps.Events.(*postgres.EventStore).Ping
		deps.Ready = func(ctx context.Context) error {
			if err := ping(ctx); err != nil {
				return err
			}
			if brokerDown.Load() {
				return errors.New("broker: dial tcp 127.0.0.1:5672 as guest: connection refused")
			}
			return nil
		}
	})
	var body struct{ Status string }
	b.get(t, "/healthz", "").expect(t, http.StatusOK, &body)
	if body.Status != "ok" {
		t.Fatalf("healthz status %q", body.Status)
	}
	b.get(t, "/readyz", "").expect(t, http.StatusOK, &body)
	if body.Status != "ok" {
		t.Fatalf("readyz status %q", body.Status)
	}

	brokerDown.Store(true)
	// The answer is fixed: the driver's error, with its host, port and user, goes to the log only.
	p := b.get(t, "/readyz", "").expectProblem(t, http.StatusServiceUnavailable, "")
	for _, secret := range []string{"5672", "guest", "connection refused", "127.0.0.1"} {
		if strings.Contains(p.Detail, secret) {
			t.Fatalf("readyz detail %q echoes the cause (%q) to an unauthenticated caller", p.Detail, secret)
		}
	}
	// Liveness does not depend on the dependencies.
	b.get(t, "/healthz", "").expect(t, http.StatusOK, nil)
}

func TestReadyWithoutCheck(t *testing.T) {
	t.Parallel()
	b := setup(t) // Deps.Ready is nil: always ready
	b.get(t, "/readyz", "").expect(t, http.StatusOK, nil)
}

func TestPanicInHandlerIsA500(t *testing.T) {
	t.Parallel()
	b := setup(t, func(cfg *httpapi.Config, _ *httpapi.Deps) {
		cfg.Channels["boom"] = recipientCheck(func(string) error { panic("validator bug") })
	})
	p := b.post(t, "/v1/deliveries", "panic-1", `{"channel":"boom","recipient":"x","payload":{}}`).
		expectProblem(t, http.StatusInternalServerError, "")
	if strings.Contains(p.Detail, "validator bug") {
		t.Fatalf("500 detail leaks the panic: %q", p.Detail)
	}
	// The server goes on.
	b.post(t, "/v1/deliveries", "panic-2", deliveryBody("https://example.com/after")).expect(t, http.StatusAccepted, nil)
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	valid := httpapi.Config{Channels: map[string]commands.Check{"webhook": webhook.Check}}
	deps := httpapi.Deps{Accept: &commands.AcceptHandler{}, Events: &postgres.EventStore{}}
	if _, err := httpapi.New(valid, deps, nil); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	tests := []struct {
		name string
		cfg  httpapi.Config
		deps httpapi.Deps
	}{
		{"no channels", httpapi.Config{}, deps},
		{"nil validator", httpapi.Config{Channels: map[string]commands.Check{"webhook": nil}}, deps},
		{"negative body limit", httpapi.Config{Channels: valid.Channels, MaxBodyBytes: -1}, deps},
		{"empty tenant", httpapi.Config{Channels: valid.Channels, APIKeys: map[string]string{"k": ""}}, deps},
		{"no accept handler", valid, httpapi.Deps{Events: deps.Events}},
		{"no event store", valid, httpapi.Deps{Accept: deps.Accept}},
	}
	for _, tt := range tests {
		if _, err := httpapi.New(tt.cfg, tt.deps, nil); err == nil {
			t.Errorf("%s: New accepted it", tt.name)
		}
	}
}

func TestParseAPIKeys(t *testing.T) {
	t.Parallel()
	got, err := httpapi.ParseAPIKeys(" acme:k1 , globex:k2,acme:k3,odd:with:colon")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"k1": "acme", "k2": "globex", "k3": "acme", "with:colon": "odd"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("key %q: tenant %q, want %q", k, got[k], v)
		}
	}
	if got, err := httpapi.ParseAPIKeys(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v; want an empty map", got, err)
	}
	for _, bad := range []string{"acme", "acme:", ":k1", "acme:k1,", "acme:k1,,globex:k2", "acme:k1,globex:k1"} {
		if _, err := httpapi.ParseAPIKeys(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	// A duplicate key's error must not print the key, a secret.
	if _, err := httpapi.ParseAPIKeys("acme:s3cret,globex:s3cret"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("duplicate key error %v: want an error that does not reveal the key", err)
	}
}

package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/adapters/providers/email"
	"github.com/deliveryledger/ledger/adapters/unsubscribe"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// unsubscribeSecret signs the tokens of these tests' servers.
var unsubscribeSecret = []byte("unsubscribe-secret-0123456789abcdef")

// unsubscribeBundle is an API server with the one-click unsubscribe routes, over the test's
// schema, and the preferences store it records into.
type unsubscribeBundle struct {
	*bundle
	prefs *postgres.SuppressionStore
}

// setupUnsubscribe starts the API with an email channel, the categories marketing and account
// (required), and the given unsubscribe secret (nil: none).
func setupUnsubscribe(t *testing.T, secret []byte) *unsubscribeBundle {
	t.Helper()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	prefs := postgres.NewSuppressionStore(schema.Pool)
	relay, err := email.New(email.Config{Provider: "smtp", Host: "127.0.0.1", Port: 25, TLS: email.TLSNone, From: "noreply@ledger.test"})
	if err != nil {
		t.Fatal(err)
	}
	channels, err := commands.NewChannels(commands.Channel{Name: email.Name, Providers: []commands.Sender{relay}, Check: email.Check})
	if err != nil {
		t.Fatal(err)
	}
	categories := commands.Categories{"marketing": {}, "account": {Required: true}}
	cfg := httpapi.Config{APIKeys: map[string]string{keyAcme: "acme"}, Channels: channels.Checks(), UnsubscribeSecret: secret}
	deps := httpapi.Deps{Accept: &commands.AcceptHandler{}, Events: store,
		Suppressions: commands.NewSuppressions(prefs, channels, categories, commands.SystemClock{})}
	handler, err := httpapi.New(cfg, deps, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &unsubscribeBundle{bundle: &bundle{schema: schema, store: store, url: srv.URL, client: openapitest.Client(t), handler: handler},
		prefs: prefs}
}

// tokenFor signs a token of tenant acme's email recipient ann@example.com for category.
func tokenFor(secret []byte, category string) string {
	return unsubscribe.Sign(secret, unsubscribe.Token{Tenant: "acme", Channel: email.Name, Recipient: "ann@example.com", Category: category})
}

// oneClick posts the RFC 8058 body to a token's URL.
func (b *unsubscribeBundle) oneClick(t *testing.T, token string) resp {
	t.Helper()
	return b.do(t, req{method: http.MethodPost, path: "/u/" + token, contentType: "application/x-www-form-urlencoded",
		body: "List-Unsubscribe=One-Click"})
}

// preferences returns what the store holds for ann@example.com.
func (b *unsubscribeBundle) preferences(t *testing.T) []domain.Preference {
	t.Helper()
	prefs, err := b.prefs.Preferences(t.Context(), "acme", email.Name, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	return prefs
}

// TestUnsubscribePageRecordsNothing: GET /u/{token} answers the confirmation page (the category,
// the recipient masked, a form that posts the one-click body to the same URL) with the console's
// security headers, and records nothing, however many times a mail scanner fetches it.
func TestUnsubscribePageRecordsNothing(t *testing.T) {
	t.Parallel()
	b := setupUnsubscribe(t, unsubscribeSecret)
	token := tokenFor(unsubscribeSecret, "marketing")
	for range 3 {
		r := b.do(t, req{method: http.MethodGet, path: "/u/" + token})
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("GET: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
		}
		page := string(r.body)
		for _, want := range []string{"marketing", "a***@example.com", `<form method="post">`,
			`name="List-Unsubscribe" value="One-Click"`} {
			if !strings.Contains(page, want) {
				t.Errorf("the page does not say %q:\n%s", want, page)
			}
		}
		if strings.Contains(page, "ann@") {
			t.Errorf("the page shows the whole recipient:\n%s", page)
		}
		for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy", "Cache-Control"} {
			if r.header.Get(h) == "" {
				t.Errorf("the page has no %s header", h)
			}
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("Content-Security-Policy %q: want default-src 'none' and nothing unsafe", csp)
		}
	}
	if prefs := b.preferences(t); len(prefs) != 0 {
		t.Fatalf("GET recorded %+v", prefs)
	}
}

// TestOneClickRecordsTheOptOut: the one-click POST, urlencoded or multipart, records the
// recipient's opt-out of the token's category with source unsubscribe and answers 200; a repeat
// answers the same and changes nothing.
func TestOneClickRecordsTheOptOut(t *testing.T) {
	t.Parallel()
	b := setupUnsubscribe(t, unsubscribeSecret)
	token := tokenFor(unsubscribeSecret, "marketing")
	for range 2 {
		if r := b.oneClick(t, token); r.status != http.StatusOK || !strings.Contains(string(r.body), "unsubscribed") {
			t.Fatalf("one-click: %d %s", r.status, r.body)
		}
	}
	prefs := b.preferences(t)
	if len(prefs) != 1 || prefs[0].Category != "marketing" || !prefs[0].OptedOut || prefs[0].Source != domain.PreferenceByUnsubscribe {
		t.Fatalf("preferences %+v, want one opt-out of marketing by unsubscribe", prefs)
	}

	// Multipart, as RFC 8058 permits, for another recipient.
	other := unsubscribe.Sign(unsubscribeSecret, unsubscribe.Token{Tenant: "acme", Channel: email.Name, Recipient: "bob@example.com", Category: "marketing"})
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if err := mw.WriteField("List-Unsubscribe", "One-Click"); err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	if r := b.do(t, req{method: http.MethodPost, path: "/u/" + other, contentType: mw.FormDataContentType(), body: body.String()}); r.status != http.StatusOK {
		t.Fatalf("multipart one-click: %d %s", r.status, r.body)
	}
	bob, err := b.prefs.Preferences(t.Context(), "acme", email.Name, "bob@example.com")
	if err != nil || len(bob) != 1 || !bob[0].OptedOut {
		t.Fatalf("bob's preferences %+v, %v; want his opt-out", bob, err)
	}
}

// TestOneClickRefusalsRecordNothing: a forged or altered token is 403, a token signed under
// another secret too; a POST without the one-click body is 400 naming List-Unsubscribe; a token
// of a required or undeclared category is 400 naming token, on GET and POST. None records anything.
func TestOneClickRefusalsRecordNothing(t *testing.T) {
	t.Parallel()
	b := setupUnsubscribe(t, unsubscribeSecret)
	token := tokenFor(unsubscribeSecret, "marketing")
	altered := []byte(token)
	altered[3] = map[bool]byte{true: 'x', false: 'y'}[token[3] != 'x'] // still base64url
	problem := func(r resp, status int, field string) {
		t.Helper()
		var p struct {
			Field string `json:"field"`
		}
		if r.status != status || r.header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(r.body, &p) != nil || p.Field != field {
			t.Errorf("%d %s %s, want %d naming %s", r.status, r.header.Get("Content-Type"), r.body, status, field)
		}
	}
	for _, forged := range []string{string(altered), tokenFor([]byte("another-secret-0123456789abcdefgh"), "marketing")} {
		problem(b.oneClick(t, forged), http.StatusForbidden, "token")
		problem(b.do(t, req{method: http.MethodGet, path: "/u/" + forged}), http.StatusForbidden, "token")
	}
	for _, rq := range []req{
		{method: http.MethodPost, path: "/u/" + token},
		{method: http.MethodPost, path: "/u/" + token, contentType: "application/x-www-form-urlencoded", body: "List-Unsubscribe=Yes"},
		{method: http.MethodPost, path: "/u/" + token, contentType: "application/x-www-form-urlencoded", body: "unsubscribe=One-Click"},
		{method: http.MethodPost, path: "/u/" + token, contentType: "application/json", body: `{"List-Unsubscribe":"One-Click"}`},
	} {
		problem(b.refusing().do(t, rq), http.StatusBadRequest, "List-Unsubscribe")
	}
	for _, category := range []string{"account", "newsletter"} {
		problem(b.oneClick(t, tokenFor(unsubscribeSecret, category)), http.StatusBadRequest, "token")
		problem(b.do(t, req{method: http.MethodGet, path: "/u/" + tokenFor(unsubscribeSecret, category)}), http.StatusBadRequest, "token")
	}
	if prefs := b.preferences(t); len(prefs) != 0 {
		t.Fatalf("refused requests recorded %+v", prefs)
	}
}

// TestUnsubscribeRoutesNeedTheSecret: without LEDGER_UNSUBSCRIBE_SECRET the /u/ routes do not
// exist: 404, whatever the token.
func TestUnsubscribeRoutesNeedTheSecret(t *testing.T) {
	t.Parallel()
	b := setupUnsubscribe(t, nil)
	token := tokenFor(unsubscribeSecret, "marketing")
	if r := b.refusing().do(t, req{method: http.MethodGet, path: "/u/" + token}); r.status != http.StatusNotFound {
		t.Errorf("GET without a secret: %d %s, want 404", r.status, r.body)
	}
	if r := b.refusing().do(t, req{method: http.MethodPost, path: "/u/" + token, contentType: "application/x-www-form-urlencoded",
		body: "List-Unsubscribe=One-Click"}); r.status != http.StatusNotFound {
		t.Errorf("POST without a secret: %d %s, want 404", r.status, r.body)
	}
}

// TestUnsubscribeSecretTooShortIsRefused: a secret under unsubscribe.MinSecretLen bytes is a
// configuration problem, not a weak key silently used.
func TestUnsubscribeSecretTooShortIsRefused(t *testing.T) {
	t.Parallel()
	cfg := httpapi.Config{Channels: map[string]commands.Check{email.Name: email.Check}, UnsubscribeSecret: []byte("too-short")}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "unsubscribe secret") {
		t.Errorf("a 9-byte secret: %v, want a refusal", err)
	}
	cfg.UnsubscribeSecret = unsubscribeSecret
	if err := cfg.Validate(); err != nil {
		t.Errorf("a %d-byte secret: %v", len(unsubscribeSecret), err)
	}
}

package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// idleDeps are dependencies that are never called: the checks under test run before any
// handler does.
type idleDeps struct{}

func (idleDeps) LoadOf(context.Context, string, string) ([]domain.Event, error) { panic("called") }
func (idleDeps) DeliveriesOf(context.Context, string, string) ([]string, error) { panic("called") }
func (idleDeps) RequestLookup(context.Context, string, string) ([]byte, error)  { panic("called") }
func (idleDeps) Deliveries(context.Context, string, projections.Filter) (projections.Page[projections.StatusRow], error) {
	panic("called")
}
func (idleDeps) DeadLetters(context.Context, string, projections.Filter) (projections.Page[projections.DLQRow], error) {
	panic("called")
}
func (idleDeps) Stats(context.Context, string) (projections.Stats, error) { panic("called") }
func (idleDeps) Minutes(context.Context, string) (projections.Minutes, error) {
	panic("called")
}
func (idleDeps) RequestGet(context.Context, string, string) (commands.StoredRequest, error) {
	panic("called")
}
func (idleDeps) RequestPut(context.Context, commands.StoredRequest) error { panic("called") }
func (idleDeps) AppendRequest(context.Context, commands.StoredRequest, []domain.Event, []commands.OutboxMessage) error {
	panic("called")
}

// notQueryChecked are the patterns that do not go through withQuery, and why; every other
// pattern the server registers must be a route the walk below probes.
var notQueryChecked = map[string]string{
	"POST /v1/receipts/{provider}": "the provider chooses the callback's query",
	"GET /v1/receipts/{provider}":  "the provider chooses the callback's query",
	"/console/":                    "static files",
	"/console":                     "the console's redirect to /console/",
}

// fullServer is the API with every dependency given, so every optional route is registered. A
// field added to Deps must be given here too, or the test that calls it fails: a route behind a
// new dependency cannot escape the tests that walk the routes.
func fullServer(t *testing.T) *server {
	t.Helper()
	deps := Deps{Accept: &commands.AcceptHandler{}, Events: idleDeps{}, Requests: idleDeps{}, Views: idleDeps{},
		Replay: &commands.ReplayHandler{}, Reconcile: &commands.ReconcileHandler{}, OperatorRequests: idleDeps{},
		Cancel: &commands.CancelHandler{}, Notifications: idleDeps{},
		ReplayJobs: &commands.ReplayJobs{}, Receipts: &Receipts{Record: &commands.RecordReceiptHandler{}},
		Providers:    func(context.Context) ([]ProviderView, error) { panic("called") },
		Suppressions: &commands.Suppressions{},
		Ready:        func(context.Context) error { return nil },
		PaceAccept:   func(context.Context) {}}
	v := reflect.ValueOf(deps)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("fullServer does not give Deps.%s: give it, so the routes behind it are walked", v.Type().Field(i).Name)
		}
	}
	h, err := New(Config{APIKeys: map[string]string{"k": "acme"}, Channels: map[string]commands.Check{"webhook": func(string, json.RawMessage) error { return nil }},
		UnsubscribeSecret: []byte("0123456789abcdef0123456789abcdef")}, deps, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h.(*server)
}

// TestEveryRouteRefusesUnknownRepeatedAndMalformedParameters walks every route the server
// registers, whatever is added later, with a parameter it does not know, with each one it knows
// given twice, or with a value that does not decode: each is a 400 naming the parameter (or
// "query" when its name does not decode either), before any handler runs.
func TestEveryRouteRefusesUnknownRepeatedAndMalformedParameters(t *testing.T) {
	t.Parallel()
	s := fullServer(t)
	walked := map[string]bool{}
	for _, rt := range s.routes {
		walked[rt.pattern] = true
	}
	for _, pattern := range s.patterns {
		if !walked[pattern] && notQueryChecked[pattern] == "" {
			t.Errorf("%s is registered outside tenantRoute and publicRoute: its query is not checked", pattern)
		}
	}
	for pattern := range notQueryChecked {
		if !slices.Contains(s.patterns, pattern) {
			t.Errorf("notQueryChecked names %s, which the server does not register", pattern)
		}
	}
	probe := func(pattern, query, want string) {
		t.Helper()
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.NewReplacer("{id}", "0d9a1f2c-6a54-4f3e-9a3b-9b1c0e0f2a11", "{key}", "k-1").Replace(path)
		r := httptest.NewRequest(method, path+"?"+query, strings.NewReader(`{}`))
		r.Header.Set("Authorization", "Bearer k")
		r.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		// Unknown and repeated parameters are outside the description on purpose; the answer is not.
		openapitest.Wrap(t, s).ServeHTTP(rec, r.WithContext(openapitest.Invalid(r.Context())))
		var p problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != http.StatusBadRequest || p.Field != want {
			t.Errorf("%s?%s: %d field %q, want 400 naming %q", pattern, query, rec.Code, p.Field, want)
		}
	}
	for _, rt := range s.routes {
		probe(rt.pattern, "zzz_unknown=1", "zzz_unknown")
		probe(rt.pattern, "zzz_unknown=%zz", "zzz_unknown")
		probe(rt.pattern, "%zz=1", "query")
		for _, param := range rt.params {
			probe(rt.pattern, param+"=a&"+param+"=b", param)
			probe(rt.pattern, param+"=%zz", param)
			probe(rt.pattern, param+"=a;", param)
		}
	}
}

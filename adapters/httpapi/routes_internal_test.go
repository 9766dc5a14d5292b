package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
func (idleDeps) RequestLookup(context.Context, string, string) ([]byte, error)  { panic("called") }
func (idleDeps) Deliveries(context.Context, string, projections.Filter) (projections.Page[projections.StatusRow], error) {
	panic("called")
}
func (idleDeps) DeadLetters(context.Context, string, projections.Filter) (projections.Page[projections.DLQRow], error) {
	panic("called")
}
func (idleDeps) Stats(context.Context, string) (projections.Stats, error) { panic("called") }
func (idleDeps) RequestGet(context.Context, string, string) (commands.StoredRequest, error) {
	panic("called")
}
func (idleDeps) RequestPut(context.Context, commands.StoredRequest) error { panic("called") }
func (idleDeps) AppendRequest(context.Context, commands.StoredRequest, []domain.Event, []commands.OutboxMessage) error {
	panic("called")
}

// TestEveryRouteRefusesUnknownAndRepeatedParameters walks every route the server registers,
// whatever is added later, with a parameter it does not know and with each one it knows given
// twice: each is a 400 naming the parameter, before any handler runs.
func TestEveryRouteRefusesUnknownAndRepeatedParameters(t *testing.T) {
	t.Parallel()
	h, err := New(Config{APIKeys: map[string]string{"k": "acme"}, Channels: map[string]commands.Check{"webhook": func(string, json.RawMessage) error { return nil }}},
		Deps{Accept: &commands.AcceptHandler{}, Events: idleDeps{}, Requests: idleDeps{}, Views: idleDeps{},
			Replay: &commands.ReplayHandler{}, Reconcile: &commands.ReconcileHandler{}, OperatorRequests: idleDeps{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := h.(*server)
	if len(s.routes) < 13 {
		t.Fatalf("%d routes registered, want every route of the API", len(s.routes))
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
		openapitest.Wrap(t, h).ServeHTTP(rec, r.WithContext(openapitest.Invalid(r.Context())))
		var p problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != http.StatusBadRequest || p.Field != want {
			t.Errorf("%s?%s: %d field %q, want 400 naming %q", pattern, query, rec.Code, p.Field, want)
		}
	}
	for _, rt := range s.routes {
		probe(rt.pattern, "zzz_unknown=1", "zzz_unknown")
		for _, param := range rt.params {
			probe(rt.pattern, param+"=a&"+param+"=b", param)
		}
	}
}

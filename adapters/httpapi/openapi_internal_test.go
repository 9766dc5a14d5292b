package httpapi

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
)

// servedOutsideNew are operations of docs/openapi.yaml that New does not register: the wiring
// that builds the server adds them. An entry goes once New registers it.
var servedOutsideNew = map[string]bool{}

// TestOpenAPIDescribesEveryRoute: every route New registers, with every dependency given, is an
// operation of docs/openapi.yaml that lists exactly the route's query parameters, and every
// operation of the document is a route the server has; so a route added to one and not the
// other fails here, before a client finds out.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	s := fullServer(t)
	doc, err := openapitest.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	for _, rt := range s.routes {
		method, path, _ := strings.Cut(rt.pattern, " ")
		op := doc.Paths.Find(path).GetOperation(method)
		if doc.Paths.Find(path) == nil || op == nil {
			t.Errorf("%s: no operation in docs/openapi.yaml", rt.pattern)
			continue
		}
		var documented []string
		for _, p := range op.Parameters {
			if p.Value.In == openapi3.ParameterInQuery {
				documented = append(documented, p.Value.Name)
			}
		}
		params := slices.Clone(rt.params)
		slices.Sort(documented)
		slices.Sort(params)
		if !slices.Equal(documented, params) {
			t.Errorf("%s takes the query parameters %v, docs/openapi.yaml lists %v", rt.pattern, params, documented)
		}
	}

	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			pattern := method + " " + path
			if servedOutsideNew[pattern] {
				continue
			}
			target := strings.NewReplacer("{id}", "0d9a1f2c-6a54-4f3e-9a3b-9b1c0e0f2a11", "{key}", "k-1", "{provider}", "twilio",
				"{version}", "v1", "{file}", "app.js").Replace(path)
			_, got := s.mux.Handler(httptest.NewRequest(method, target, nil))
			// A subtree pattern without a method ("/console/") serves everything under it.
			subtree := strings.HasSuffix(got, "/") && !strings.Contains(got, " ") && strings.HasPrefix(path, got)
			if got != pattern && !subtree {
				t.Errorf("docs/openapi.yaml describes %s, but the server routes %s %s to %q", pattern, method, target, got)
			}
		}
	}
	for pattern := range servedOutsideNew {
		method, path, _ := strings.Cut(pattern, " ")
		if _, got := s.mux.Handler(httptest.NewRequest(method, path, nil)); got == pattern {
			t.Errorf("New registers %s now: remove it from servedOutsideNew", pattern)
		}
	}
}

package openapitest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
)

// recorderT is a test that keeps the errors reported to it instead of failing.
type recorderT struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorderT) Helper() {}

func (r *recorderT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorderT) reported() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errors, "\n")
}

// answer is a handler that answers every request with status, content type and body.
func answer(status int, contentType, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

const problem404 = `{"type":"about:blank","title":"Not Found","status":404,"detail":"no delivery with this id"}`

func TestWrapReportsWhatTheDescriptionDoesNotSay(t *testing.T) {
	t.Parallel()
	id := "0d9a1f2c-6a54-4f3e-9a3b-9b1c0e0f2a11"
	tests := []struct {
		name    string
		handler http.Handler
		req     func() *http.Request
		want    string // in the report; empty: nothing reported
	}{
		{"an answer in the description", answer(http.StatusNotFound, "application/problem+json", problem404),
			func() *http.Request {
				return authorized(httptest.NewRequest(http.MethodGet, "/v1/deliveries/"+id, nil))
			}, ""},
		{"a member the schema does not have", answer(http.StatusOK, "application/json", `{"status":"ok","extra":1}`),
			func() *http.Request { return httptest.NewRequest(http.MethodGet, "/healthz", nil) }, "the answer is not in the description"},
		{"a status the operation does not list", answer(http.StatusTeapot, "application/problem+json", problem404),
			func() *http.Request { return httptest.NewRequest(http.MethodGet, "/healthz", nil) }, "status is not supported"},
		{"a problem whose status is not the answer's", answer(http.StatusNotFound, "application/problem+json", strings.Replace(problem404, "404", "400", 1)),
			func() *http.Request {
				return authorized(httptest.NewRequest(http.MethodGet, "/v1/deliveries/"+id, nil))
			}, "the answer is not in the description"},
		{"a request without its key", answer(http.StatusNotFound, "application/problem+json", problem404),
			func() *http.Request { return httptest.NewRequest(http.MethodGet, "/v1/deliveries/"+id, nil) }, "the request is not in the description"},
		{"a request without its key, on purpose", answer(http.StatusNotFound, "application/problem+json", problem404),
			func() *http.Request {
				r := httptest.NewRequest(http.MethodGet, "/v1/deliveries/"+id, nil)
				return r.WithContext(openapitest.Invalid(r.Context()))
			}, ""},
		{"a query parameter the operation does not list", answer(http.StatusOK, "application/json", `{"status":"ok"}`),
			func() *http.Request { return httptest.NewRequest(http.MethodGet, "/healthz?verbose=1", nil) }, `query parameter "verbose"`},
		{"a route the description does not have, served", answer(http.StatusOK, "application/json", `{}`),
			func() *http.Request { return authorized(httptest.NewRequest(http.MethodGet, "/v1/secret", nil)) }, "no operation for this request"},
		{"a route the description does not have, refused", answer(http.StatusNotFound, "application/problem+json",
			`{"type":"about:blank","title":"Not Found","status":404,"detail":"no resource at /v1/secret"}`),
			func() *http.Request { return authorized(httptest.NewRequest(http.MethodGet, "/v1/secret", nil)) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := &recorderT{TB: t}
			openapitest.Wrap(rt, tt.handler).ServeHTTP(httptest.NewRecorder(), tt.req())
			got := rt.reported()
			switch {
			case tt.want == "" && got != "":
				t.Fatalf("reported %s, want nothing", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Fatalf("reported %q, want %q in it", got, tt.want)
			}
		})
	}
}

// TestAnyRequestStillChecksTheAnswer: a hook for fuzzed requests lets them break the description,
// not their answers.
func TestAnyRequestStillChecksTheAnswer(t *testing.T) {
	t.Parallel()
	rt := &recorderT{TB: t}
	h := openapitest.Wrap(rt, answer(http.StatusBadRequest, "application/problem+json",
		`{"type":"about:blank","title":"Bad Request","status":400,"detail":"unknown query parameter","field":"x"}`), openapitest.AnyRequest())
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz?x=%00&x=2", nil))
	if r := rt.reported(); r != "" {
		t.Fatalf("reported %s for a fuzzed request refused as described", r)
	}
	h = openapitest.Wrap(rt, answer(http.StatusBadRequest, "text/plain", "bad"), openapitest.AnyRequest())
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz?x=1", nil))
	if r := rt.reported(); !strings.Contains(r, "the answer is not in the description") {
		t.Fatalf("reported %q, want the plain-text answer", r)
	}
}

func authorized(r *http.Request) *http.Request {
	r.Header.Set("Authorization", "Bearer k")
	return r
}

// TestTransportChecksAndPassesTheAnswerOn: the client still reads the whole answer, and a request
// body goes to the server unchanged.
func TestTransportChecksAndPassesTheAnswerOn(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"type":"about:blank","title":"Unauthorized","status":401,"detail":"unknown API key","field":"Authorization"}`)
	}))
	t.Cleanup(srv.Close)
	rt := &recorderT{TB: t}
	body := `{"channel":"webhook","recipient":"https://example.com/h","payload":{}}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/deliveries", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer unknown")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-1")
	res, err := openapitest.Client(rt).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(res.Body)
	if read := <-got; read != body || !strings.Contains(string(answer), "unknown API key") {
		t.Fatalf("server read %q, client read %q", read, answer)
	}
	// The 401 lacks WWW-Authenticate, which the description requires.
	if r := rt.reported(); !strings.Contains(r, "WWW-Authenticate") {
		t.Fatalf("reported %q, want the missing WWW-Authenticate", r)
	}
}

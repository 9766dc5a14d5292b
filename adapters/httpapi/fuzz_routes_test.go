package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// fuzzRoutes are the API's routes with a place for a fuzzed path segment (%s) and query.
var fuzzRoutes = []struct{ method, path string }{
	{http.MethodGet, "/v1/deliveries/%s"},
	{http.MethodGet, "/v1/deliveries/%s/events"},
	{http.MethodGet, "/v1/requests/%s"},
	{http.MethodGet, "/v1/deliveries"},
	{http.MethodGet, "/v1/dlq"},
	{http.MethodGet, "/v1/stats"},
	{http.MethodPost, "/v1/deliveries/%s/replay"},
	{http.MethodPost, "/v1/deliveries/%s/reconcile"},
	{http.MethodPost, "/v1/dlq/replay"},
	{http.MethodPost, "/v1/deliveries"},
	{http.MethodGet, "/healthz"},
	{http.MethodGet, "/v1/replays"},
	{http.MethodGet, "/v1/replays/%s"},
}

// fuzzServer is a test API over a real schema with a dead and an unknown delivery in it, and
// the handler to call directly (no sockets: a fuzzing run makes tens of thousands of calls).
func fuzzServer(f *testing.F) (http.Handler, []string) {
	var jobs *commands.ReplayJobs // created by POST /v1/replays, never run: the answers are under test
	b := setup(f, withReplayJobs(&jobs))
	ids := []string{
		b.story(f, "acme", "webhook", "https://example.com/dead", time.Now().Add(-time.Hour), domain.OutcomePermanent),
		b.story(f, "acme", "webhook", "https://example.com/unknown", time.Now().Add(-time.Minute), domain.OutcomeUnknown),
		b.story(f, "globex", "webhook", "https://example.com/other", time.Now(), domain.OutcomePermanent),
	}
	return b.handler, ids
}

// serveRaw parses raw as an HTTP/1.1 request the way the server would and serves it, checking
// the answer against docs/openapi.yaml (the request is fuzzed: it may break the description); false
// when the server would refuse the bytes before routing (net/http answers 400 itself).
func serveRaw(t *testing.T, h http.Handler, raw string) (*httptest.ResponseRecorder, bool) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		return nil, false
	}
	rec := httptest.NewRecorder()
	openapitest.Wrap(t, h).ServeHTTP(rec, req.WithContext(openapitest.Invalid(req.Context())))
	return rec, true
}

// checkAnswer fails on a 500, or on an error that is not a problem document.
func checkAnswer(t *testing.T, raw string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("%q: %d %s", raw, rec.Code, rec.Body)
	}
	if rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%q: %d with content type %q", raw, rec.Code, rec.Header().Get("Content-Type"))
	}
}

// checkQueryRefused fails when a query that does not decode (url.ParseQuery refuses it; the
// server must not drop what it cannot read) got anything but a 400, apart from the answers of a
// path no route has: the router's 404 and 405, or its redirect to a cleaned path.
func checkQueryRefused(t *testing.T, raw string, rec *httptest.ResponseRecorder) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		return
	}
	if _, err := url.ParseQuery(req.URL.RawQuery); err == nil {
		return
	}
	var p struct{ Detail string }
	_ = json.Unmarshal(rec.Body.Bytes(), &p)
	switch {
	case rec.Code == http.StatusBadRequest:
	case rec.Code == http.StatusNotFound && strings.HasPrefix(p.Detail, "no resource at "):
	case rec.Code == http.StatusMethodNotAllowed, rec.Code >= 300 && rec.Code < 400:
	default:
		t.Fatalf("%q: a query that does not decode got %d %s, want 400", raw, rec.Code, rec.Body)
	}
}

// FuzzQueriesAndPaths sends arbitrary path segments and query strings through the real router
// to the real database: whatever the bytes, the answer is never a 500, and a query that does not
// decode is a 400.
func FuzzQueriesAndPaths(f *testing.F) {
	for _, seed := range []struct {
		route        uint8
		segment, raw string
	}{
		{0, "%00", ""}, {0, "urn:uuid:0d9a1f2c-6a54-4f3e-9a3b-9b1c0e0f2a11", "as_of=2026-01-01T00:00:00Z"},
		{1, "%ff", "x=1"}, {2, "%00", ""}, {3, "", "recipient=%ff&state=dead"}, {3, "", "cursor=eyJhIjotOTAwMDAwMDAwMDAwMDAwMDAwMCwiaSI6IngifQ"},
		{4, "", "since=0000-01-01T00:00:00Z&until=9999-12-31T23:59:59Z"}, {4, "", "limit=99999999999999999999"},
		{5, "", "a=%00"}, {6, "{0d9a1f2c-6a54-4f3e-9a3b-9b1c0e0f2a11}", ""}, {7, "0d9a1f2c6a544f3e9a3b9b1c0e0f2a11", "dry_run=1"},
		{8, "", "channel=webhook&cursor=%00"}, {9, "", "dry_run=true"}, {10, "", "%ff=%ff"},
		{9, "", "dry_run=%zz"}, {9, "", "dry_run=true;"}, {3, "", "recipient=%zz"}, {4, "", "limit=5&%"}, {11, "", "limit=%zz"},
	} {
		f.Add(seed.route, seed.segment, seed.raw)
	}
	h, ids := fuzzServer(f)
	f.Fuzz(func(t *testing.T, route uint8, segment, rawQuery string) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		if segment == "" && len(ids) > 0 {
			segment = ids[int(route)%len(ids)]
		}
		path := r.path
		if strings.Contains(path, "%s") {
			path = fmt.Sprintf(path, segment)
		}
		target := path
		if rawQuery != "" {
			target += "?" + rawQuery
		}
		raw := r.method + " " + target + " HTTP/1.1\r\nHost: ledger\r\nAuthorization: Bearer " + keyAcme +
			"\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"
		if rec, ok := serveRaw(t, h, raw); ok {
			checkAnswer(t, raw, rec)
			checkQueryRefused(t, raw, rec)
		}
	})
}

// FuzzOperatorBodies sends arbitrary replay, reconcile and replay-job bodies and
// Idempotency-Keys, for a dead, an unknown, another tenant's and a missing delivery, through the
// real router to the real database: never a 500.
func FuzzOperatorBodies(f *testing.F) {
	for _, seed := range []struct {
		route     uint8
		target    uint8
		key, body string
	}{
		{0, 0, "", `{"reason":"fixed"}`}, {0, 0, "k1", `{"reason":"a\u0000b"}`}, {0, 1, "", ``}, {0, 2, "k\u00ff", `{"reason":"x"}`},
		{1, 1, "", `{"outcome":"delivered","evidence":"log","actor":"ops","status_code":200,"provider_operation_id":"x"}`},
		{1, 1, "", `{"outcome":"retrying","evidence":"\ud800"}`}, {1, 0, "", `{"outcome":"dead","evidence":"e","status_code":1e999}`},
		{1, 3, "", `{"outcome":"delivered","evidence":"` + strings.Repeat("e", 3000) + `"}`},
		{2, 0, "page", `{"reason":"outage over"}`}, {2, 0, "", `{"reason":1}`}, {2, 0, "", `[]`},
		{3, 0, "job-1", `{"reason":"outage over","channel":"webhook","failure_class":"permanent","include_unknown":true}`},
		{3, 0, "", `{"reason":"no key"}`}, {3, 0, "", `{"dry_run":true,"since":"2026-01-01T00:00:00Z"}`},
		{3, 0, "job-2", `{"reason":"r","since":"2026-02-01T00:00:00Z","until":"2026-01-01T00:00:00Z"}`},
		{3, 0, "job-3", `{"reason":"r\u0000","recipient":"\ud800","failure_class":"nope","since":"yesterday"}`},
		{3, 0, "job-4", `{"reason":"r","actor":"` + strings.Repeat("a", 600) + `","channel":"pigeon"}`},
		{3, 0, "job-5", `{"reason":"  ","include_unknown":true}`}, {3, 0, "job-6", `{"reason":"\u001b]0;X\u0007"}`},
		{0, 0, "", `{"reason":"fixed","actor":"\u202eevil"}`}, {1, 1, "", `{"outcome":"delivered","evidence":"   "}`},
		{2, 0, "", `{"reason":"bell\u0007"}`},
	} {
		f.Add(seed.route, seed.target, seed.key, seed.body)
	}
	h, ids := fuzzServer(f)
	ids = append(ids, "0d9a1f2c-6a54-4f3e-9a3b-9b1c0e0f2a11")
	f.Fuzz(func(t *testing.T, route, target uint8, key, body string) {
		id := ids[int(target)%len(ids)]
		path := [...]string{"/v1/deliveries/" + id + "/replay", "/v1/deliveries/" + id + "/reconcile", "/v1/dlq/replay?limit=5", "/v1/replays"}[int(route)%4]
		header := "Host: ledger\r\nAuthorization: Bearer " + keyAcme + "\r\nContent-Type: application/json\r\n"
		if key != "" {
			header += "Idempotency-Key: " + key + "\r\n"
		}
		raw := fmt.Sprintf("POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s", path, header, len(body), body)
		if rec, ok := serveRaw(t, h, raw); ok {
			checkAnswer(t, raw, rec)
			checkOperatorTextRefused(t, raw, body, rec)
		}
	})
}

// checkOperatorTextRefused fails when a body whose operator text (reason, actor, evidence) is
// blank or holds a control character got anything but a 400: such text is never recorded.
func checkOperatorTextRefused(t *testing.T, raw, body string, rec *httptest.ResponseRecorder) {
	t.Helper()
	var members map[string]any
	if json.Unmarshal([]byte(body), &members) != nil {
		return
	}
	for _, name := range []string{"reason", "actor", "evidence"} {
		v, ok := members[name].(string)
		if !ok || v == "" {
			continue
		}
		bad := strings.TrimSpace(v) == ""
		for _, r := range v {
			bad = bad || r < 0x20 || r >= 0x7f && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
		}
		if bad && rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("%q: %s %q got %d %s, want 400", raw, name, v, rec.Code, rec.Body)
		}
	}
}

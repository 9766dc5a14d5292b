// Package otlptest is an OTLP/HTTP trace receiver for tests: it listens on a loopback port,
// takes what an OpenTelemetry SDK exports to POST /v1/traces (protobuf, gzip or not), and keeps
// the spans for a test to look at, from however many processes export to it.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	// Kind is OTLP's: "server", "client", "producer", "consumer" or "internal".
	Kind string
	// Service is the exporting process's service.name; Resource all its resource attributes.
	Service    string
	Resource   map[string]string
	Attributes map[string]string
	// Links are the (trace id, span id) pairs the span links to.
	Links      [][2]string
	Start, End time.Time
	// Error is the status message of a span whose status is an error.
	Error string
}

// Receiver collects exported spans.
type Receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []Span
}

// Start runs a receiver until the test ends. Endpoint is its base URL, for
// OTEL_EXPORTER_OTLP_ENDPOINT.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// Endpoint is the receiver's base URL (http://127.0.0.1:port).
func (r *Receiver) Endpoint() string { return r.srv.URL }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "only POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var export coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range export.GetResourceSpans() {
		res := attributes(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				span := Span{
					TraceID:    hex.EncodeToString(s.GetTraceId()),
					SpanID:     hex.EncodeToString(s.GetSpanId()),
					ParentID:   hex.EncodeToString(s.GetParentSpanId()),
					Name:       s.GetName(),
					Kind:       strings.ToLower(strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_")),
					Service:    res["service.name"],
					Resource:   res,
					Attributes: attributes(s.GetAttributes()),
					Start:      time.Unix(0, int64(s.GetStartTimeUnixNano())),
					End:        time.Unix(0, int64(s.GetEndTimeUnixNano())),
				}
				if s.GetStatus().GetCode() == 2 {
					span.Error = s.GetStatus().GetMessage()
				}
				for _, l := range s.GetLinks() {
					span.Links = append(span.Links, [2]string{hex.EncodeToString(l.GetTraceId()), hex.EncodeToString(l.GetSpanId())})
				}
				got = append(got, span)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attributes(kvs []*common.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *common.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *common.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *common.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *common.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans returns every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the spans of one trace, by start time.
func (r *Receiver) Trace(traceID string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// WaitFor polls until ok holds for the spans received, or fails the test after timeout.
func (r *Receiver) WaitFor(t testing.TB, what string, timeout time.Duration, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans := r.Spans()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s; %d spans received:\n%s", what, timeout, len(spans), Render(spans))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Render draws spans as an indented tree per trace, with each span's service, kind, offset from
// the trace's start and duration: what a trace view shows, as text.
func Render(spans []Span) string {
	byTrace := map[string][]Span{}
	var order []string
	for _, s := range spans {
		if _, ok := byTrace[s.TraceID]; !ok {
			order = append(order, s.TraceID)
		}
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}
	var b strings.Builder
	for _, id := range order {
		tr := byTrace[id]
		sort.Slice(tr, func(i, j int) bool { return tr[i].Start.Before(tr[j].Start) })
		fmt.Fprintf(&b, "trace %s\n", id)
		ids := map[string]bool{}
		for _, s := range tr {
			ids[s.SpanID] = true
		}
		children := map[string][]Span{}
		var roots []Span
		for _, s := range tr {
			if s.ParentID == "" || !ids[s.ParentID] {
				roots = append(roots, s)
			} else {
				children[s.ParentID] = append(children[s.ParentID], s)
			}
		}
		t0 := tr[0].Start
		var walk func(s Span, depth int)
		walk = func(s Span, depth int) {
			fmt.Fprintf(&b, "  %-64s %-10s %-8s +%9s %9s\n", strings.Repeat("  ", depth)+s.Name, s.Service, s.Kind,
				s.Start.Sub(t0).Round(10*time.Microsecond), s.End.Sub(s.Start).Round(10*time.Microsecond))
			for _, c := range children[s.SpanID] {
				walk(c, depth+1)
			}
		}
		for _, s := range roots {
			walk(s, 0)
		}
	}
	return b.String()
}

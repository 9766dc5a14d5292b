package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestFromEnvIsOffWithoutAnEndpoint(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		on   bool
		fail bool
	}{
		{env: map[string]string{}, on: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, on: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, on: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, fail: true},
	} {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
			"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME"} {
			t.Setenv(k, tc.env[k])
		}
		s, err := FromEnv()
		if (err != nil) != tc.fail || (err == nil && s.On != tc.on) {
			t.Errorf("%v: on %v err %v, want on %v fail %v", tc.env, s.On, err, tc.on, tc.fail)
		}
		if err == nil && s.Service != "ledger" {
			t.Errorf("default service %q", s.Service)
		}
	}
}

func TestOffCostsNothing(t *testing.T) {
	rt := http.DefaultTransport
	if Transport(rt, nil) != rt {
		t.Error("off, Transport wraps")
	}
	h := http.NotFoundHandler()
	if got := Handler(h); got == nil {
		t.Error("nil handler")
	}
	meta := map[string]string{}
	ctx, span := Start(context.Background(), "x")
	Inject(ctx, meta)
	if len(meta) != 0 || span.IsRecording() || Traceparent(ctx) != "" {
		t.Errorf("off, a span or trace context was made: %v", meta)
	}
	if allocs := testing.AllocsPerRun(100, func() { _, s := Start(ctx, "x"); s.End() }); allocs != 0 {
		t.Errorf("off, Start allocates %.0f times", allocs)
	}
}

func TestPropagationAndClientSpans(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	defer Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))()

	ctx, parent := Start(context.Background(), "call")
	meta := map[string]string{}
	Inject(ctx, meta)
	if meta[MetaTraceparent] != Traceparent(ctx) || Traceparent(ctx) == "" {
		t.Fatalf("inject %v, traceparent %q", meta, Traceparent(ctx))
	}
	back := Extract(context.Background(), meta)
	if SpanContextOf(Traceparent(back)).TraceID() != parent.SpanContext().TraceID() {
		t.Fatal("extract lost the trace")
	}

	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("traceparent")
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	client := &http.Client{Transport: Transport(http.DefaultTransport, nil)}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/hooks/secret-token?sig=abc", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	parent.End()
	var span sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.Name() == "POST" {
			span = s
		}
	}
	if span == nil || span.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatal("no client span under the call")
	}
	if got != "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01" {
		t.Errorf("the server got traceparent %q", got)
	}
	for _, a := range span.Attributes() {
		if a.Key == "url.full" && a.Value.AsString() != srv.URL {
			t.Errorf("url.full %q: the path and query of a tenant's URL must not be recorded", a.Value.AsString())
		}
		if a.Key == "http.response.status_code" && a.Value.AsInt64() != 502 {
			t.Errorf("status %d", a.Value.AsInt64())
		}
	}
	if span.Status().Code != codes.Error {
		t.Errorf("a 502 is not an error span: %v", span.Status())
	}
}

func TestSummarizeNamesStatementsWithoutArguments(t *testing.T) {
	for sql, want := range map[string]string{
		`SELECT data FROM events WHERE delivery_id = $1`:                      "SELECT events",
		`INSERT INTO events (a, b) SELECT * FROM unnest($1::text[])`:          "INSERT events",
		`UPDATE status_view SET state = $1 WHERE id = $2`:                     "UPDATE status_view",
		`SELECT pg_try_advisory_xact_lock(k) FROM unnest($1::text[]) AS u(k)`: "SELECT",
		`  `: "SQL",
		`DELETE FROM "watermill_ledger_outbox" WHERE "offset" < $1`: "DELETE watermill_ledger_outbox",
	} {
		if got := Summarize(sql); got != want {
			t.Errorf("Summarize(%q) = %q, want %q", sql, got, want)
		}
	}
}

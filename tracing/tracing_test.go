package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deliveryledger/ledger/tracing/otlptest"
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
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced := map[string]string{MetaTraceparent: tp, MetaRoot: tp, MetaLink: tp}
	allocs := testing.AllocsPerRun(100, func() {
		c := Continue(Root(ctx), tp)
		Inject(c, meta)
		c, links := Receive(c, traced)
		_, s := StartHop(Extract(c, traced), tp, "x")
		s.End()
		if c != ctx || links != nil || len(meta) != 0 {
			t.Fatal("off, a later hop's hooks changed the context or the message")
		}
	})
	if allocs != 0 {
		t.Errorf("off, the later hops' hooks allocate %.0f times", allocs)
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

// TestSetupHonoursTheSampler: Setup takes OTEL_TRACES_SAMPLER (and its argument) as the SDK
// reads them. always_off records nothing; parentbased_traceidratio at 0 records no new root but
// follows a sampled parent (the caller's traceparent, a message's), so a delivery is kept or
// dropped whole; the default records everything, and what it records reaches the endpoint.
func TestSetupHonoursTheSampler(t *testing.T) {
	receiver := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.Endpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	sampled := SpanContextOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	for _, tc := range []struct {
		sampler, arg         string
		root, childOfSampled bool
	}{
		{sampler: "always_off"},
		{sampler: "parentbased_traceidratio", arg: "0", childOfSampled: true},
		{sampler: "", root: true, childOfSampled: true}, // default: parentbased_always_on
	} {
		t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
		_, shutdown, err := Setup(context.Background())
		if err != nil || !Enabled() {
			t.Fatalf("%s: Setup: %v, enabled %v", tc.sampler, err, Enabled())
		}
		_, root := Start(context.Background(), "root "+tc.sampler)
		_, child := Start(trace.ContextWithRemoteSpanContext(context.Background(), sampled), "child "+tc.sampler)
		if root.IsRecording() != tc.root || child.IsRecording() != tc.childOfSampled {
			t.Errorf("sampler %q: root recorded %v, child of a sampled parent %v; want %v, %v",
				tc.sampler, root.IsRecording(), child.IsRecording(), tc.root, tc.childOfSampled)
		}
		root.End()
		child.End()
		if err := shutdown(context.Background()); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		if Enabled() {
			t.Fatal("shutdown left tracing on")
		}
	}
	got := map[string]bool{}
	for _, s := range receiver.Spans() {
		got[s.Name] = true
	}
	if !got["root "] || !got["child parentbased_traceidratio"] || got["root always_off"] || got["child always_off"] {
		t.Errorf("the endpoint received %v", got)
	}
}

// TestLaterHopsStartUnderTheRoot: the delivery's first message is consumed as a child of its
// publish; a later hop (a retry scheduled by the outcome's span, a replay by an operator's
// request in a trace of its own) is written with the delivery's root as its parent and its cause
// as a link, and consumed as a child of the root, linked to its publish and its cause. The
// operator's span links to the delivery's trace too.
func TestLaterHopsStartUnderTheRoot(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	defer Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))()

	actx, accept := Start(context.Background(), "POST /v1/deliveries")
	root := Traceparent(actx)
	// publish is the relay: a child of what the message names, whose context it then carries.
	publish := func(meta map[string]string) trace.SpanContext {
		ctx, span := Start(Extract(context.Background(), meta), "send")
		Inject(ctx, meta)
		span.End()
		return span.SpanContext()
	}
	first := map[string]string{}
	Inject(Root(actx), first)
	if first[MetaRoot] != root || first[MetaLink] != "" {
		t.Fatalf("the accept's message: %v, want its root and no link", first)
	}
	send := publish(first)
	pctx, links := Receive(context.Background(), first)
	if trace.SpanContextFromContext(pctx).SpanID() != send.SpanID() || len(links) != 0 {
		t.Errorf("the first hop is not consumed under its publish: parent %v, links %v", trace.SpanContextFromContext(pctx), links)
	}

	// A retry, scheduled by the outcome recorded within the first attempt.
	_, attempt := Start(pctx, "attempt")
	octx, outcome := Start(trace.ContextWithSpan(pctx, attempt), "record outcome")
	retry := map[string]string{}
	Inject(Continue(octx, root), retry)
	outcome.End()
	attempt.End()
	if retry[MetaTraceparent] != root || retry[MetaRoot] != root || retry[MetaLink] != Traceparent(octx) {
		t.Errorf("the retry's message %v: want the root as parent and root, the outcome as link %s", retry, Traceparent(octx))
	}
	send = publish(retry)
	rctx, links := Receive(context.Background(), retry)
	if got := trace.SpanContextFromContext(rctx); got.SpanID() != accept.SpanContext().SpanID() {
		t.Errorf("the retry is consumed under %v, want the root %v", got.SpanID(), accept.SpanContext().SpanID())
	}
	if len(links) != 2 || links[0].SpanContext.SpanID() != send.SpanID() || links[1].SpanContext.SpanID() != outcome.SpanContext().SpanID() {
		t.Errorf("the retry's consume links %v, want its publish %v and the outcome %v", links, send.SpanID(), outcome.SpanContext().SpanID())
	}

	// A replay, in the operator's own trace.
	ropctx, operator := Start(context.Background(), "POST /v1/deliveries/{id}/replay")
	replay := map[string]string{}
	Inject(Continue(ropctx, root), replay)
	operator.End()
	accept.End()
	if replay[MetaTraceparent] != root || replay[MetaLink] != Traceparent(ropctx) {
		t.Errorf("the replay's message %v: want the root as parent, the operator's request as link", replay)
	}
	for _, s := range recorder.Ended() {
		if s.Name() == operator.(sdktrace.ReadOnlySpan).Name() {
			if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != accept.SpanContext().SpanID() {
				t.Errorf("the operator's request links %v, want the delivery's root", s.Links())
			}
		}
	}

	// Work of a later hop (a redrive, a lookup) starts under the root.
	_, redrive := StartHop(context.Background(), root, "redrive webhook")
	redrive.End()
	if redrive.(sdktrace.ReadOnlySpan).Parent().SpanID() != accept.SpanContext().SpanID() {
		t.Error("StartHop did not start under the root")
	}
}

// Package tracing follows a delivery across the ledger's processes with OpenTelemetry: the
// accept request's span is the root of every delivery it creates, its trace context is stored
// with the accepted event and travels in the outbox message's metadata and the AMQP headers, and
// every later hop (relay publish, worker consume, attempt, provider call, outcome append)
// continues the same trace. Work that follows at once is a child of what it follows; work that
// happens later (a retry after its delay, a deferral, a replay, a redrive, a lookup) starts under
// the delivery's root, linked to what scheduled it (Continue, Receive, StartHop).
//
// Tracing is configured by the standard OpenTelemetry variables and is off unless an OTLP
// endpoint is set (Setup). Off, nothing here costs more than a check of Enabled: no spans, no
// propagation headers, no wrapped transports, no database tracer.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the ledger's own spans.
const ScopeName = "github.com/deliveryledger/ledger"

// Attribute keys of the ledger's spans.
const (
	DeliveryID   = attribute.Key("ledger.delivery.id")
	Channel      = attribute.Key("ledger.channel")
	Provider     = attribute.Key("ledger.provider")
	Attempt      = attribute.Key("ledger.attempt")
	OutcomeKind  = attribute.Key("ledger.outcome")
	ErrorClass   = attribute.Key("ledger.error_class")
	StateAfter   = attribute.Key("ledger.state")
	BatchSize    = attribute.Key("ledger.batch.size")
	Notification = attribute.Key("ledger.notification.id")
)

var (
	enabled    atomic.Bool
	propagator = propagation.TraceContext{}
)

// Enabled reports whether Setup turned tracing on in this process.
func Enabled() bool { return enabled.Load() }

// Tracer is the ledger's tracer (a no-op one while tracing is off).
func Tracer() trace.Tracer { return otel.Tracer(ScopeName) }

// Settings are what Setup found in the environment: whether tracing is on, and where spans go,
// for the "tracing on" line `ledger serve` logs (cmd/internal/app).
type Settings struct {
	On       bool
	Endpoint string
	Protocol string
	Service  string
}

// FromEnv reads the OpenTelemetry variables that decide whether and where traces go:
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT (off when neither is set, or
// when OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true), OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the default, or grpc), and OTEL_SERVICE_NAME.
func FromEnv() (Settings, error) {
	s := Settings{
		Endpoint: firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
		Protocol: firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
		Service:  os.Getenv("OTEL_SERVICE_NAME"),
	}
	if s.Protocol == "" {
		s.Protocol = "http/protobuf"
	}
	if s.Service == "" {
		s.Service = "ledger"
	}
	switch s.Protocol {
	case "http/protobuf", "grpc":
	case "http/json":
		return s, errors.New("OTEL_EXPORTER_OTLP_PROTOCOL=http/json: the Go SDK exports http/protobuf or grpc")
	default:
		return s, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc", s.Protocol)
	}
	off := strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") ||
		strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none")
	s.On = s.Endpoint != "" && !off
	return s, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// Setup turns tracing on when the environment names an OTLP endpoint (see FromEnv): an OTLP
// exporter behind a batching span processor, the sampler of OTEL_TRACES_SAMPLER (parent-based,
// always on, by default), a resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES plus
// extra, and W3C trace context propagation. The returned shutdown flushes the spans still
// buffered; call it on the way out. With no endpoint it does nothing and Enabled stays false.
func Setup(ctx context.Context, extra ...attribute.KeyValue) (Settings, func(context.Context) error, error) {
	noop := func(context.Context) error { return nil }
	s, err := FromEnv()
	if err != nil || !s.On {
		return s, noop, err
	}
	var exporter sdktrace.SpanExporter
	if s.Protocol == "grpc" {
		exporter, err = otlptracegrpc.New(ctx)
	} else {
		exporter, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return s, noop, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(append([]attribute.KeyValue{semconv.ServiceName("ledger")}, extra...)...),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME win
	)
	if err != nil && res == nil {
		return s, noop, fmt.Errorf("trace resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	restore := Install(provider)
	return s, func(ctx context.Context) error {
		restore()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return provider.Shutdown(ctx)
	}, nil
}

// Metadata keys of the trace context in outbox messages and AMQP headers: W3C trace context.
const (
	MetaTraceparent = "traceparent"
	MetaTracestate  = "tracestate"
	// MetaRoot carries the traceparent of the delivery's root span (its accept's server span),
	// under which the spans of a later hop start (see Continue).
	MetaRoot = "ledger_trace_root"
	// MetaLink carries the traceparent of the span that scheduled a later hop (the outcome that
	// scheduled a retry, the operator's replay request, a redrive, a receipt): the hop's consumer
	// links to it rather than being its child. Its presence marks the message as a later hop.
	MetaLink = "ledger_trace_link"
)

// hop is what a context knows of the delivery its messages are about: the delivery's root span
// and, for a later hop (see Continue), the span that caused it.
type hop struct{ root, cause trace.SpanContext }

type hopKey struct{}

func hopOf(ctx context.Context) hop {
	h, _ := ctx.Value(hopKey{}).(hop)
	return h
}

// Inject writes ctx's trace context into meta, when tracing is on and ctx holds a span: its
// traceparent and, when ctx knows them, the delivery's root (MetaRoot) and the cause of a later
// hop (MetaLink).
func Inject(ctx context.Context, meta map[string]string) {
	if !Enabled() {
		return
	}
	propagator.Inject(ctx, propagation.MapCarrier(meta))
	h := hopOf(ctx)
	if h.root.IsValid() {
		meta[MetaRoot] = format(h.root)
	}
	if h.cause.IsValid() {
		meta[MetaLink] = format(h.cause)
	}
}

// Extract returns ctx with the remote span context meta carries as its parent, if any, and
// the delivery's root it names (for the later hops ctx's work schedules; see Continue).
func Extract(ctx context.Context, meta map[string]string) context.Context {
	if !Enabled() || meta[MetaTraceparent] == "" {
		return ctx
	}
	ctx = propagator.Extract(ctx, propagation.MapCarrier(meta))
	if root := SpanContextOf(meta[MetaRoot]); root.IsValid() {
		ctx = context.WithValue(ctx, hopKey{}, hop{root: root})
	}
	return ctx
}

// Receive is the parent and the links of the span that consumes a message (the worker's
// process span). A message of the delivery's first hop (MetaLink absent) is consumed in a child
// of its publish. A later hop's message (a retry that waited in a delay tier, a replay, a
// redrive, a deferral) is consumed in a child of the delivery's root, linked to its publish and
// to the span that scheduled it: a child of a publish that ended half an hour or days earlier
// would draw a misleading duration. Off, or for an untraced message, it returns ctx.
func Receive(ctx context.Context, meta map[string]string) (context.Context, []trace.Link) {
	if !Enabled() || meta[MetaTraceparent] == "" {
		return ctx, nil
	}
	ctx = Extract(ctx, meta)
	cause, root := SpanContextOf(meta[MetaLink]), SpanContextOf(meta[MetaRoot])
	if !cause.IsValid() || !root.IsValid() {
		return ctx, nil
	}
	links := []trace.Link{{SpanContext: trace.SpanContextFromContext(ctx)}}
	if !cause.Equal(links[0].SpanContext) {
		links = append(links, trace.Link{SpanContext: cause})
	}
	return trace.ContextWithRemoteSpanContext(ctx, root), links
}

// Traceparent is the W3C traceparent of ctx's span, or "" when tracing is off or there is none.
func Traceparent(ctx context.Context) string {
	if !Enabled() {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return format(sc)
}

// format renders a valid span context as a W3C traceparent.
func format(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// SpanContextOf parses a W3C traceparent (invalid when it does not parse).
func SpanContextOf(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagator.Extract(context.Background(), propagation.MapCarrier{MetaTraceparent: traceparent})
	return trace.SpanContextFromContext(ctx)
}

// WithParent returns ctx whose span is the remote one traceparent names (ctx unchanged when it
// names none).
func WithParent(ctx context.Context, traceparent string) context.Context {
	if sc := SpanContextOf(traceparent); sc.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// Start starts a span of the ledger's tracer when tracing is on; off, it returns ctx and a
// span that records nothing, without allocating.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, NoSpan
	}
	return Tracer().Start(ctx, name, opts...)
}

// NoSpan is a span that records nothing: what a hot path holds while tracing is off, so that it
// builds no span name or attributes (allocations) behind an Enabled check.
var NoSpan = trace.SpanFromContext(context.Background())

// Fail marks span as failed with err (nothing when err is nil).
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// Links links to the span in the context of each item that has one (ctx picks it), or is nil
// while tracing is off: the links of a span shared by several callers (see StartLinked).
func Links[T any](items []T, ctx func(T) context.Context) []trace.Link {
	if !Enabled() {
		return nil
	}
	var links []trace.Link
	for _, it := range items {
		if sc := trace.SpanContextFromContext(ctx(it)); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return links
}

// StartLinked starts a span of its own trace for work done on behalf of the spans links names
// (a shared commit of many requests), linked to each of them; with no traced span among them it
// starts none.
func StartLinked(name string, links []trace.Link, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !Enabled() || len(links) == 0 {
		return context.Background(), NoSpan
	}
	return Tracer().Start(context.Background(), name, append(opts, trace.WithLinks(links...), trace.WithNewRoot())...)
}

// Root returns ctx marked as the root of the deliveries it accepts: the messages written with
// it name ctx's span as their delivery's root (MetaRoot), under which later hops start.
func Root(ctx context.Context) context.Context {
	if !Enabled() {
		return ctx
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return context.WithValue(ctx, hopKey{}, hop{root: sc})
	}
	return ctx
}

// Continue returns the context a later hop's message is written with: one whose span is the
// delivery's root (traceparent, from its accepted event; or the root ctx knows from the message
// being worked on, when traceparent is ""), with ctx's span as the hop's cause (MetaLink). So a
// retry, a deferral, a replay, a redrive or a receipt's decision is a hop in the delivery's
// trace under its root, linked to what scheduled it, and never a child of a span that ended
// half an hour or days before. When ctx's span is in another trace (an operator's replay
// request, a provider's receipt) that span also links to the delivery's root, so either trace
// leads to the other. Off, or for a delivery with no trace, it returns ctx.
func Continue(ctx context.Context, traceparent string) context.Context {
	if !Enabled() {
		return ctx
	}
	root := SpanContextOf(traceparent)
	if !root.IsValid() {
		root = hopOf(ctx).root
	}
	if !root.IsValid() {
		return ctx
	}
	cause := trace.SpanContextFromContext(ctx)
	if cause.IsValid() && cause.TraceID() != root.TraceID() {
		trace.SpanFromContext(ctx).AddLink(trace.Link{SpanContext: root})
	}
	return context.WithValue(trace.ContextWithRemoteSpanContext(ctx, root), hopKey{}, hop{root: root, cause: cause})
}

// StartHop starts a span of the delivery whose root traceparent names, as a child of that
// root: a later hop's own work (a redrive, a lookup), which no span of the delivery's trace
// waits for. Off, or for a delivery with no trace, it starts none.
func StartHop(ctx context.Context, traceparent, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, NoSpan
	}
	root := SpanContextOf(traceparent)
	if !root.IsValid() {
		return ctx, NoSpan
	}
	ctx = context.WithValue(trace.ContextWithRemoteSpanContext(ctx, root), hopKey{}, hop{root: root})
	return Tracer().Start(ctx, name, opts...)
}

// Install makes tp the tracer provider and turns tracing on, as Setup does from the
// environment, and returns what turns it off again: for tests that record spans in process.
func Install(tp trace.TracerProvider) (restore func()) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	enabled.Store(true)
	return func() {
		enabled.Store(false)
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	}
}

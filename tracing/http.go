package tracing

import (
	"fmt"
	"net/http"
	neturl "net/url"
	"strconv"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Transport gives the HTTP client spans of a provider call (semantic conventions for HTTP) to
// rt's requests, as children of the call's span, and sends the W3C traceparent with them. url
// renders a request's URL for url.full, leaving out whatever could hold a secret (nil: scheme and
// host only, since a tenant's webhook URL can carry a token in its path or query). Off, it
// returns rt itself.
func Transport(rt http.RoundTripper, url func(*neturl.URL) string) http.RoundTripper {
	if !Enabled() {
		return rt
	}
	if url == nil {
		url = Origin
	}
	return &clientTransport{next: rt, url: url}
}

// Origin renders a URL as its scheme and host.
func Origin(u *neturl.URL) string { return u.Scheme + "://" + u.Host }

// WithoutQuery renders a URL without its query and user info (a provider's fixed API, whose
// path names no secret but whose query can name a phone number).
func WithoutQuery(u *neturl.URL) string { return u.Scheme + "://" + u.Host + u.EscapedPath() }

type clientTransport struct {
	next http.RoundTripper
	url  func(*neturl.URL) string
}

func (t *clientTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return t.next.RoundTrip(req)
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(req.Method), semconv.ServerAddress(req.URL.Hostname()),
		semconv.URLFull(t.url(req.URL))}
	if port, err := strconv.Atoi(req.URL.Port()); err == nil {
		attrs = append(attrs, semconv.ServerPort(port))
	}
	ctx, span := Tracer().Start(ctx, req.Method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	req = req.Clone(ctx)
	propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err)))
		span.SetStatus(codes.Error, err.Error())
		return resp, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode)))
		span.SetStatus(codes.Error, "")
	}
	return resp, nil
}

// Handler gives every request a server span, continuing the caller's traceparent if it sent one.
// The span is named by the method until the route is known (see Route). Off, it returns h.
func Handler(h http.Handler) http.Handler {
	if !Enabled() {
		return h
	}
	// otelhttp names the span after the route pattern the mux matched ("POST /v1/deliveries").
	return otelhttp.NewHandler(h, "http")
}

// Route names the request's server span after its route pattern ("POST /v1/deliveries"), and
// sets http.route.
func Route(r *http.Request, pattern string) {
	if !Enabled() {
		return
	}
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	span.SetName(pattern)
	if _, path, ok := cutMethod(pattern); ok {
		span.SetAttributes(semconv.HTTPRoute(path))
	}
}

func cutMethod(pattern string) (string, string, bool) {
	for i := range len(pattern) {
		if pattern[i] == ' ' {
			return pattern[:i], pattern[i+1:], true
		}
	}
	return "", pattern, pattern != ""
}

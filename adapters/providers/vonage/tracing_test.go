package vonage

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// TestClientSpanHoldsNoNumberOrSecret: traced, a send is an HTTP client span under the caller's
// span, recorded as POST <base>/sms/json with the status code, and no attribute holds the
// recipient's number, the API secret or the callback token (the secret and the number travel
// in the form body, the token in the callback URL). Not parallel: it turns tracing on for the
// process.
func TestClientSpanHoldsNoNumberOrSecret(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	defer tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))()
	b := setup(t) // after Install: the sender's transport makes spans only if tracing was on

	ctx, call := tracing.Start(context.Background(), "call vonage")
	const number = "+447700900001"
	if out := b.sender.Send(ctx, workMessage(number, "Your code is 123456")); out.Kind != domain.OutcomeAccepted {
		t.Fatalf("Send: %s (%s), want accepted", out.Kind, out.Err)
	}
	call.End()

	var client sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.SpanKind().String() == "client" {
			client = s
		}
	}
	if client == nil || client.Name() != "POST" || client.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Fatalf("no POST client span under the call's span: %v", recorder.Ended())
	}
	attrs := map[string]string{}
	for _, a := range client.Attributes() {
		v := a.Value.Emit()
		attrs[string(a.Key)] = v
		if strings.Contains(v, strings.TrimPrefix(number, "+")) || holdsSecret(v) != "" {
			t.Errorf("attribute %s = %q holds the number or a secret", a.Key, v)
		}
	}
	if want := strings.TrimSuffix(b.fake.URL(), "/") + "/sms/json"; attrs["url.full"] != want || attrs["http.response.status_code"] != "200" {
		t.Errorf("url.full %q, status %q; want %s, 200", attrs["url.full"], attrs["http.response.status_code"], want)
	}
}

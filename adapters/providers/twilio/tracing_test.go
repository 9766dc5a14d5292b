package twilio_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// TestClientSpansHoldNoNumberOrToken: traced, a send and a lookup by list (whose query names the
// recipient) are HTTP client spans under the caller's span, and their url.full is the API's
// path without the query: no phone number, and never the auth token, in any attribute. Not
// parallel: it turns tracing on for the process.
func TestClientSpansHoldNoNumberOrToken(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	defer tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))()
	b := setup(t) // after Install: the sender's transport makes spans only if tracing was on

	ctx, call := tracing.Start(context.Background(), "call twilio")
	msg := workMessage(recipient, "Your code is 123456")
	if out := b.sender.Send(ctx, msg); out.Kind != domain.OutcomeAccepted {
		t.Fatalf("Send: %s (%s), want accepted", out.Kind, out.Err)
	}
	if _, err := b.sender.Lookup(ctx, commands.LookupQuery{DeliveryID: msg.DeliveryID, Recipient: recipient, Text: "Your code is 123456",
		Since: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	call.End()

	base, err := url.Parse(b.fake.URL())
	if err != nil {
		t.Fatal(err)
	}
	var clients int
	for _, s := range recorder.Ended() {
		if s.SpanKind().String() != "client" {
			continue
		}
		clients++
		if s.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Errorf("client span %q is not under the call's span", s.Name())
		}
		for _, a := range s.Attributes() {
			v := a.Value.Emit()
			if strings.Contains(v, strings.TrimPrefix(recipient, "+")) || holdsToken(v) {
				t.Errorf("span %q attribute %s = %q holds the number or the token", s.Name(), a.Key, v)
			}
			if a.Key == "url.full" && (strings.Contains(v, "?") || !strings.HasPrefix(v, base.Scheme+"://"+base.Host+"/")) {
				t.Errorf("url.full %q: want the API's URL without a query", v)
			}
		}
	}
	if clients < 2 {
		t.Fatalf("%d client spans, want the send's and the lookup's", clients)
	}
}

package email

import (
	"context"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// TestSMTPSessionIsASpan: traced, an SMTP session is a client span under the caller's, naming
// the server and the outcome. Not parallel: it turns tracing on for the whole process.
func TestSMTPSessionIsASpan(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	defer tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))()
	fake := startFake(t, smtpfake.Config{})
	s := newSender(t, fake.Addr(), Config{})
	ctx, parent := tracing.Start(context.Background(), "call smtp")
	o := s.Send(ctx, work(deliveryA, "ada@example.org", `{"subject":"s","text":"t"}`))
	parent.End()
	wantOutcome(t, o, domain.OutcomeDelivered, 250, "250 2.0.0")
	var found bool
	for _, span := range recorder.Ended() {
		if span.Name() != "smtp send" {
			continue
		}
		found = true
		if span.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Error("the session's span is not under the call's")
		}
		attrs := map[string]string{}
		for _, a := range span.Attributes() {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		if attrs["server.address"] != s.cfg.Host || attrs["server.port"] != strconv.Itoa(s.cfg.Port) ||
			attrs["ledger.outcome"] != "delivered" || attrs["smtp.reply_code"] != "250" {
			t.Errorf("span attributes %v", attrs)
		}
	}
	if !found {
		t.Fatal("no smtp send span")
	}
}

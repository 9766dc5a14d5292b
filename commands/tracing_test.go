package commands_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// staleList is the view's answer to a redriver: these deliveries have waited too long.
type staleList []string

func (s staleList) StaleDeliveries(context.Context, time.Time, int) ([]string, error) { return s, nil }

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// outboxMeta returns the metadata of the outbox's messages, in order.
func outboxMeta(t *testing.T, f *operatorFixture) []map[string]string {
	t.Helper()
	rows, err := f.schema.Pool.Query(context.Background(), `SELECT payload::text FROM ledger_outbox_all ORDER BY "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]string
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var env struct {
			Metadata map[string]string `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(raw), &env); err != nil {
			t.Fatal(err)
		}
		out = append(out, env.Metadata)
	}
	return out
}

// TestLaterHopsAreWrittenUnderTheDeliverysRoot: traced, a retry's message (scheduled by the
// outcome's span) and a redrive's (the redrive's own span, under the delivery's root) name the
// delivery's root as their parent and root and what scheduled them as their link, so the next
// attempt is not a child of a span that ended long before; and the redriver's log line about the
// delivery carries its delivery_id, trace_id and span_id. Not parallel: it turns tracing on.
func TestLaterHopsAreWrittenUnderTheDeliverysRoot(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	defer tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))()
	f := newOperatorFixture(t)
	actx, accept := tracing.Start(context.Background(), "POST /v1/deliveries")
	accept.End()
	root := tracing.Traceparent(actx)
	d, events, err := domain.Accept(domain.AcceptSpec{ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Channel: "webhook",
		Recipient: "https://example.com/h", Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 3,
		Trace: root}, commands.SystemClock{}.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}

	// Attempt 1 fails transiently; its outcome, recorded in a span, schedules the retry.
	f.startAttempt(t, d, 1, false)
	octx, outcome := tracing.Start(trace.ContextWithRemoteSpanContext(context.Background(), accept.SpanContext()), "record outcome")
	if _, err := f.record.Handle(octx, commands.RecordOutcome{DeliveryID: d.ID(), Attempt: 1,
		Outcome: domain.Outcome{Kind: domain.OutcomeTransient, Provider: "webhook", Err: "503"}}); err != nil {
		t.Fatal(err)
	}
	outcome.End()
	meta := outboxMeta(t, f)
	if len(meta) != 1 {
		t.Fatalf("%d outbox messages, want the retry", len(meta))
	}
	if m := meta[0]; m[tracing.MetaTraceparent] != root || m[tracing.MetaRoot] != root || m[tracing.MetaLink] != tracing.Traceparent(octx) {
		t.Errorf("the retry's message %v: want the root %s as parent and root, the outcome %s as link", m, root, tracing.Traceparent(octx))
	}

	// The retry's message is lost: the redriver sends it again, in a span under the root.
	var log syncBuffer
	logger := slog.New(tracing.LogHandler(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	redriver := commands.NewRedriver(commands.NewRedriveHandler(f.store, f.topics, commands.SystemClock{}), staleList{d.ID()}, time.Minute, logger)
	if n := redriver.Round(context.Background(), time.Now().Add(time.Hour)); n != 1 {
		t.Fatalf("redrove %d deliveries, want 1; log:\n%s", n, log.String())
	}
	var redrive sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.Name() == "redrive webhook" {
			redrive = s
		}
	}
	if redrive == nil || redrive.Parent().SpanID() != accept.SpanContext().SpanID() {
		t.Fatalf("no redrive span under the delivery's root: %v", recorder.Ended())
	}
	meta = outboxMeta(t, f)
	if m := meta[len(meta)-1]; m[tracing.MetaTraceparent] != root || m[tracing.MetaLink] == "" ||
		tracing.SpanContextOf(m[tracing.MetaLink]).SpanID() != redrive.SpanContext().SpanID() {
		t.Errorf("the redriven message %v: want the root as parent, the redrive's span as link", m)
	}
	line := regexp.MustCompile(`msg="redrove delivery" delivery_id=` + d.ID() + ` trace_id=` + redrive.SpanContext().TraceID().String() +
		` span_id=` + redrive.SpanContext().SpanID().String())
	if !line.MatchString(log.String()) {
		t.Errorf("no log line of the redrive with delivery_id, trace_id and span_id; the log:\n%s", log.String())
	}
}

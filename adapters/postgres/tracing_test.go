package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/tracing"
)

// TestGroupCommitShowsInEveryCallersTrace: traced accepts that share a transaction each wait in
// a span of their own trace, linked to the shared commit's span; the commit's span links back to
// every one of them, and its statements are its children, named without their arguments. Not
// parallel: it turns tracing on for the whole process.
func TestGroupCommitShowsInEveryCallersTrace(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	restore := tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))
	defer restore()
	schema := pgtest.New(t)
	pool, err := postgres.Connect(context.Background(), schema.URL, "", 8) // made while traced: with the tracer
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	batcher := postgres.NewAcceptBatcher(postgres.NewEventStore(pool), 1, 64)
	defer batcher.Close()

	// Concurrent requests meet in one batch most of the time; try a few rounds until they do.
	var commit sdktrace.ReadOnlySpan
	for round := 0; round < 20 && commit == nil; round++ {
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, span := tracing.Tracer().Start(context.Background(), "request")
				defer span.End()
				_, events := acceptedEvents(t)
				key := fmt.Sprintf("r%d-%d", round, i)
				if _, _, err := batcher.RecordAccept(ctx, commands.AcceptRecord{Tenant: "acme", RequestKey: key,
					RequestHash: []byte(key), Events: events, Response: []byte(`{}`)}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for _, s := range recorder.Ended() {
			if s.Name() == "accept: group commit" && len(s.Links()) > 1 {
				commit = s
			}
		}
	}
	if commit == nil {
		t.Fatal("no shared commit of several traced requests in 20 rounds of 16")
	}
	spans := recorder.Ended()
	waits := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.Name() == "accept: wait for group commit" {
			waits[s.SpanContext().SpanID()] = s
		}
	}
	for _, l := range commit.Links() {
		w, ok := waits[l.SpanContext.SpanID()]
		if !ok {
			t.Fatalf("the commit links to %s, which is no request's wait", l.SpanContext.SpanID())
		}
		if w.SpanContext().TraceID() != l.SpanContext.TraceID() || commit.SpanContext().TraceID() == w.SpanContext().TraceID() {
			t.Fatal("the commit is in a caller's trace, or links across the wrong trace")
		}
		back := false
		for _, wl := range w.Links() {
			back = back || wl.SpanContext.SpanID() == commit.SpanContext().SpanID()
		}
		if !back {
			t.Errorf("request's wait span does not link back to the commit that served it")
		}
	}
	var statements int
	for _, s := range spans {
		if s.Parent().SpanID() == commit.SpanContext().SpanID() {
			statements++
			for _, a := range s.Attributes() {
				if a.Key == "db.query.text" && (len(a.Value.AsString()) == 0) {
					t.Errorf("statement span %q without its text", s.Name())
				}
			}
			if s.SpanKind() != trace.SpanKindClient {
				t.Errorf("statement span %q is %s, want client", s.Name(), s.SpanKind())
			}
		}
	}
	if statements == 0 {
		t.Errorf("no statement spans under the commit, want its batches")
	}
}

package apiclient_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/cmd/internal/apiclient"
	"github.com/deliveryledger/ledger/cmd/internal/app"
)

// startLedger runs a whole ledger (every role) over a fresh schema and queue prefix until the test
// ends, and returns its API's base URL and the bearer key of its tenant.
func startLedger(t *testing.T) (base, key string) {
	t.Helper()
	schema := pgtest.New(t)
	cfg := app.DefaultConfig()
	cfg.DatabaseURL = schema.URL
	cfg.AMQPURL = amqptest.URL()
	cfg.AMQPPrefix = amqptest.Prefix()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.APIKeys = "acme:acme-key"
	cfg.WebhookAllowCIDRs = "127.0.0.0/8"
	// Millisecond retries: the test's receiver refuses the first attempt.
	cfg.RetryBase = 20 * time.Millisecond
	cfg.RetryCap = 80 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.LogLevel = "warn"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ledger, err := app.Build(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// Build declared the broker topology; take it away again when the test ends.
	t.Cleanup(func() {
		if err := ledger.Topology().Delete(amqptest.Dial(t)); err != nil {
			t.Errorf("clean up topology: %v", err)
		}
	})
	done := make(chan error, 1)
	go func() { done <- ledger.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ledger stopped with: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("ledger did not stop")
		}
	})
	return "http://" + ledger.Addr(), "acme-key"
}

// TestGeneratedClientSwitchesOnEventTypes drives a live ledger through the client oapi-codegen
// generates from docs/openapi.yaml: it accepts a notification, reads the delivery until it is
// delivered, and reads its history, switching on each event's type to its own Go type with its
// own data. The first attempt is refused (503) so that the history holds a retry as well.
// Every request and answer also goes through openapitest, checked against the description.
func TestGeneratedClientSwitchesOnEventTypes(t *testing.T) {
	t.Parallel()
	base, key := startLedger(t)
	var calls atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(receiver.Close)

	client, err := apiclient.NewClientWithResponses(base,
		apiclient.WithHTTPClient(openapitest.Client(t)),
		apiclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+key)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	accepted, err := client.AcceptNotificationWithResponse(ctx,
		&apiclient.AcceptNotificationParams{IdempotencyKey: "client-" + uuid.Must(uuid.NewV7()).String()},
		apiclient.NotificationRequest{
			Payload:    apiclient.Payload{"text": "hello"},
			Recipients: []apiclient.NotificationRecipient{{Channel: "webhook", Recipient: receiver.URL}},
		})
	if err != nil {
		t.Fatal(err)
	}
	if accepted.JSON202 == nil || len(accepted.JSON202.Deliveries) != 1 {
		t.Fatalf("accept: %d %s", accepted.StatusCode(), accepted.Body)
	}
	id := accepted.JSON202.Deliveries[0].Id

	var delivery *apiclient.Delivery
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := client.GetDeliveryWithResponse(ctx, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.JSON200 != nil && got.JSON200.State == apiclient.StateDelivered {
			delivery = got.JSON200
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s not delivered after 20s: %d %s", id, got.StatusCode(), got.Body)
		}
	}
	if delivery.Id != id || delivery.Recipient != receiver.URL || delivery.Attempts != 2 {
		t.Fatalf("delivery: id %s, recipient %q, %d attempts; want %s, %q, 2", delivery.Id, delivery.Recipient, delivery.Attempts, id, receiver.URL)
	}

	history, err := client.GetDeliveryEventsWithResponse(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if history.JSON200 == nil {
		t.Fatalf("history: %d %s", history.StatusCode(), history.Body)
	}
	seen := map[string]int{}
	for i, ev := range history.JSON200.Events {
		typ, err := ev.Discriminator()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		value, err := ev.ValueByDiscriminator()
		if err != nil {
			t.Fatalf("event %d (%s): %v", i, typ, err)
		}
		seen[typ]++
		// Each event is its own type, with its own data: what the switch reads below is typed.
		var version int
		switch e := value.(type) {
		case apiclient.AcceptedEvent:
			version = e.Version
			if e.Data.Recipient != receiver.URL || e.Data.Channel != "webhook" || e.Data.Payload == nil || (*e.Data.Payload)["text"] != "hello" {
				t.Errorf("%s: data %+v", typ, e.Data)
			}
		case apiclient.QueuedEvent:
			version = e.Version
			if e.Data.Attempt < 1 {
				t.Errorf("%s: attempt %d", typ, e.Data.Attempt)
			}
		case apiclient.AttemptStartedEvent:
			version = e.Version
			if e.Data.Provider == "" {
				t.Errorf("%s: no provider", typ)
			}
		case apiclient.RetryScheduledEvent:
			version = e.Version
			if e.Data.Attempt != 1 || e.Data.StatusCode == nil || *e.Data.StatusCode != http.StatusServiceUnavailable ||
				e.Data.NextAttemptAt.IsZero() || e.State != apiclient.RetryScheduledEventStateRetrying {
				t.Errorf("%s: state %s, data %+v", typ, e.State, e.Data)
			}
		case apiclient.DeliveredEvent:
			version = e.Version
			if e.Data.Attempt != 2 || e.Data.StatusCode == nil || *e.Data.StatusCode != http.StatusOK ||
				e.State != apiclient.DeliveredEventStateDelivered {
				t.Errorf("%s: state %s, data %+v", typ, e.State, e.Data)
			}
		case apiclient.DeferredEvent, apiclient.DeadLetteredEvent, apiclient.OutcomeUnknownEvent,
			apiclient.ReconciledDeliveredEvent, apiclient.ReconciledDeadEvent, apiclient.ReconciledRetryEvent,
			apiclient.ReplayedEvent, apiclient.ProviderAcceptedEvent, apiclient.ReceiptRecordedEvent,
			apiclient.FailedOverEvent:
			t.Errorf("event %d: %s has no place in this delivery's history", i, typ)
			continue
		default:
			t.Fatalf("event %d: %s decoded to %T, not one of the event types", i, typ, value)
		}
		if version != i+1 {
			t.Errorf("event %d (%s): version %d, want %d", i, typ, version, i+1)
		}
	}
	want := map[string]int{"delivery.accepted": 1, "delivery.queued": 2, "delivery.attempt_started": 2,
		"delivery.retry_scheduled": 1, "delivery.delivered": 1}
	for typ, n := range want {
		if seen[typ] != n {
			t.Errorf("history has %d %s, want %d (all: %v)", seen[typ], typ, n, seen)
		}
	}
	if n := len(history.JSON200.Events); n != 7 {
		t.Errorf("history has %d events, want 7 (%v)", n, seen)
	}
}

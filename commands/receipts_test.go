package commands_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestCallbackWaitsForTheAcceptance: a provider's callback that arrives while the worker is
// still recording the provider's answer (its call is in flight, the operation id unknown) waits
// for the acceptance and decides the attempt; one about a message no delivery has matches none
// once the patience is spent; a lookup is never patient.
func TestCallbackWaitsForTheAcceptance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	topics := amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	clock := commands.SystemClock{}
	policies := func(string) domain.RetryPolicy { return domain.DefaultRetryPolicy() }
	receipts := commands.NewRecordReceiptHandler(store, store, topics, clock, policies)

	d := acceptedDelivery(t, store)
	start := commands.NewStartAttemptHandler(store, clock)
	msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(), Attempt: 1}
	if dec, _, err := start.Handle(ctx, commands.StartAttempt{Message: msg, Provider: "twilio"}); err != nil || dec != commands.StartProceed {
		t.Fatalf("start: %s %v", dec, err)
	}
	delivered := commands.Receipt{Provider: "twilio", OperationID: "SM1", Status: commands.ReceiptDelivered, ProviderStatus: "delivered"}
	// The callback comes first; the acceptance is recorded 300 ms later.
	got := make(chan error, 1)
	var res commands.ReceiptResult
	go func() {
		var err error
		res, err = receipts.Handle(ctx, commands.RecordReceipt{Receipt: delivered, Source: "receipt"})
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	record := commands.NewRecordOutcomeHandler(store, topics, clock, policies)
	if _, err := record.Handle(ctx, commands.RecordOutcome{DeliveryID: d.ID(), Attempt: 1,
		Outcome: domain.Outcome{Kind: domain.OutcomeAccepted, Provider: "twilio", ProviderOperationID: "SM1", StatusCode: 201}}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil || !res.Recorded || res.State != domain.StateDelivered || res.DeliveryID != d.ID() {
		t.Fatalf("early callback: %+v %v, want it recorded and the delivery delivered", res, err)
	}

	began := time.Now()
	_, err := receipts.Handle(ctx, commands.RecordReceipt{Receipt: commands.Receipt{Provider: "twilio", OperationID: "SM-none",
		Status: commands.ReceiptDelivered}, Source: "receipt"})
	if !errors.Is(err, commands.ErrReceiptUnmatched) || time.Since(began) < time.Second {
		t.Fatalf("callback for no message: %v after %s, want unmatched after waiting", err, time.Since(began))
	}
	began = time.Now()
	_, err = receipts.Handle(ctx, commands.RecordReceipt{Receipt: commands.Receipt{Provider: "twilio", OperationID: "SM-none",
		Status: commands.ReceiptDelivered}, Source: "lookup"})
	if !errors.Is(err, commands.ErrNotFound) || time.Since(began) > 500*time.Millisecond {
		t.Fatalf("lookup for no message: %v after %s, want not found at once", err, time.Since(began))
	}
}

// TestDeadWorkerAfterFailoverNamesTheProviderItCalled: a worker failed over from twilio to
// vonage and died during the call; the redelivered copy's unknown outcome names vonage.
func TestDeadWorkerAfterFailoverNamesTheProviderItCalled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	clock := commands.SystemClock{}
	d := acceptedDelivery(t, store)
	start := commands.NewStartAttemptHandler(store, clock)
	msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(), Attempt: 1}
	if dec, _, err := start.Handle(ctx, commands.StartAttempt{Message: msg, Provider: "twilio"}); err != nil || dec != commands.StartProceed {
		t.Fatalf("start: %s %v", dec, err)
	}
	events, err := store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	live, err := domain.Rehydrate(events)
	if err != nil {
		t.Fatal(err)
	}
	failed, err := live.FailOver("twilio", "vonage", "connection refused", clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Append(ctx, failed, nil); err != nil {
		t.Fatal(err)
	}
	// The new worker's breakers admit twilio first again; the history says vonage was called.
	if dec, _, err := start.Handle(ctx, commands.StartAttempt{Message: msg, Redelivered: true, Provider: "twilio"}); err != nil || dec != commands.StartRecordedUnknown {
		t.Fatalf("redelivered copy: %s %v", dec, err)
	}
	events, _ = store.Load(ctx, d.ID())
	final, _ := domain.Rehydrate(events)
	if final.State() != domain.StateUnknown || final.LastResult().Provider != "vonage" {
		t.Fatalf("state %s, unknown outcome of %q, want vonage", final.State(), final.LastResult().Provider)
	}
}

// rivalStore is the real event store with a rival writer: after each read of a delivery, the
// rival records a lookup on it first (as a reconciler racing the caller would), so that the
// caller's append meets a real version conflict every time.
type rivalStore struct {
	*postgres.EventStore
	t *testing.T
}

func (s rivalStore) Load(ctx context.Context, id string) ([]domain.Event, error) {
	events, err := s.EventStore.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	d, err := domain.Rehydrate(events)
	if err != nil {
		return nil, err
	}
	rival, err := d.RecordReceipt(domain.ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: domain.ReceiptPending,
		ProviderStatus: "sending", Source: "lookup"}, domain.DefaultRetryPolicy(), time.Now(), 0)
	if err != nil {
		s.t.Errorf("rival lookup: %v", err)
		return events, nil
	}
	if err := s.EventStore.Append(ctx, rival, nil); err != nil {
		s.t.Errorf("rival append: %v", err)
	}
	return events, nil
}

// TestReceiptThatLosesEveryRaceIsContended (issue 23, row 2): a callback whose delivery another
// writer moves before each of its appends gives up after decide's tries with ErrContended (the
// API's 503 with Retry-After, never a 500) and records nothing; sent again once the delivery is
// quiet, it is recorded and decides.
func TestReceiptThatLosesEveryRaceIsContended(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	topics := amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	clock := commands.SystemClock{}
	policies := func(string) domain.RetryPolicy { return domain.DefaultRetryPolicy() }

	d := acceptedDelivery(t, store)
	msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(), Attempt: 1}
	if dec, _, err := commands.NewStartAttemptHandler(store, clock).Handle(ctx, commands.StartAttempt{Message: msg, Provider: "twilio"}); err != nil || dec != commands.StartProceed {
		t.Fatalf("start: %s %v", dec, err)
	}
	if _, err := commands.NewRecordOutcomeHandler(store, topics, clock, policies).Handle(ctx, commands.RecordOutcome{DeliveryID: d.ID(), Attempt: 1,
		Outcome: domain.Outcome{Kind: domain.OutcomeAccepted, Provider: "twilio", ProviderOperationID: "SM1", StatusCode: 201}}); err != nil {
		t.Fatal(err)
	}
	delivered := commands.RecordReceipt{Receipt: commands.Receipt{Provider: "twilio", OperationID: "SM1", Status: commands.ReceiptDelivered,
		ProviderStatus: "delivered"}, Source: "receipt"}

	raced := commands.NewRecordReceiptHandler(rivalStore{store, t}, store, topics, clock, policies)
	if _, err := raced.Handle(ctx, delivered); !errors.Is(err, commands.ErrContended) {
		t.Fatalf("callback that loses every race: %v, want ErrContended", err)
	}
	if final := eventTypes(t, store, d.ID()); slices.Contains(final, domain.EventDelivered) {
		t.Fatalf("a contended callback recorded its decision: %v", final)
	}
	res, err := commands.NewRecordReceiptHandler(store, store, topics, clock, policies).Handle(ctx, delivered)
	if err != nil || !res.Recorded || res.State != domain.StateDelivered {
		t.Fatalf("the same callback on a quiet delivery: %+v %v, want it recorded and delivered", res, err)
	}
}

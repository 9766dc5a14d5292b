package commands_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestQueuedRecorderRecordsOnlyWhatWaits: in one batch of marks, the recorder records queued
// for a freshly accepted delivery (attempt 1, written without loading its stream) and for a
// delivery waiting in a delay tier (attempt 2, decided on its stream); it records nothing for a
// delivery a worker already took (queued and started by the worker) nor for a stale mark; and
// the recorded events are the ones the delivery itself would record.
func TestQueuedRecorderRecordsOnlyWhatWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	clock := commands.SystemClock{}
	start := commands.NewStartAttemptHandler(store, clock)
	startAttempt := func(d *domain.Delivery, attempt int) {
		t.Helper()
		msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: d.Tenant(), Channel: "webhook", Recipient: d.Recipient(), Attempt: attempt}
		if dec, _, err := start.Handle(ctx, commands.StartAttempt{Message: msg, Provider: "webhook"}); err != nil || dec != commands.StartProceed {
			t.Fatalf("start attempt %d of %s: %s %v", attempt, d.ID(), dec, err)
		}
	}

	fresh := acceptedDelivery(t, store)    // waits for attempt 1
	taken := acceptedDelivery(t, store)    // a worker took attempt 1 before the relay's mark
	retrying := acceptedDelivery(t, store) // attempt 1 failed; attempt 2 waits in a delay tier
	startAttempt(taken, 1)
	startAttempt(retrying, 1)
	topics := amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	policy := domain.RetryPolicy{Strategy: domain.Exponential{Base: time.Second, Cap: time.Second}, MaxAttempts: 3}
	record := commands.NewRecordOutcomeHandler(store, topics, clock, func(string) domain.RetryPolicy { return policy })
	if state, err := record.Handle(ctx, commands.RecordOutcome{DeliveryID: retrying.ID(), Attempt: 1,
		Outcome: domain.Outcome{Kind: domain.OutcomeTransient, Class: domain.ClassTransient, Provider: "webhook", StatusCode: 503}}); err != nil || state != domain.StateRetrying {
		t.Fatalf("record the failure of attempt 1: %s %v", state, err)
	}

	stranger := uuid.Must(uuid.NewV7()).String()
	recorder := commands.NewQueuedRecorder(store, clock, slog.New(slog.DiscardHandler))
	marks := []commands.QueuedMark{
		{DeliveryID: fresh.ID(), Tenant: fresh.Tenant(), Attempt: 1},
		{DeliveryID: taken.ID(), Tenant: taken.Tenant(), Attempt: 1},
		{DeliveryID: retrying.ID(), Tenant: retrying.Tenant(), Attempt: 2},
		{DeliveryID: retrying.ID(), Tenant: retrying.Tenant(), Attempt: 1}, // stale: a republished copy
		{DeliveryID: stranger, Tenant: "acme", Attempt: 1},                 // no such delivery
	}
	if err := recorder.Record(ctx, marks); err != nil {
		t.Fatal(err)
	}
	// Marks that arrive again (the relay republished its batch) change nothing.
	if err := recorder.Record(ctx, marks); err != nil {
		t.Fatal(err)
	}

	history := func(d *domain.Delivery) []domain.Event {
		t.Helper()
		events, err := store.Load(ctx, d.ID())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := domain.Rehydrate(events); err != nil {
			t.Fatalf("history of %s does not fold: %v", d.ID(), err)
		}
		return events
	}
	check := func(name string, d *domain.Delivery, want ...domain.EventType) []domain.Event {
		t.Helper()
		events := history(d)
		var got []domain.EventType
		for _, e := range events {
			got = append(got, e.Type)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: history %v, want %v", name, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: history %v, want %v", name, got, want)
			}
		}
		return events
	}
	if events, err := store.Load(ctx, stranger); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("a mark of no delivery: load gave %d events, %v; want none (not found)", len(events), err)
	}
	freshEvents := check("fresh", fresh, domain.EventAccepted, domain.EventQueued)
	if q := freshEvents[1]; q.Key != domain.KeyQueued(fresh.ID(), 1) || q.Version != 2 || q.Tenant != "acme" {
		t.Errorf("fresh: queued event %+v", q)
	}
	check("taken", taken, domain.EventAccepted, domain.EventQueued, domain.EventAttemptStarted)
	retried := check("retrying", retrying, domain.EventAccepted, domain.EventQueued, domain.EventAttemptStarted,
		domain.EventRetryScheduled, domain.EventQueued)
	if q := retried[4]; q.Key != domain.KeyQueued(retrying.ID(), 2) {
		t.Errorf("retrying: queued event key %q, want attempt 2's", q.Key)
	}
}

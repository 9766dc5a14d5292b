package commands_test

import (
	"context"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestLateOutcomeResolvesUnknown: a redelivered copy of an attempt's message marked it unknown
// while the worker that made the call was still alive; that worker's real outcome then resolves
// the unknown (with the evidence recorded) instead of being thrown away.
func TestLateOutcomeResolvesUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	topics := amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	clock := commands.SystemClock{}
	policy := domain.RetryPolicy{Strategy: domain.Exponential{Base: time.Second, Cap: time.Second}, MaxAttempts: 3}

	d := acceptedDelivery(t, store)
	start := commands.NewStartAttemptHandler(store, clock)
	msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(), Attempt: 1}
	if dec, _, err := start.Handle(ctx, commands.StartAttempt{Message: msg, Provider: "webhook"}); err != nil || dec != commands.StartProceed {
		t.Fatalf("first copy: %s %v", dec, err)
	}
	// The broker redelivers the message (the first worker's connection dropped mid-call).
	if dec, _, err := start.Handle(ctx, commands.StartAttempt{Message: msg, Redelivered: true, Provider: "webhook"}); err != nil || dec != commands.StartRecordedUnknown {
		t.Fatalf("redelivered copy: %s %v", dec, err)
	}
	record := commands.NewRecordOutcomeHandler(store, topics, clock, func(string) domain.RetryPolicy { return policy })
	state, err := record.Handle(ctx, commands.RecordOutcome{DeliveryID: d.ID(), Attempt: 1,
		Outcome: domain.Outcome{Kind: domain.OutcomeDelivered, Provider: "webhook", StatusCode: 200}})
	if err != nil {
		t.Fatal(err)
	}
	if state != domain.StateDelivered {
		t.Fatalf("state %s after the late outcome, want delivered", state)
	}
	stream, err := store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	var types []domain.EventType
	for _, e := range stream {
		types = append(types, e.Type)
	}
	want := []domain.EventType{domain.EventAccepted, domain.EventQueued, domain.EventAttemptStarted, domain.EventOutcomeUnknown, domain.EventReconciledDelivered}
	if len(types) != len(want) {
		t.Fatalf("history %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("history %v, want %v", types, want)
		}
	}
	// The same outcome again (a retried write) changes nothing.
	if state, err := record.Handle(ctx, commands.RecordOutcome{DeliveryID: d.ID(), Attempt: 1,
		Outcome: domain.Outcome{Kind: domain.OutcomeDelivered}}); err != nil || state != domain.StateDelivered {
		t.Fatalf("repeat: %s %v", state, err)
	}
	if again, _ := store.Load(ctx, d.ID()); len(again) != len(want) {
		t.Fatalf("repeat appended events: %d", len(again))
	}
}

package commands_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/mechanisms/limit"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// countingSender counts calls and delivers.
type countingSender struct{ calls int }

func (s *countingSender) Provider() string   { return "webhook" }
func (s *countingSender) Deduplicates() bool { return false }
func (s *countingSender) Send(context.Context, commands.WorkMessage) domain.Outcome {
	s.calls++
	return domain.Outcome{Kind: domain.OutcomeDelivered, Provider: "webhook", StatusCode: 200}
}

// TestRedeliveredStartedAttemptIsUnknownEvenWhenLimited: a worker died mid-call; the redelivered
// copy meets a full host limit. It must still record the unknown outcome, not vanish (a message
// acked without a record would leave the delivery in processing forever).
func TestRedeliveredStartedAttemptIsUnknownEvenWhenLimited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	clock := commands.SystemClock{}
	topics := amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	policy := domain.RetryPolicy{Strategy: domain.Exponential{Base: time.Second, Cap: time.Second}, MaxAttempts: 3}

	d, events, err := domain.Accept(domain.AcceptSpec{ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Channel: "webhook",
		Recipient: "https://slow.example.com/h", Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 3}, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	start := commands.NewStartAttemptHandler(store, clock)
	msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(),
		Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, Attempt: 1, MaxAttempts: 3, DueAt: clock.Now()}
	// The first worker starts the attempt, then dies before recording an outcome.
	if dec, _, err := start.Handle(ctx, commands.StartAttempt{Message: msg, Provider: "webhook"}); err != nil || dec != commands.StartProceed {
		t.Fatalf("first copy: %s %v", dec, err)
	}

	lim, err := limit.New(limit.Config{DefaultHost: limit.Rule{Concurrency: 1}}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	held, ok, _, _ := lim.Acquire("webhook", limit.HostOf(msg.Recipient))
	if !ok {
		t.Fatal("could not take the host's only slot")
	}
	defer held()
	sender := &countingSender{}
	channels, err := commands.NewChannels(commands.Channel{Name: "webhook", Providers: []commands.Sender{sender},
		Check: func(string, json.RawMessage) error { return nil }, Destination: limit.HostOf})
	if err != nil {
		t.Fatal(err)
	}
	attempts, err := commands.NewAttemptHandler(commands.AttemptConfig{Store: store, Topics: topics, Clock: clock,
		Policies: func(string) domain.RetryPolicy { return policy }, Channels: channels, Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}

	verdict := attempts.Handle(ctx, commands.Attempt{Message: msg, MessageID: uuid.Must(uuid.NewV7()).String(), Redelivered: true})
	if verdict != commands.Ack {
		t.Fatalf("verdict %v, want ack", verdict)
	}
	stream, err := store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	if last := stream[len(stream)-1]; last.Type != domain.EventOutcomeUnknown {
		t.Fatalf("last event %s, want %s", last.Type, domain.EventOutcomeUnknown)
	}
	if sender.calls != 0 {
		t.Fatalf("the provider was called %d times for an attempt whose outcome is unknown", sender.calls)
	}
}

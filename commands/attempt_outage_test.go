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

// TestDatabaseOutageKeepsTheMessage: the database is unreachable when a worker takes a message,
// for longer than a few retries last. The worker keeps the message and waits for the database
// instead of giving it back: on quorum queues every message given back counts against the
// delivery limit, and an outage of a quarter of a minute used to push healthy messages into the
// dead queue. When the database answers again, the attempt runs and is recorded.
func TestDatabaseOutageKeepsTheMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.New(t)
	clock := commands.SystemClock{}
	d, events, err := domain.Accept(domain.AcceptSpec{ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Channel: "webhook",
		Recipient: "https://hooks.example.com/h", Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 3}, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.NewEventStore(schema.Pool).Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}

	// The worker reaches the database through a proxy that the test cuts.
	proxy := pgtest.NewProxy(t)
	pool, err := postgres.Connect(ctx, proxy.Rewrite(pgtest.URL()), schema.Name, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := postgres.NewEventStore(pool)
	sender := &countingSender{}
	channels, err := commands.NewChannels(commands.Channel{Name: "webhook", Providers: []commands.Sender{sender},
		Check: func(string, json.RawMessage) error { return nil }, Destination: limit.HostOf})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limit.New(limit.Config{}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	attempts, err := commands.NewAttemptHandler(commands.AttemptConfig{Store: store, Clock: clock, Channels: channels, Limiter: lim,
		Topics: amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}},
		Policies: func(string) domain.RetryPolicy {
			return domain.RetryPolicy{Strategy: domain.Exponential{Base: time.Second, Cap: time.Second}, MaxAttempts: 3}
		}})
	if err != nil {
		t.Fatal(err)
	}
	msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(),
		Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, Attempt: 1, MaxAttempts: 3, DueAt: clock.Now()}

	proxy.Cut()
	const outage = 3 * time.Second // the old budget was five tries, 0.75 s
	restored := time.AfterFunc(outage, proxy.Restore)
	defer restored.Stop()
	began := time.Now()
	verdict := attempts.Handle(ctx, commands.Attempt{Message: msg, MessageID: uuid.Must(uuid.NewV7()).String()})
	if verdict != commands.Ack {
		t.Fatalf("verdict %v after %s of a %s outage, want ack: the message was given back", verdict, time.Since(began).Round(time.Millisecond), outage)
	}
	if waited := time.Since(began); waited < outage {
		t.Fatalf("handled in %s, before the database came back after %s", waited, outage)
	}
	stream, err := postgres.NewEventStore(schema.Pool).Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	if last := stream[len(stream)-1]; last.Type != domain.EventDelivered || sender.calls != 1 {
		t.Fatalf("last event %s after %d calls, want %s after 1", last.Type, sender.calls, domain.EventDelivered)
	}
}

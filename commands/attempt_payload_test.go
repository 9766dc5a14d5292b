package commands_test

import (
	"context"
	"encoding/json"
	"strings"
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

// TestAttemptWithAnExpiredPayloadCallsNoProvider: a replay that began before its payload
// expired fails, and its retry's message is built from a history whose payload is gone: the
// body it carries is null. The attempt must not send that as the notification: it ends the
// delivery dead, its error saying why, with no call.
func TestAttemptWithAnExpiredPayloadCallsNoProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	clock := commands.SystemClock{}
	topics := amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	policy := domain.RetryPolicy{Strategy: domain.Exponential{Base: time.Second, Cap: time.Second}, MaxAttempts: 3}
	payload := json.RawMessage(`{"text":"your code is 1234"}`)
	notification := uuid.Must(uuid.NewV7()).String()
	d, events, err := domain.Accept(domain.AcceptSpec{ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Channel: "webhook",
		NotificationID: notification, Recipient: "http://127.0.0.1:9/h", Payload: payload, Priority: domain.PriorityNormal, MaxAttempts: 3}, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.RecordAccept(ctx, commands.AcceptRecord{Tenant: "acme", RequestKey: "k1", RequestHash: []byte{1},
		NotificationID: notification, Payload: payload, PayloadApart: true, Events: events, Response: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// The retention pass expires the body, as ExpirePayloads does.
	if tag, err := schema.Pool.Exec(ctx, `UPDATE notification_payloads SET size = octet_length(payload::text), payload = NULL, expired_at = now()`); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expire the payload: %v (%d rows)", err, tag.RowsAffected())
	}
	sender := &countingSender{}
	channels, err := commands.NewChannels(commands.Channel{Name: "webhook", Providers: []commands.Sender{sender},
		Check: func(string, json.RawMessage) error { return nil }, Destination: limit.HostOf})
	if err != nil {
		t.Fatal(err)
	}
	attempts, err := commands.NewAttemptHandler(commands.AttemptConfig{Store: store, Topics: topics, Clock: clock,
		Policies: func(string) domain.RetryPolicy { return policy }, Channels: channels})
	if err != nil {
		t.Fatal(err)
	}
	msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(),
		Payload: json.RawMessage(`null`), Priority: domain.PriorityNormal, Attempt: 1, MaxAttempts: 3, DueAt: clock.Now()}
	if verdict := attempts.Handle(ctx, commands.Attempt{Message: msg, MessageID: uuid.Must(uuid.NewV7()).String()}); verdict != commands.Ack {
		t.Fatalf("verdict %v, want ack", verdict)
	}
	if sender.calls != 0 {
		t.Fatalf("the provider was called %d times with no payload to send", sender.calls)
	}
	stream, err := store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	after, err := domain.Rehydrate(stream)
	if err != nil {
		t.Fatal(err)
	}
	if after.State() != domain.StateDead || !strings.Contains(string(stream[len(stream)-1].Data), "payload expired") {
		t.Fatalf("after the attempt: %s, last event %s %s; want dead, its error naming the expired payload",
			after.State(), stream[len(stream)-1].Type, stream[len(stream)-1].Data)
	}
}

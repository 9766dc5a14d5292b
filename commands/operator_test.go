package commands_test

import (
	"context"
	"encoding/json"
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

// operatorFixture is a schema with a store, the command handlers an operator uses, and the ones
// that bring a delivery to dead or unknown.
type operatorFixture struct {
	schema    *pgtest.Schema
	store     *postgres.EventStore
	topics    amqp.Topology
	start     *commands.StartAttemptHandler
	record    *commands.RecordOutcomeHandler
	replay    *commands.ReplayHandler
	reconcile *commands.ReconcileHandler
}

func newOperatorFixture(t *testing.T) *operatorFixture {
	t.Helper()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	topics := amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second, time.Minute}}
	clock := commands.SystemClock{}
	policies := func(string) domain.RetryPolicy {
		return domain.RetryPolicy{Strategy: domain.Exponential{Base: time.Second, Cap: time.Second}, MaxAttempts: 3}
	}
	return &operatorFixture{schema: schema, store: store, topics: topics,
		start:     commands.NewStartAttemptHandler(store, clock),
		record:    commands.NewRecordOutcomeHandler(store, topics, clock, policies),
		replay:    commands.NewReplayHandler(store, topics, clock),
		reconcile: commands.NewReconcileHandler(store, topics, clock, policies),
	}
}

// startAttempt records the start of attempt n of d.
func (f *operatorFixture) startAttempt(t *testing.T, d *domain.Delivery, n int, redelivered bool) commands.StartDecision {
	t.Helper()
	msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(), Attempt: n}
	dec, _, err := f.start.Handle(context.Background(), commands.StartAttempt{Message: msg, Redelivered: redelivered, Provider: "webhook"})
	if err != nil {
		t.Fatalf("start attempt %d: %v", n, err)
	}
	return dec
}

// outboxWork returns the work messages in the outbox, in order, with their destination queues.
func (f *operatorFixture) outboxWork(t *testing.T) (queues []string, msgs []commands.WorkMessage, markQueued []string) {
	t.Helper()
	rows, err := f.schema.Pool.Query(context.Background(), `SELECT payload::text FROM ledger_outbox_all ORDER BY "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var env struct {
			DestinationTopic string            `json:"destination_topic"`
			Payload          []byte            `json:"payload"`
			Metadata         map[string]string `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(raw), &env); err != nil {
			t.Fatal(err)
		}
		m, err := commands.DecodeWorkMessage(env.Payload)
		if err != nil {
			t.Fatal(err)
		}
		queues, msgs, markQueued = append(queues, env.DestinationTopic), append(msgs, m), append(markQueued, env.Metadata[commands.MetaMarkQueued])
	}
	return queues, msgs, markQueued
}

func eventTypes(t *testing.T, store *postgres.EventStore, id string) []domain.EventType {
	t.Helper()
	stream, err := store.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var types []domain.EventType
	for _, e := range stream {
		types = append(types, e.Type)
	}
	return types
}

// TestReplayQueuesTheNextAttempt: a dead delivery replayed is queued again with its next
// attempt's work message in the outbox, which a worker then starts; the replay is refused for
// another tenant and for a delivery that is not dead, and recorded once however often it is asked.
func TestReplayQueuesTheNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newOperatorFixture(t)
	d := acceptedDelivery(t, f.store)
	if dec := f.startAttempt(t, d, 1, false); dec != commands.StartProceed {
		t.Fatalf("start: %s", dec)
	}
	if _, err := f.replay.Handle(ctx, commands.Replay{Tenant: "acme", DeliveryID: d.ID()}); !errors.Is(err, domain.ErrNotDead) {
		t.Fatalf("replay while processing: %v, want ErrNotDead", err)
	}
	if state, err := f.record.Handle(ctx, commands.RecordOutcome{DeliveryID: d.ID(), Attempt: 1,
		Outcome: domain.Outcome{Kind: domain.OutcomePermanent, Provider: "webhook", StatusCode: 410}}); err != nil || state != domain.StateDead {
		t.Fatalf("permanent failure: %s %v", state, err)
	}

	if _, err := f.replay.Handle(ctx, commands.Replay{Tenant: "globex", DeliveryID: d.ID()}); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("replay by another tenant: %v, want ErrNotFound", err)
	}
	after, err := f.replay.Handle(ctx, commands.Replay{Tenant: "acme", DeliveryID: d.ID(), Reason: "receiver fixed"})
	if err != nil {
		t.Fatal(err)
	}
	if after.State() != domain.StateQueued || after.Attempt() != 2 {
		t.Fatalf("after replay: %s attempt %d, want queued attempt 2", after.State(), after.Attempt())
	}
	again, err := f.replay.Handle(ctx, commands.Replay{Tenant: "acme", DeliveryID: d.ID()})
	if !errors.Is(err, domain.ErrNotDead) || again.State() != domain.StateQueued {
		t.Fatalf("second replay: %v (state %v), want ErrNotDead on the queued delivery", err, again)
	}

	queues, msgs, mark := f.outboxWork(t)
	// The accept's work message is not in this fixture's outbox (acceptedDelivery appends the
	// accepted event alone): the dead letter, then the replayed attempt.
	if len(msgs) != 2 || queues[1] != f.topics.Work("webhook", domain.PriorityNormal) || msgs[1].Attempt != 2 || mark[1] != "" {
		t.Fatalf("outbox %v %+v mark-queued %q, want the dead letter then attempt 2 on the work queue, not marked", queues, msgs, mark)
	}
	if queues[0] != f.topics.Dead("webhook") {
		t.Fatalf("first outbox message to %s, want the dead queue", queues[0])
	}
	if dec := f.startAttempt(t, d, 2, false); dec != commands.StartProceed {
		t.Fatalf("worker on the replayed message: %s, want proceed", dec)
	}
	want := []domain.EventType{domain.EventAccepted, domain.EventQueued, domain.EventAttemptStarted,
		domain.EventDeadLettered, domain.EventReplayed, domain.EventAttemptStarted}
	if got := eventTypes(t, f.store, d.ID()); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
}

// TestReconcileResolvesAnUnknownOutcome: "not sent" schedules the next attempt through the
// outbox; the resolution is refused once the delivery is no longer unknown.
func TestReconcileResolvesAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newOperatorFixture(t)
	d := acceptedDelivery(t, f.store)
	f.startAttempt(t, d, 1, false)
	// The broker redelivers the message: the worker that started the attempt is gone.
	if dec := f.startAttempt(t, d, 1, true); dec != commands.StartRecordedUnknown {
		t.Fatalf("redelivered copy: %s, want recorded unknown", dec)
	}
	bad := commands.Reconcile{Tenant: "acme", DeliveryID: d.ID(), Outcome: domain.Outcome{Kind: domain.OutcomeUnknown}, Evidence: "x"}
	if _, err := f.reconcile.Handle(ctx, bad); err == nil {
		t.Fatal("an unknown outcome resolved an unknown outcome")
	}
	var decisions []string
	f.reconcile.OnDecided = func(channel, decision string) { decisions = append(decisions, channel+"/"+decision) }
	after, err := f.reconcile.Handle(ctx, commands.Reconcile{Tenant: "acme", DeliveryID: d.ID(),
		Outcome: domain.Outcome{Kind: domain.OutcomeTransient}, Evidence: "receiver's access log has no request", Actor: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if after.State() != domain.StateRetrying || after.NextAttemptAt() == nil {
		t.Fatalf("after reconcile: %s next %v, want retrying with a due time", after.State(), after.NextAttemptAt())
	}
	if !slices.Equal(decisions, []string{"webhook/reconciled_retrying"}) {
		t.Fatalf("decisions told %v, want one reconciled_retrying", decisions)
	}
	queues, msgs, _ := f.outboxWork(t)
	if len(msgs) != 1 || msgs[0].Attempt != 2 || queues[0] == f.topics.Work("webhook", domain.PriorityNormal) {
		t.Fatalf("outbox %v %+v, want attempt 2 in a delay tier", queues, msgs)
	}
	if _, err := f.reconcile.Handle(ctx, commands.Reconcile{Tenant: "acme", DeliveryID: d.ID(),
		Outcome: domain.Outcome{Kind: domain.OutcomeDelivered}, Evidence: "late receipt"}); !errors.Is(err, domain.ErrNotUnknown) {
		t.Fatalf("second resolution: %v, want ErrNotUnknown", err)
	}
	if len(decisions) != 1 {
		t.Fatalf("a refused resolution was counted: %v", decisions)
	}
	stream, err := f.store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	data, err := domain.DecodeData(stream[len(stream)-1])
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := data.(*domain.Resolution); !ok || res.Evidence != "receiver's access log has no request" || res.Actor != "ops" {
		t.Fatalf("last event data %+v, want the resolution with its evidence and actor", data)
	}
}

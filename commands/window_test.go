package commands_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// setClock is a clock the test moves.
type setClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *setClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *setClock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// scriptedSender answers each call with the next outcome kind of its script, then delivers.
type scriptedSender struct {
	script []domain.OutcomeKind
	calls  []time.Time
	clock  *setClock
}

func (s *scriptedSender) Provider() string   { return "webhook" }
func (s *scriptedSender) Deduplicates() bool { return false }
func (s *scriptedSender) Send(context.Context, commands.WorkMessage) domain.Outcome {
	s.calls = append(s.calls, s.clock.Now())
	kind := domain.OutcomeDelivered
	if len(s.calls) <= len(s.script) {
		kind = s.script[len(s.calls)-1]
	}
	status := 200
	if kind == domain.OutcomeTransient {
		status = 503
	}
	return domain.Outcome{Kind: kind, Provider: "webhook", StatusCode: status}
}

// TestRetryDueInClosedHoursWaitsForTheOpening: a delivery whose window is 09:00-10:00 UTC on
// weekdays is attempted at 09:59:59 (open) and fails transiently; its retry, due an hour later
// (closed), is not made but deferred to the next opening, Monday 09:00, when it is sent. Every
// attempt is made inside the window, on the real PostgreSQL.
func TestRetryDueInClosedHoursWaitsForTheOpening(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	friday := time.Date(2026, 12, 4, 9, 59, 59, 0, time.UTC)
	clock := &setClock{t: friday}
	topics := amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	// An hour's wait, whatever the jitter, takes the retry past 10:00.
	policy := domain.RetryPolicy{Strategy: domain.Exponential{Base: time.Hour, Cap: time.Hour}, MaxAttempts: 3}
	window := &domain.Window{Timezone: "UTC", Days: []string{"mon", "tue", "wed", "thu", "fri"}, Start: "09:00", End: "10:00"}

	d, events, err := domain.Accept(domain.AcceptSpec{ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Channel: "webhook",
		Recipient: "https://example.com/h", Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 3,
		Window: window}, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	sender := &scriptedSender{script: []domain.OutcomeKind{domain.OutcomeTransient}, clock: clock}
	channels, err := commands.NewChannels(commands.Channel{Name: "webhook", Providers: []commands.Sender{sender},
		Check: func(string, json.RawMessage) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	attempts, err := commands.NewAttemptHandler(commands.AttemptConfig{Store: store, Topics: topics, Clock: clock,
		Policies: func(string) domain.RetryPolicy { return policy }, Channels: channels})
	if err != nil {
		t.Fatal(err)
	}
	handle := func(attempt int, due time.Time) {
		t.Helper()
		msg := commands.WorkMessage{DeliveryID: d.ID(), Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(),
			Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, Attempt: attempt, MaxAttempts: 3, DueAt: due, Window: window}
		if v := attempts.Handle(ctx, commands.Attempt{Message: msg, MessageID: uuid.Must(uuid.NewV7()).String()}); v != commands.Ack {
			t.Fatalf("attempt %d at %s: verdict %v, want ack", attempt, clock.Now(), v)
		}
	}
	last := func(typ domain.EventType) json.RawMessage {
		t.Helper()
		stream, err := store.Load(ctx, d.ID())
		if err != nil {
			t.Fatal(err)
		}
		e := stream[len(stream)-1]
		if e.Type != typ {
			t.Fatalf("last event %s, want %s", e.Type, typ)
		}
		return e.Data
	}

	handle(1, friday)
	var retry domain.AttemptResult
	if err := json.Unmarshal(last(domain.EventRetryScheduled), &retry); err != nil || retry.NextAttemptAt == nil {
		t.Fatalf("retry scheduled: %+v %v", retry, err)
	}
	due := *retry.NextAttemptAt
	clock.set(due)
	handle(2, due)
	var held domain.Deferred
	if err := json.Unmarshal(last(domain.EventDeferred), &held); err != nil {
		t.Fatal(err)
	}
	monday := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	if held.Reason != domain.DeferWindow || !held.Until.Equal(monday) || held.Attempt != 2 {
		t.Fatalf("retry due %s deferred %+v, want attempt 2 held for the window until %s", due, held, monday)
	}
	if len(sender.calls) != 1 {
		t.Fatalf("%d calls, want 1: the retry in closed hours was sent", len(sender.calls))
	}
	clock.set(monday)
	handle(2, monday)
	last(domain.EventDelivered)
	for _, at := range sender.calls {
		if opens, _ := window.Opening(at); !opens.Equal(at) {
			t.Errorf("a call at %s, outside the window", at)
		}
	}
}

package commands

import (
	"context"
	"fmt"
	"time"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// DeferAttempt holds a queued attempt back (a rate limit or a concurrency cap said no, or the
// delivery's window is closed): it records EventDeferred with until = now + Delay, and sends the
// message due then through the delay queues (Topics.Hop), in one transaction. The message hops
// until it is due (Reroute), so the until recorded is when the attempt may start, and it starts
// then, whatever the length of the wait. No attempt is consumed.
type DeferAttempt struct {
	Message WorkMessage
	Reason  string
	Delay   time.Duration
	// Until, when set, is the time the attempt waits for (a window's opening) instead of now +
	// Delay: an instant named in advance stays that instant however long the write took.
	Until time.Time
}

// DeferAttemptHandler handles DeferAttempt.
type DeferAttemptHandler struct {
	store  EventStore
	topics Topics
	clock  Clock
}

// NewDeferAttemptHandler builds the command.
func NewDeferAttemptHandler(store EventStore, topics Topics, clock Clock) *DeferAttemptHandler {
	return &DeferAttemptHandler{store: store, topics: topics, clock: clock}
}

// Handle records the deferral. It returns false when the message no longer fits the delivery
// (another copy moved it on), in which case nothing is written and the message can be dropped.
func (h *DeferAttemptHandler) Handle(ctx context.Context, cmd DeferAttempt) (bool, error) {
	id, attempt := cmd.Message.DeliveryID, cmd.Message.Attempt
	var deferred bool
	_, err := decide(ctx, h.store, id, nil, fmt.Sprintf("defer attempt %d of %s", attempt, id), func(d *domain.Delivery) (decision, error) {
		now := h.clock.Now()
		until := now.Add(cmd.Delay)
		if !cmd.Until.IsZero() {
			until = cmd.Until
		}
		topic, _ := h.topics.Hop(d.Channel(), until.Sub(now))
		var toAppend []domain.Event
		if d.AwaitsQueue(attempt) {
			queued, err := d.Queue(now)
			if err != nil {
				return decision{}, err
			}
			toAppend = queued
		}
		if d.State() != domain.StateQueued || d.Attempt() != attempt {
			deferred = false
			return decision{}, nil
		}
		held, err := d.Defer(cmd.Reason, until, now)
		if err != nil {
			return decision{}, err
		}
		// The held attempt comes back later: a later hop of the delivery's trace.
		msg, err := workMessageFor(tracing.Continue(ctx, d.Trace()), d, topic, attempt, until, held[0].Key, false)
		if err != nil {
			return decision{}, err
		}
		deferred = true
		return decision{events: append(toAppend, held...), outbox: []OutboxMessage{msg}}, nil
	})
	if err != nil {
		return false, err
	}
	return deferred, nil
}

// Reroute sends a message that arrived before its due time on through the delay queues (its
// delay was longer than the hop it took: Topics.Hop rounds down). It is transport only: nothing
// is appended to the ledger, and the message keeps its attempt and its due time.
type Reroute struct {
	Message WorkMessage
	// MessageID identifies this hop, so a republished hop keeps its id.
	MessageID string
}

// RerouteHandler handles Reroute through the outbox, so the hop is as durable as any message.
type RerouteHandler struct {
	store  EventStore
	topics Topics
	clock  Clock
}

// NewRerouteHandler builds the command.
func NewRerouteHandler(store EventStore, topics Topics, clock Clock) *RerouteHandler {
	return &RerouteHandler{store: store, topics: topics, clock: clock}
}

// Handle writes the hop to the outbox.
func (h *RerouteHandler) Handle(ctx context.Context, cmd Reroute) error {
	m := cmd.Message
	topic, _ := h.topics.Hop(m.Channel, m.DueAt.Sub(h.clock.Now()))
	body, err := encodeWork(m)
	if err != nil {
		return err
	}
	msg := OutboxMessage{
		ID:           cmd.MessageID,
		Topic:        topic,
		PartitionKey: m.DeliveryID,
		Payload:      body,
		Metadata:     map[string]string{MetaPriority: string(m.Priority)},
	}
	// The hop comes back later: under the root of the delivery's trace that ctx's message named.
	tracing.Inject(tracing.Continue(ctx, ""), msg.Metadata)
	if err := h.store.Append(ctx, nil, []OutboxMessage{msg}); err != nil {
		return fmt.Errorf("reroute %s attempt %d: %w", m.DeliveryID, m.Attempt, err)
	}
	return nil
}

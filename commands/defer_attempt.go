package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// DeferAttempt holds a queued attempt back (a rate limit or a concurrency cap said no): it
// records EventDeferred and sends the message through a delay tier, in one transaction. No
// attempt is consumed.
type DeferAttempt struct {
	Message WorkMessage
	Reason  string
	Delay   time.Duration
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
	for range maxConflictRetries {
		events, err := h.store.Load(ctx, id)
		if err != nil {
			return false, fmt.Errorf("defer attempt %d of %s: %w", attempt, id, err)
		}
		d, err := domain.Rehydrate(events)
		if err != nil {
			return false, err
		}
		now := h.clock.Now()
		until := now.Add(cmd.Delay)
		var toAppend []domain.Event
		if awaitsQueue(d, attempt) {
			if toAppend, err = d.Queue(now); err != nil {
				return false, err
			}
		}
		if d.State() != domain.StateQueued || d.Attempt() != attempt {
			return false, nil
		}
		deferred, err := d.Defer(cmd.Reason, until, now)
		if err != nil {
			return false, err
		}
		toAppend = append(toAppend, deferred...)
		msg, err := workMessageFor(d, h.topics.Retry(d.Channel(), cmd.Delay), attempt, until, deferred[0].Key, false)
		if err != nil {
			return false, err
		}
		err = h.store.Append(ctx, toAppend, []OutboxMessage{msg})
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, ErrDuplicate), errors.Is(err, ErrVersionConflict):
			continue
		default:
			return false, fmt.Errorf("defer attempt %d of %s: %w", attempt, id, err)
		}
	}
	return false, fmt.Errorf("defer attempt %d of %s: %w after %d tries", attempt, id, ErrVersionConflict, maxConflictRetries)
}

// Reroute sends a message that arrived before its due time back through the delay tiers (its
// delay was longer than the largest tier). It is transport only: nothing is appended to the
// ledger, and the message keeps its attempt.
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
	delay := m.DueAt.Sub(h.clock.Now())
	body, err := encodeWork(m)
	if err != nil {
		return err
	}
	msg := OutboxMessage{
		ID:           cmd.MessageID,
		Topic:        h.topics.Retry(m.Channel, delay),
		PartitionKey: m.DeliveryID,
		Payload:      body,
		Metadata:     map[string]string{MetaPriority: string(m.Priority)},
	}
	if err := h.store.Append(ctx, nil, []OutboxMessage{msg}); err != nil {
		return fmt.Errorf("reroute %s attempt %d: %w", m.DeliveryID, m.Attempt, err)
	}
	return nil
}

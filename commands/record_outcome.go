package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/deliveryledger/ledger/domain"
)

// RecordOutcome closes an attempt with the adapter's typed outcome.
type RecordOutcome struct {
	DeliveryID string
	Attempt    int
	Outcome    domain.Outcome
}

// Policies gives the retry policy of a channel.
type Policies func(channel string) domain.RetryPolicy

// RecordOutcomeHandler appends the outcome event and, for a retry, the delayed work message
// through the outbox in the same transaction, so the broker never disagrees with the ledger.
type RecordOutcomeHandler struct {
	store    EventStore
	topics   Topics
	clock    Clock
	policies Policies
	jitter   func() float64
}

// NewRecordOutcomeHandler builds the command.
func NewRecordOutcomeHandler(store EventStore, topics Topics, clock Clock, policies Policies) *RecordOutcomeHandler {
	return &RecordOutcomeHandler{store: store, topics: topics, clock: clock, policies: policies, jitter: rand.Float64}
}

// Handle records the outcome and returns the delivery's state after it. A repeat for an attempt
// that is already closed records nothing and returns the current state.
func (h *RecordOutcomeHandler) Handle(ctx context.Context, cmd RecordOutcome) (domain.State, error) {
	for range maxConflictRetries {
		events, err := h.store.Load(ctx, cmd.DeliveryID)
		if err != nil {
			return "", fmt.Errorf("record outcome of %s: %w", cmd.DeliveryID, err)
		}
		d, err := domain.Rehydrate(events)
		if err != nil {
			return "", err
		}
		now := h.clock.Now()
		closed, err := d.RecordOutcome(cmd.Attempt, cmd.Outcome, h.policies(d.Channel()), now, h.jitter())
		if errors.Is(err, domain.ErrStaleAttempt) {
			return d.State(), nil
		}
		if err != nil {
			return "", err
		}
		var msg OutboxMessage
		switch due := d.NextAttemptAt(); {
		case d.State() == domain.StateRetrying && due != nil:
			msg, err = workMessageFor(d, h.topics.Retry(d.Channel(), due.Sub(now)), d.Attempt()+1, *due, closed[0].Key, false)
		case d.State() == domain.StateDead:
			msg, err = deadLetterFor(d, h.topics.Dead(d.Channel()), closed[0].Key, now)
		}
		if err != nil {
			return "", err
		}
		var outbox []OutboxMessage
		if msg.Topic != "" {
			outbox = append(outbox, msg)
		}
		err = h.store.Append(ctx, closed, outbox)
		switch {
		case err == nil:
			return d.State(), nil
		case errors.Is(err, ErrDuplicate), errors.Is(err, ErrVersionConflict):
			// Another copy closed the attempt or the stream moved: decide again.
			continue
		default:
			return "", fmt.Errorf("record outcome of %s: %w", cmd.DeliveryID, err)
		}
	}
	return "", fmt.Errorf("record outcome of %s: %w after %d tries", cmd.DeliveryID, ErrVersionConflict, maxConflictRetries)
}

package commands

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// RecordOutcome closes an attempt with the adapter's typed outcome.
type RecordOutcome struct {
	DeliveryID string
	Attempt    int
	Outcome    domain.Outcome
	// Known, when set, is the delivery as the worker last saw it (after recording the attempt's
	// start): the outcome is decided on it without reading the stream again. If the stream has
	// moved since, the append meets a version conflict and the outcome is decided again on a
	// fresh read, so a stale Known costs a retry, never a wrong record.
	Known *domain.Delivery
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

// lateOutcomeEvidence explains a reconciliation by the worker that made the call.
const lateOutcomeEvidence = "outcome reported by the worker that made the call, after a redelivered copy of its message had marked the attempt unknown"

// lateOutcome reports whether cmd is the real outcome of an attempt already marked unknown.
func lateOutcome(d *domain.Delivery, cmd RecordOutcome) bool {
	return d.State() == domain.StateUnknown && d.Attempt() == cmd.Attempt && cmd.Outcome.Kind != domain.OutcomeUnknown
}

// followUp is the message that must travel with the events just recorded: the delayed next
// attempt of a retrying delivery, or the dead letter of a dead one.
func followUp(ctx context.Context, topics Topics, d *domain.Delivery, eventKey string, now time.Time) ([]OutboxMessage, error) {
	var msg OutboxMessage
	var err error
	ctx = tracing.Continue(ctx, d.Trace())
	switch due := d.NextAttemptAt(); {
	case d.State() == domain.StateRetrying && due != nil:
		msg, err = workMessageFor(ctx, d, topics.Retry(d.Channel(), due.Sub(now)), d.Attempt()+1, *due, eventKey, false)
	case d.State() == domain.StateDead:
		msg, err = deadLetterFor(ctx, d, topics.Dead(d.Channel()), eventKey, now)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []OutboxMessage{msg}, nil
}

// Handle records the outcome and returns the delivery's state after it. A repeat for an attempt
// that is already closed records nothing and returns the current state.
func (h *RecordOutcomeHandler) Handle(ctx context.Context, cmd RecordOutcome) (domain.State, error) {
	d, err := decide(ctx, h.store, cmd.DeliveryID, cmd.Known, "record outcome of "+cmd.DeliveryID, func(d *domain.Delivery) (decision, error) {
		now := h.clock.Now()
		closed, err := d.RecordOutcome(cmd.Attempt, cmd.Outcome, h.policies(d.Channel()), now, h.jitter())
		if errors.Is(err, domain.ErrStaleAttempt) {
			if !lateOutcome(d, cmd) {
				return decision{}, nil // closed already: nothing to record
			}
			// A redelivered copy of this attempt's message marked it unknown while the worker
			// that made the call was still at it (its broker connection dropped). That worker
			// knows the outcome: record it as the resolution of the unknown.
			closed, err = d.Reconcile(cmd.Outcome, lateOutcomeEvidence, "worker", h.policies(d.Channel()), now, h.jitter())
		}
		if err != nil {
			return decision{}, err
		}
		outbox, err := followUp(ctx, h.topics, d, closed[0].Key, now)
		return decision{events: closed, outbox: outbox}, err
	})
	if err != nil {
		return "", err
	}
	return d.State(), nil
}

package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/deliveryledger/ledger/domain"
)

// An operator's decisions about one delivery: replay a dead one, resolve an unknown outcome.
// Both are appended like any transition, under keys of their own, with the work message or dead
// letter they call for in the same transaction.

// Replay asks for a new attempt cycle of a dead delivery.
type Replay struct {
	Tenant     string
	DeliveryID string
	// Reason is recorded with the replay (who asked, why).
	Reason string
}

// ReplayHandler records replays.
type ReplayHandler struct {
	store  EventStore
	topics Topics
	clock  Clock
	// OnDecided, when set, is told the channel and decision ("replayed") of each recorded replay.
	OnDecided func(channel, decision string)
}

// NewReplayHandler builds the command.
func NewReplayHandler(store EventStore, topics Topics, clock Clock) *ReplayHandler {
	return &ReplayHandler{store: store, topics: topics, clock: clock}
}

// Handle replays the delivery and returns it as it is after the replay. A delivery that is not
// dead is refused with domain.ErrNotDead (and returned as it is), one of another tenant or none
// at all with ErrNotFound.
func (h *ReplayHandler) Handle(ctx context.Context, cmd Replay) (*domain.Delivery, error) {
	d, err := decide(ctx, h.store, cmd.Tenant, cmd.DeliveryID, func(d *domain.Delivery) ([]domain.Event, []OutboxMessage, error) {
		now := h.clock.Now()
		replayed, err := d.Replay(cmd.Reason, now)
		if err != nil {
			return nil, nil, err
		}
		// The replayed event is the queued transition of the new cycle's first attempt: the
		// relay must not record another one for it.
		msg, err := workMessageFor(d, h.topics.Work(d.Channel(), d.Priority()), d.Attempt(), now, replayed[0].Key, false)
		if err != nil {
			return nil, nil, err
		}
		return replayed, []OutboxMessage{msg}, nil
	})
	if err == nil && h.OnDecided != nil {
		h.OnDecided(d.Channel(), "replayed")
	}
	return d, err
}

// Reconcile resolves the unknown outcome of a delivery's latest attempt with evidence.
type Reconcile struct {
	Tenant     string
	DeliveryID string
	// Outcome is what the evidence shows: delivered, permanent (failed for good) or transient
	// (not sent: another attempt is safe).
	Outcome  domain.Outcome
	Evidence string
	// Actor names who decided (recorded with the resolution).
	Actor string
}

// ReconcileHandler records resolutions of unknown outcomes.
type ReconcileHandler struct {
	store    EventStore
	topics   Topics
	clock    Clock
	policies Policies
	jitter   func() float64
	// OnDecided, when set, is told the channel and decision ("reconciled_" and the state it led
	// to) of each recorded resolution.
	OnDecided func(channel, decision string)
}

// NewReconcileHandler builds the command.
func NewReconcileHandler(store EventStore, topics Topics, clock Clock, policies Policies) *ReconcileHandler {
	return &ReconcileHandler{store: store, topics: topics, clock: clock, policies: policies, jitter: rand.Float64}
}

// Handle resolves the outcome and returns the delivery after it. A delivery whose outcome is not
// unknown is refused with domain.ErrNotUnknown (and returned as it is).
func (h *ReconcileHandler) Handle(ctx context.Context, cmd Reconcile) (*domain.Delivery, error) {
	d, err := decide(ctx, h.store, cmd.Tenant, cmd.DeliveryID, func(d *domain.Delivery) ([]domain.Event, []OutboxMessage, error) {
		now := h.clock.Now()
		resolved, err := d.Reconcile(cmd.Outcome, cmd.Evidence, cmd.Actor, h.policies(d.Channel()), now, h.jitter())
		if err != nil {
			return nil, nil, err
		}
		outbox, err := followUp(h.topics, d, resolved[0].Key, now)
		if err != nil {
			return nil, nil, err
		}
		return resolved, outbox, nil
	})
	if err == nil && h.OnDecided != nil {
		h.OnDecided(d.Channel(), "reconciled_"+string(d.State()))
	}
	return d, err
}

// decide loads a tenant's delivery, lets step decide on it and appends what step decided. On a
// version conflict or a taken key (another writer moved the delivery meanwhile, or a repeat of
// this very decision won) it decides again on the new history, so a repeated request is refused
// on the state the first one left rather than recorded twice.
func decide(ctx context.Context, store EventStore, tenant, id string,
	step func(*domain.Delivery) ([]domain.Event, []OutboxMessage, error)) (*domain.Delivery, error) {
	for range maxConflictRetries {
		events, err := store.Load(ctx, id)
		if err != nil {
			return nil, err
		}
		d, err := domain.Rehydrate(events)
		if err != nil {
			return nil, err
		}
		if d.Tenant() != tenant {
			return nil, ErrNotFound
		}
		decided, outbox, err := step(d)
		if err != nil {
			return d, err // refused: nothing was folded in
		}
		err = store.Append(ctx, decided, outbox)
		switch {
		case err == nil:
			return d, nil
		case errors.Is(err, ErrDuplicate), errors.Is(err, ErrVersionConflict):
			continue
		default:
			return nil, fmt.Errorf("record decision on %s: %w", id, err)
		}
	}
	return nil, fmt.Errorf("record decision on %s: %w after %d tries", id, ErrVersionConflict, maxConflictRetries)
}

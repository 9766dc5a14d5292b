package commands

import (
	"context"
	"math/rand/v2"

	"github.com/deliveryledger/ledger/domain"
)

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
	d, err := decideFor(ctx, h.store, cmd.Tenant, cmd.DeliveryID, func(d *domain.Delivery) (decision, error) {
		now := h.clock.Now()
		resolved, err := d.Reconcile(cmd.Outcome, cmd.Evidence, cmd.Actor, h.policies(d.Channel()), now, h.jitter())
		if err != nil {
			return decision{}, err
		}
		outbox, err := followUp(ctx, h.topics, d, resolved[0].Key, now)
		if err != nil {
			return decision{}, err
		}
		return decision{events: resolved, outbox: outbox}, nil
	})
	if err == nil && h.OnDecided != nil {
		h.OnDecided(d.Channel(), "reconciled_"+string(d.State()))
	}
	return d, err
}

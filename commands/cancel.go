package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/deliveryledger/ledger/domain"
)

// Cancel asks to end a delivery that no attempt has started for.
type Cancel struct {
	Tenant     string
	DeliveryID string
	// Reason and Actor are recorded with the cancel; both may be empty.
	Reason string
	Actor  string
}

// CancelHandler records cancels. The guarantee it gives (invariant 8: a cancel answered 200 is
// never followed by a provider call) rests on the stream's expected version: the cancel and an
// attempt's start are both appended at the next version, so exactly one of them commits. A
// start that loses is decided again on the cancelled delivery and refused before any call; a
// cancel that loses is decided again on the started one and refused (domain.CancelRefused).
type CancelHandler struct {
	store EventStore
	clock Clock
}

// NewCancelHandler builds the command.
func NewCancelHandler(store EventStore, clock Clock) *CancelHandler {
	return &CancelHandler{store: store, clock: clock}
}

// Handle cancels the delivery and returns it. A delivery cancelled before is returned as it is
// (the same answer to a repeat); one an attempt has started for gives a *domain.CancelRefused.
func (h *CancelHandler) Handle(ctx context.Context, cmd Cancel) (*domain.Delivery, error) {
	return decideFor(ctx, h.store, cmd.Tenant, cmd.DeliveryID, func(d *domain.Delivery) (decision, error) {
		events, err := d.Cancel(cmd.Reason, cmd.Actor, h.clock.Now())
		return decision{events: events}, err
	})
}

// NotificationDeliveries lists the deliveries of a tenant's notification. postgres.EventStore
// implements it.
type NotificationDeliveries interface {
	// DeliveriesOf returns the ids of the notification's deliveries, or ErrNotFound when the
	// tenant has no such notification.
	DeliveriesOf(ctx context.Context, tenant, notificationID string) ([]string, error)
}

// CancelOutcome is what a notification's cancel did to one of its deliveries: the delivery as
// it stands after, and the refusal when an attempt had started for it.
type CancelOutcome struct {
	Delivery *domain.Delivery
	Refused  *domain.CancelRefused
}

// CancelNotification cancels each delivery of a notification (Cancel with each id): those no
// attempt has started for are cancelled, the others are reported refused.
func (h *CancelHandler) CancelNotification(ctx context.Context, list NotificationDeliveries, tenant, notificationID, reason, actor string) ([]CancelOutcome, error) {
	ids, err := list.DeliveriesOf(ctx, tenant, notificationID)
	if err != nil {
		return nil, err
	}
	out := make([]CancelOutcome, 0, len(ids))
	for _, id := range ids {
		d, err := h.Handle(ctx, Cancel{Tenant: tenant, DeliveryID: id, Reason: reason, Actor: actor})
		var refused *domain.CancelRefused
		switch {
		case errors.As(err, &refused):
			out = append(out, CancelOutcome{Delivery: d, Refused: refused})
		case err != nil:
			return nil, fmt.Errorf("cancel notification %s: %w", notificationID, err)
		default:
			out = append(out, CancelOutcome{Delivery: d})
		}
	}
	return out, nil
}

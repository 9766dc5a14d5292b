package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/deliveryledger/ledger/domain"
)

// maxConflictRetries bounds the reload-and-decide loop after a version conflict.
const maxConflictRetries = 8

// MarkQueuedHandler records that an attempt's work message is on the broker. The relay calls it
// after the broker's confirm; a worker that sees the message first records the same event under
// the same key, so whichever comes second is a no-op.
type MarkQueuedHandler struct {
	store EventStore
	clock Clock
}

// NewMarkQueuedHandler builds the command.
func NewMarkQueuedHandler(store EventStore, clock Clock) *MarkQueuedHandler {
	return &MarkQueuedHandler{store: store, clock: clock}
}

// Handle records EventQueued for the attempt unless the delivery is already past it.
func (h *MarkQueuedHandler) Handle(ctx context.Context, deliveryID string, attempt int) error {
	for range maxConflictRetries {
		events, err := h.store.Load(ctx, deliveryID)
		if err != nil {
			return fmt.Errorf("mark %s queued: %w", deliveryID, err)
		}
		d, err := domain.Rehydrate(events)
		if err != nil {
			return err
		}
		if !awaitsQueue(d, attempt) {
			return nil
		}
		queued, err := d.Queue(h.clock.Now())
		if err != nil {
			return err
		}
		err = h.store.Append(ctx, queued, nil)
		switch {
		case err == nil, errors.Is(err, ErrDuplicate):
			return nil
		case errors.Is(err, ErrVersionConflict):
			continue
		default:
			return fmt.Errorf("mark %s queued: %w", deliveryID, err)
		}
	}
	return fmt.Errorf("mark %s queued: %w after %d tries", deliveryID, ErrVersionConflict, maxConflictRetries)
}

// awaitsQueue reports whether the attempt's message is the next one the delivery waits for.
func awaitsQueue(d *domain.Delivery, attempt int) bool {
	switch d.State() {
	case domain.StateAccepted, domain.StateRetrying:
		return d.Attempt()+1 == attempt
	}
	return false
}

package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/deliveryledger/ledger/domain"
)

// An operator's decisions about one delivery: replay a dead one (replay.go), resolve an unknown
// outcome (reconcile.go). Both are appended like any transition, under keys of their own, with
// the work message or dead letter they call for in the same transaction.

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

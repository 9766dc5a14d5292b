package commands

import (
	"context"
	"errors"

	"github.com/deliveryledger/ledger/domain"
)

// An operator's decisions about one delivery: replay a dead one (replay.go), resolve an unknown
// outcome (reconcile.go). Both are appended like any transition, under keys of their own, with
// the work message or dead letter they call for in the same transaction.

// decideFor runs decide for an operator acting for tenant: a delivery of another tenant is not
// found, exactly like one that does not exist.
func decideFor(ctx context.Context, store EventStore, tenant, id string,
	step func(*domain.Delivery) (decision, error)) (*domain.Delivery, error) {
	d, err := decide(ctx, store, id, nil, "record decision on "+id, func(d *domain.Delivery) (decision, error) {
		if d.Tenant() != tenant {
			return decision{}, ErrNotFound
		}
		return step(d)
	})
	if errors.Is(err, ErrNotFound) {
		return nil, err
	}
	return d, err
}

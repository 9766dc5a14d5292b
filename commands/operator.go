package commands

import (
	"context"
	"errors"

	"github.com/deliveryledger/ledger/domain"
)

// An operator's decisions about one delivery: replay a dead one (replay.go), resolve an unknown
// outcome (reconcile.go). Both are appended like any transition, under keys of their own, with
// the work message or dead letter they call for in the same transaction.

// TenantLoader loads a stream only if it belongs to the tenant, so that another tenant's id is
// answered like an unknown one after the same work (postgres.EventStore implements it with an
// index of the streams' owners).
type TenantLoader interface {
	LoadOf(ctx context.Context, tenant, deliveryID string) ([]domain.Event, error)
}

// tenantStore is an EventStore whose loads are the tenant's (LoadOf) where the store can.
type tenantStore struct {
	EventStore
	tenant string
}

func (s tenantStore) Load(ctx context.Context, id string) ([]domain.Event, error) {
	if l, ok := s.EventStore.(TenantLoader); ok {
		return l.LoadOf(ctx, s.tenant, id)
	}
	return s.EventStore.Load(ctx, id)
}

// decideFor runs decide for an operator acting for tenant: a delivery of another tenant is not
// found, exactly like one that does not exist.
func decideFor(ctx context.Context, store EventStore, tenant, id string,
	step func(*domain.Delivery) (decision, error)) (*domain.Delivery, error) {
	d, err := decide(ctx, tenantStore{store, tenant}, id, nil, "record decision on "+id, func(d *domain.Delivery) (decision, error) {
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

package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/commands"
)

// operationFind finds the delivery whose history has a provider accepting a message under an
// id, by the partial expression index of migration 0009.
const operationFind = `SELECT delivery_id::text FROM events
WHERE type = 'delivery.provider_accepted' AND data->>'provider' = $1 AND data->>'provider_operation_id' = $2
ORDER BY position DESC LIMIT 1`

// FindOperation implements commands.OperationFinder.
func (s *EventStore) FindOperation(ctx context.Context, provider, operationID string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, operationFind, provider, operationID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", commands.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("find %s message %s: %w", provider, operationID, err)
	}
	return id, nil
}

// ProviderHealth is one process's view of one provider's circuit breaker.
type ProviderHealth struct {
	Provider string
	// Instance names the process that holds the breaker.
	Instance string
	Channel  string
	// State is closed, open or half_open.
	State string
	// Requests and Failures are the breaker's counts in its current window.
	Requests, Failures int64
	UpdatedAt          time.Time
}

const (
	healthPut = `INSERT INTO provider_health (provider, instance, channel, state, requests, failures, updated_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::timestamptz[])
ON CONFLICT (provider, instance) DO UPDATE SET channel = excluded.channel, state = excluded.state,
	requests = excluded.requests, failures = excluded.failures, updated_at = excluded.updated_at`

	healthList = `SELECT provider, instance, channel, state, requests, failures, updated_at FROM provider_health
WHERE updated_at >= $1 ORDER BY provider, instance`

	healthPrune = `DELETE FROM provider_health WHERE updated_at < $1`
)

// PutHealth records a process's breakers, and forgets the reports older than a day (processes
// that are gone).
func (s *EventStore) PutHealth(ctx context.Context, hs []ProviderHealth) error {
	if len(hs) == 0 {
		return nil
	}
	var providers, instances, channels, states []string
	var requests, failures []int64
	var at []time.Time
	for _, h := range hs {
		providers, instances, channels, states = append(providers, h.Provider), append(instances, h.Instance),
			append(channels, h.Channel), append(states, h.State)
		requests, failures, at = append(requests, h.Requests), append(failures, h.Failures), append(at, h.UpdatedAt)
	}
	if _, err := s.pool.Exec(ctx, healthPut, providers, instances, channels, states, requests, failures, at); err != nil {
		return fmt.Errorf("record provider health: %w", err)
	}
	if _, err := s.pool.Exec(ctx, healthPrune, time.Now().Add(-24*time.Hour)); err != nil {
		return fmt.Errorf("prune provider health: %w", err)
	}
	return nil
}

// Health returns every process's breakers reported since since.
func (s *EventStore) Health(ctx context.Context, since time.Time) ([]ProviderHealth, error) {
	rows, err := s.pool.Query(ctx, healthList, since)
	if err != nil {
		return nil, fmt.Errorf("read provider health: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ProviderHealth, error) {
		var h ProviderHealth
		err := row.Scan(&h.Provider, &h.Instance, &h.Channel, &h.State, &h.Requests, &h.Failures, &h.UpdatedAt)
		h.UpdatedAt = h.UpdatedAt.UTC()
		return h, err
	})
}

var _ commands.OperationFinder = (*EventStore)(nil)

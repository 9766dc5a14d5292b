package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

var _ commands.RequestStore = (*EventStore)(nil)

const (
	operatorRequestGet = `SELECT request_hash, response FROM operator_requests WHERE tenant = $1 AND request_key = $2`
	operatorRequestPut = `INSERT INTO operator_requests (tenant, request_key, request_hash, response) VALUES ($1, $2, $3, $4)`
)

// RequestGet returns an operator's request stored under (tenant, key).
func (s *EventStore) RequestGet(ctx context.Context, tenant, key string) (commands.StoredRequest, error) {
	r := commands.StoredRequest{Tenant: tenant, Key: key}
	err := s.pool.QueryRow(ctx, operatorRequestGet, tenant, key).Scan(&r.Hash, &r.Response)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, commands.ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("read request %s: %w", key, err)
	}
	return r, nil
}

// RequestPut stores an operator's request and its answer.
func (s *EventStore) RequestPut(ctx context.Context, r commands.StoredRequest) error {
	_, err := s.pool.Exec(ctx, operatorRequestPut, r.Tenant, r.Key, r.Hash, string(r.Response))
	return requestTaken(err, r.Key)
}

// AppendRequest appends events and outbox messages and stores r, in one transaction.
func (s *EventStore) AppendRequest(ctx context.Context, r commands.StoredRequest, events []domain.Event, outbox []commands.OutboxMessage) error {
	var w writeBatch
	err := appendEvents(ctx, &w, events)
	if err == nil {
		err = publishOutbox(ctx, &w, outbox)
	}
	if err == nil {
		_, _ = w.Exec(ctx, operatorRequestPut, r.Tenant, r.Key, r.Hash, string(r.Response))
		err = w.send(ctx, s.pool)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateUniqueViolation && pgErr.ConstraintName == "operator_requests_pkey" {
		return requestTaken(err, r.Key)
	}
	if err != nil && len(events) == 0 {
		return fmt.Errorf("write outbox: %w", err)
	}
	return s.translate(ctx, err, events)
}

// requestTaken translates a unique violation of the request's key into ErrRequestTaken.
func requestTaken(err error, key string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateUniqueViolation {
		return fmt.Errorf("request %s: %w", key, commands.ErrRequestTaken)
	}
	if err != nil {
		return fmt.Errorf("store request %s: %w", key, err)
	}
	return nil
}

package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// eventView is one entry of GET /v1/deliveries/{id}/events.
type eventView struct {
	Version int              `json:"version"`
	Type    domain.EventType `json:"type"`
	// State is the delivery's state after the event, so a reader follows the lifecycle
	// without knowing the transition table.
	State      domain.State    `json:"state"`
	RecordedAt time.Time       `json:"recorded_at"`
	Data       json.RawMessage `json:"data"`
}

// deliveryStatus is GET /v1/deliveries/{id}: the delivery folded from its events, with the
// status projection's fold. It reads the stream, not the view, so the answer is never behind
// the last append.
//
// With ?as_of=RFC3339 it folds only the events recorded at or before that time, for audit: the
// status the delivery had then. The cut is a prefix of the stream (the first event recorded
// after as_of ends it), so clocks that disagreed between writers cannot produce a history with
// a hole. A delivery with no event by then is not found.
func (s *server) deliveryStatus(w http.ResponseWriter, r *http.Request, tenant string) error {
	asOf, err := parseAsOf(queryOf(r))
	if err != nil {
		return err
	}
	events, err := s.loadStream(r.Context(), tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	if !asOf.IsZero() {
		n := 0
		for n < len(events) && !events[n].RecordedAt.After(asOf) {
			n++
		}
		if n == 0 {
			return commands.ErrNotFound
		}
		events = events[:n]
	}
	out, err := viewOf(events)
	if err != nil {
		return err
	}
	if !asOf.IsZero() {
		out.AsOf = &asOf
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// viewOf folds a delivery's stream (or a prefix of it) into its one shape.
func viewOf(events []domain.Event) (deliveryView, error) {
	row, err := projections.FoldStatus(events)
	if err != nil {
		return deliveryView{}, fmt.Errorf("delivery status: %w", err)
	}
	v := newDeliveryView(row)
	if len(events) > 0 && events[0].Type == domain.EventAccepted {
		var acc domain.Accepted
		if json.Unmarshal(events[0].Data, &acc) == nil {
			v.PayloadExpired = acc.PayloadExpired
		}
	}
	return v, nil
}

// deliveryAfter is the answer of an operator's decision: the tenant's delivery as the decision
// left it, folded from its stream up to d's version (a worker may have moved it on since).
func (s *server) deliveryAfter(ctx context.Context, tenant string, d *domain.Delivery) (deliveryView, error) {
	events, err := s.loadStream(ctx, tenant, d.ID())
	if err != nil {
		return deliveryView{}, err
	}
	if len(events) < d.Version() {
		return deliveryView{}, fmt.Errorf("delivery %s: stream has %d events after a decision at version %d", d.ID(), len(events), d.Version())
	}
	return viewOf(events[:d.Version()])
}

// deliveryEvents is GET /v1/deliveries/{id}/events: the audit trail, as stored.
func (s *server) deliveryEvents(w http.ResponseWriter, r *http.Request, tenant string) error {
	events, err := s.loadStream(r.Context(), tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := struct {
		Events []eventView `json:"events"`
	}{Events: make([]eventView, len(events))}
	var state domain.State
	for i, e := range events {
		if state, err = domain.Next(state, e.Type); err != nil {
			// The history breaks the transition table: show nothing rather than a guess.
			return fmt.Errorf("delivery events of %s at version %d: %w", e.DeliveryID, e.Version, err)
		}
		out.Events[i] = eventView{Version: e.Version, Type: e.Type, State: state, RecordedAt: e.RecordedAt, Data: e.Data}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// loadStream returns the tenant's delivery stream. Another tenant's delivery is "not found",
// exactly like an id that was never used: the answer must not reveal that it exists.
func (s *server) loadStream(ctx context.Context, tenant, id string) ([]domain.Event, error) {
	id, ok := pathID(id)
	if !ok {
		return nil, commands.ErrNotFound
	}
	events, err := s.deps.Events.LoadOf(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 || events[0].Tenant != tenant {
		return nil, commands.ErrNotFound // a store that does not scope: refuse all the same
	}
	return events, nil
}

// requestAnswer is GET /v1/requests/{key}: the answer the tenant's accept request under this
// Idempotency-Key got, for a client that lost it and no longer has the body to replay.
func (s *server) requestAnswer(w http.ResponseWriter, r *http.Request, tenant string) error {
	key := r.PathValue("key")
	if storableText(key) != nil {
		// A key the database cannot hold was never used.
		return &requestError{kind: errRouteNotFound, detail: "no accept request under this Idempotency-Key"}
	}
	stored, err := s.deps.Requests.RequestLookup(r.Context(), tenant, key)
	if errors.Is(err, commands.ErrNotFound) {
		return &requestError{kind: errRouteNotFound, detail: "no accept request under this Idempotency-Key"}
	}
	if err != nil {
		return err
	}
	res, err := commands.DecodeAcceptAnswer(stored)
	if err != nil {
		return fmt.Errorf("stored answer of request %s: %w", key, err)
	}
	s.writeJSON(w, r, http.StatusOK, newNotificationAccepted(res))
	return nil
}

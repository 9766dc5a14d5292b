package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// deliveryStatus is the answer of GET /v1/deliveries/{id}. The tenant is left out: the caller
// is that tenant.
type deliveryStatus struct {
	ID             string          `json:"id"`
	NotificationID string          `json:"notification_id"`
	Channel        string          `json:"channel"`
	Recipient      string          `json:"recipient"`
	State          domain.State    `json:"state"`
	Priority       domain.Priority `json:"priority"`
	// Attempts is the number of the latest attempt queued or started, over every cycle, so it
	// matches the attempt numbers in the audit trail.
	Attempts       int        `json:"attempts"`
	MaxAttempts    int        `json:"max_attempts"`
	AcceptedAt     time.Time  `json:"accepted_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	Version        int        `json:"version"`
	NextAttemptAt  *time.Time `json:"next_attempt_at,omitempty"`
	LastError      *lastError `json:"last_error,omitempty"`
	IdempotencyKey string     `json:"idempotency_key"`
	// AsOf echoes the as_of parameter: the status is the one the delivery had then.
	AsOf *time.Time `json:"as_of,omitempty"`
}

// lastError is why the latest closed attempt did not deliver.
type lastError struct {
	Class      domain.ErrorClass `json:"class"`
	Message    string            `json:"message,omitempty"`
	StatusCode int               `json:"status_code,omitempty"`
}

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

// deliveryStatus is GET /v1/deliveries/{id}: the delivery folded from its events. It reads the
// stream, not a projection, so the answer is never behind the last append.
//
// With ?as_of=RFC3339 it folds only the events recorded at or before that time, for audit: the
// status the delivery had then. The cut is a prefix of the stream (the first event recorded
// after as_of ends it), so clocks that disagreed between writers cannot produce a history with
// a hole. A delivery with no event by then is not found.
func (s *server) deliveryStatus(w http.ResponseWriter, r *http.Request, tenant string) error {
	asOf, err := parseAsOf(r.URL.Query())
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
	d, err := domain.Rehydrate(events)
	if err != nil {
		return fmt.Errorf("delivery status: %w", err)
	}
	out := statusOf(d)
	if !asOf.IsZero() {
		out.AsOf = &asOf
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// statusOf is the status document of a folded delivery.
func statusOf(d *domain.Delivery) deliveryStatus {
	out := deliveryStatus{
		ID:             d.ID(),
		NotificationID: d.NotificationID(),
		Channel:        d.Channel(),
		Recipient:      d.Recipient(),
		State:          d.State(),
		Priority:       d.Priority(),
		Attempts:       d.Attempt(),
		MaxAttempts:    d.MaxAttempts(),
		AcceptedAt:     d.AcceptedAt(),
		UpdatedAt:      d.UpdatedAt(),
		Version:        d.Version(),
		NextAttemptAt:  d.NextAttemptAt(),
		IdempotencyKey: d.RequestKey(),
	}
	if res := d.LastResult(); res != nil && (res.Class != "" || res.Error != "") {
		out.LastError = &lastError{Class: res.Class, Message: res.Error, StatusCode: res.StatusCode}
	}
	return out
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
	if _, err := uuid.Parse(id); err != nil {
		return nil, commands.ErrNotFound
	}
	events, err := s.deps.Events.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 || events[0].Tenant != tenant {
		return nil, commands.ErrNotFound
	}
	return events, nil
}

// requestAnswer is GET /v1/requests/{key}: the answer the tenant's accept request under this
// Idempotency-Key got, for a client that lost it and no longer has the body to replay.
func (s *server) requestAnswer(w http.ResponseWriter, r *http.Request, tenant string) error {
	stored, err := s.deps.Requests.RequestLookup(r.Context(), tenant, r.PathValue("key"))
	if errors.Is(err, commands.ErrNotFound) {
		return &requestError{kind: errRouteNotFound, detail: "no accept request under this Idempotency-Key"}
	}
	if err != nil {
		return err
	}
	var res commands.AcceptResult
	if err := json.Unmarshal(stored, &res); err != nil {
		return fmt.Errorf("decode stored accept answer: %w", err)
	}
	s.writeJSON(w, r, http.StatusOK, newNotificationAccepted(res))
	return nil
}

package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// parseSendAt reads the optional send_at member of an accept body (RFC 3339). How far ahead it
// may lie is the accept command's rule, checked on its clock.
func parseSendAt(v *string) (*time.Time, error) {
	if v == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *v)
	if err != nil {
		return nil, invalid("send_at", "must be an RFC 3339 time (2026-01-02T15:04:05Z), got %q", *v)
	}
	return &t, nil
}

// deliveryState is the state one delivery of an accept was left in: the command's record of it
// (accepted, scheduled, or suppressed when its recipient is on the list or opted out), else, for
// the stored answers of accepts from before it was recorded, the notification's.
func deliveryState(res commands.AcceptResult, d commands.AcceptedDelivery) domain.State {
	if d.State != "" {
		return d.State
	}
	if res.SendAt != nil {
		return domain.StateScheduled
	}
	return domain.StateAccepted
}

// cancelRequest is the optional body of the cancel endpoints.
type cancelRequest struct {
	Reason string `json:"reason"`
	Actor  string `json:"actor"`
}

// readCancel decodes an optional cancel body.
func (s *server) readCancel(w http.ResponseWriter, r *http.Request, tenant string) (cancelRequest, error) {
	var req cancelRequest
	body, err := s.readBody(w, r)
	if err != nil {
		return req, err
	}
	if len(body) > 0 {
		if err := decodeJSON(body, &req); err != nil {
			return req, err
		}
	}
	if err := checkText("reason", req.Reason, maxReasonLen); err != nil {
		return req, err
	}
	if err := checkText("actor", req.Actor, maxReasonLen); err != nil {
		return req, err
	}
	if req.Actor == "" {
		req.Actor = tenantActor(tenant)
	}
	return req, nil
}

// cancelDelivery is POST /v1/deliveries/{id}/cancel: 200 with the cancelled delivery (the same
// answer to a repeat), 409 naming state and attempt once an attempt has started.
func (s *server) cancelDelivery(w http.ResponseWriter, r *http.Request, tenant string) error {
	req, err := s.readCancel(w, r, tenant)
	if err != nil {
		return err
	}
	id, ok := pathID(r.PathValue("id"))
	if !ok {
		return commands.ErrNotFound
	}
	d, err := s.deps.Cancel.Handle(r.Context(), commands.Cancel{Tenant: tenant, DeliveryID: id, Reason: req.Reason, Actor: req.Actor})
	if err != nil {
		return err
	}
	out, err := s.deliveryAfter(r.Context(), tenant, d)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// cancelledDelivery is one delivery of a notification's cancel answer.
type cancelledDelivery struct {
	ID      string       `json:"id"`
	State   domain.State `json:"state"`
	Attempt int          `json:"attempt"`
	// Cancelled is false for a delivery an attempt had started for; Detail says so.
	Cancelled bool   `json:"cancelled"`
	Detail    string `json:"detail,omitempty"`
}

// cancelNotification is POST /v1/notifications/{id}/cancel: each delivery of the notification
// is cancelled, or reported with the state and attempt that kept it from being cancelled.
func (s *server) cancelNotification(w http.ResponseWriter, r *http.Request, tenant string) error {
	req, err := s.readCancel(w, r, tenant)
	if err != nil {
		return err
	}
	id, ok := pathID(r.PathValue("id"))
	if !ok {
		return commands.ErrNotFound
	}
	outcomes, err := s.deps.Cancel.CancelNotification(r.Context(), s.deps.Notifications, tenant, id, req.Reason, req.Actor)
	if err != nil {
		return err
	}
	out := struct {
		ID         string              `json:"id"`
		Deliveries []cancelledDelivery `json:"deliveries"`
	}{ID: id, Deliveries: make([]cancelledDelivery, len(outcomes))}
	for i, o := range outcomes {
		out.Deliveries[i] = cancelledDelivery{ID: o.Delivery.ID(), State: o.Delivery.State(), Attempt: o.Delivery.Attempt(),
			Cancelled: o.Refused == nil}
		if o.Refused != nil {
			out.Deliveries[i].Detail = o.Refused.Error()
		}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// cancelRefusedDetail is the 409's detail: the state and attempt that keep the delivery from
// being cancelled.
func cancelRefusedDetail(err error) (string, bool) {
	var refused *domain.CancelRefused
	if !errors.As(err, &refused) {
		return "", false
	}
	return fmt.Sprintf("delivery is %s at attempt %d: an attempt has started, so it can no longer be cancelled", refused.State, refused.Attempt), true
}

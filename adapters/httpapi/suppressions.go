package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// maxSuppressionsPage is the largest page of GET /v1/suppressions.
const maxSuppressionsPage = 1000

// suppressionRequest is the body of POST /v1/suppressions.
type suppressionRequest struct {
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	Reason    string `json:"reason"`
	Actor     string `json:"actor"`
	// Source is manual (the default) or import: `ledger suppressions import` says so, so that an
	// imported entry is told apart from one an operator added by hand.
	Source string `json:"source"`
}

// errNoSuppression is the 404 of a suppression id the tenant does not have.
var errNoSuppression = &requestError{kind: commands.ErrNotFound, detail: "no suppression with this id"}

// addSuppression is POST /v1/suppressions: 201 with the new entry, or 200 with the recipient's
// active one (nothing changes: a recipient is on the list once).
func (s *server) addSuppression(w http.ResponseWriter, r *http.Request, tenant string) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req suppressionRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	if err := checkText("reason", req.Reason, maxReasonLen); err != nil {
		return err
	}
	if err := checkText("actor", req.Actor, maxReasonLen); err != nil {
		return err
	}
	if req.Actor == "" {
		req.Actor = tenantActor(tenant)
	}
	switch req.Source {
	case "":
		req.Source = domain.SuppressionManual
	case domain.SuppressionManual, domain.SuppressionImport:
	default:
		// provider is the ledger's own: only a provider's answer to a delivery is its evidence.
		return invalid("source", "must be %s or %s, got %q", domain.SuppressionManual, domain.SuppressionImport, req.Source)
	}
	if err := s.checkAddress(req.Channel, req.Recipient); err != nil {
		return err
	}
	entry, created, err := s.deps.Suppressions.Add(r.Context(), tenant, req.Channel, req.Recipient, req.Reason, req.Actor,
		req.Source)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/suppressions/"+entry.ID)
	}
	s.writeJSON(w, r, status, entry)
	return nil
}

// listSuppressions is GET /v1/suppressions: the tenant's entries, newest first.
func (s *server) listSuppressions(w http.ResponseWriter, r *http.Request, tenant string) error {
	q := queryOf(r)
	f := commands.SuppressionFilter{Cursor: q.Get("cursor"), Limit: 100}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSuppressionsPage {
			return invalid("limit", "must be a whole number from 1 to %d", maxSuppressionsPage)
		}
		f.Limit = n
	}
	switch v := q.Get("include_removed"); v {
	case "", "false":
	case "true":
		f.IncludeRemoved = true
	default:
		return invalid("include_removed", "must be true or false, got %q", v)
	}
	if channel := q.Get("channel"); channel != "" {
		if _, ok := s.cfg.Channels[channel]; !ok {
			return invalid("channel", "unknown channel %q; one of: %s", channel, s.channels)
		}
		f.Channel = channel
	}
	if recipient := q.Get("recipient"); recipient != "" {
		if f.Channel == "" {
			return invalid("recipient", "needs channel too: a recipient's normal form is its channel's")
		}
		ref, err := s.deps.Suppressions.Ref(f.Channel, recipient)
		if err != nil {
			return err
		}
		f.Recipient = ref.Recipient
	}
	entries, next, err := s.deps.Suppressions.Store().ListSuppressions(r.Context(), tenant, f)
	if err != nil {
		return err
	}
	out := struct {
		Items      []domain.Suppression `json:"items"`
		NextCursor string               `json:"next_cursor,omitempty"`
	}{Items: entries, NextCursor: next}
	if out.Items == nil {
		out.Items = []domain.Suppression{}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// suppression is GET /v1/suppressions/{id}.
func (s *server) suppression(w http.ResponseWriter, r *http.Request, tenant string) error {
	id, ok := pathID(r.PathValue("id"))
	if !ok {
		return errNoSuppression
	}
	entry, err := s.deps.Suppressions.Store().Suppression(r.Context(), tenant, id)
	if err != nil {
		return notFoundAs(err, errNoSuppression)
	}
	s.writeJSON(w, r, http.StatusOK, entry)
	return nil
}

// removeSuppression is DELETE /v1/suppressions/{id}, with an optional body {reason, actor}: 200
// with the removed entry (the same answer to a repeat). The recipient is no longer suppressed;
// deliveries suppressed before stay so (suppressed is terminal).
func (s *server) removeSuppression(w http.ResponseWriter, r *http.Request, tenant string) error {
	req, err := s.readCancel(w, r, tenant)
	if err != nil {
		return err
	}
	id, ok := pathID(r.PathValue("id"))
	if !ok {
		return errNoSuppression
	}
	entry, err := s.deps.Suppressions.Remove(r.Context(), tenant, id, req.Actor, req.Reason)
	if err != nil {
		return notFoundAs(err, errNoSuppression)
	}
	s.writeJSON(w, r, http.StatusOK, entry)
	return nil
}

// preferenceRequest is the body of PUT /v1/preferences.
type preferenceRequest struct {
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	Category  string `json:"category"`
	OptedOut  *bool  `json:"opted_out"`
	Actor     string `json:"actor"`
}

// putPreference is PUT /v1/preferences: 200 with the preference as it stands.
func (s *server) putPreference(w http.ResponseWriter, r *http.Request, tenant string) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req preferenceRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	if req.OptedOut == nil {
		return invalid("opted_out", "is required: true opts the recipient out of the category, false back in")
	}
	if err := checkText("actor", req.Actor, maxReasonLen); err != nil {
		return err
	}
	if req.Actor == "" {
		req.Actor = tenantActor(tenant)
	}
	if err := s.checkAddress(req.Channel, req.Recipient); err != nil {
		return err
	}
	p, err := s.deps.Suppressions.SetPreference(r.Context(), tenant, domain.Preference{Channel: req.Channel,
		Recipient: req.Recipient, Category: req.Category, OptedOut: *req.OptedOut, Source: domain.PreferenceByAPI, Actor: req.Actor})
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, p)
	return nil
}

// preferences is GET /v1/preferences?channel=&recipient=: the recipient's preferences, by
// category.
func (s *server) preferences(w http.ResponseWriter, r *http.Request, tenant string) error {
	q := queryOf(r)
	for _, name := range []string{"channel", "recipient"} {
		if q.Get(name) == "" {
			return invalid(name, "is required")
		}
	}
	ps, err := s.deps.Suppressions.Preferences(r.Context(), tenant, q.Get("channel"), q.Get("recipient"))
	if err != nil {
		return err
	}
	if ps == nil {
		ps = []domain.Preference{}
	}
	s.writeJSON(w, r, http.StatusOK, struct {
		Items []domain.Preference `json:"items"`
	}{Items: ps})
	return nil
}

// notFoundAs gives a not-found err the answer of the resource (as), any other err as it is.
func notFoundAs(err error, as error) error {
	if errors.Is(err, commands.ErrNotFound) {
		return as
	}
	return err
}

// checkAddress checks a recipient as its channel's accept would, without a payload: what no
// delivery could ever be addressed to cannot be suppressed or have preferences either.
func (s *server) checkAddress(channel, recipient string) error {
	err := s.checkRecipient("", channel, recipient, json.RawMessage(`{}`))
	var re *requestError
	if errors.As(err, &re) && strings.HasPrefix(re.field, "payload") {
		return nil // a payload member the empty payload lacks
	}
	return err
}

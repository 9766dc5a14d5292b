package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// viewInfo tells a caller how far the answer's view is behind the caller's own history. It
// says nothing of other tenants: not the log's position, not how much others append.
type viewInfo struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// PendingEvents counts the tenant's recorded events the view does not reflect yet (up to
	// projections.MaxPending): 0 means the answer is complete.
	PendingEvents int64 `json:"pending_events"`
}

func newViewInfo(v projections.TenantView) viewInfo {
	return viewInfo{Name: v.Name, Version: v.Version, PendingEvents: v.Pending}
}

// deliveryView is the one JSON shape of a delivery: GET /v1/deliveries/{id}, every item of
// GET /v1/deliveries, and the answers of replay and reconcile. It is rendered from a status row
// (projections.StatusRow), whether the row comes from the status view or is folded from the
// delivery's own stream, so every answer has every field. The tenant is left out: the caller is
// that tenant.
type deliveryView struct {
	ID             string          `json:"id"`
	NotificationID string          `json:"notification_id"`
	Channel        string          `json:"channel"`
	Recipient      string          `json:"recipient"`
	State          domain.State    `json:"state"`
	Priority       domain.Priority `json:"priority"`
	// Attempts is the number of the latest attempt queued or started, over every cycle, so it
	// matches the attempt numbers in the audit trail.
	Attempts            int        `json:"attempts"`
	MaxAttempts         int        `json:"max_attempts"`
	Provider            string     `json:"provider,omitempty"`
	ProviderOperationID string     `json:"provider_operation_id,omitempty"`
	LastError           *lastError `json:"last_error,omitempty"`
	NextAttemptAt       *time.Time `json:"next_attempt_at,omitempty"`
	IdempotencyKey      string     `json:"idempotency_key"`
	AcceptedAt          time.Time  `json:"accepted_at"`
	UpdatedAt           time.Time  `json:"updated_at"`
	FirstAttemptAt      *time.Time `json:"first_attempt_at,omitempty"`
	TerminalAt          *time.Time `json:"terminal_at,omitempty"`
	// AwaitingReceipt is set while the provider has accepted the current attempt and no receipt,
	// lookup or deadline has decided it (the delivery is processing, no worker holds it).
	AwaitingReceipt *awaitingReceipt `json:"awaiting_receipt,omitempty"`
	// Suppression says what suppressed the delivery (state suppressed): the suppression list
	// entry and its evidence, or the category the recipient opted out of.
	Suppression *domain.Suppressed `json:"suppression,omitempty"`
	// PayloadExpired: the payload's body left after the retention's payloads period (its
	// SHA-256 stays in the history); the delivery can no longer be replayed. Set on the answers
	// folded from the delivery's own stream (GET /v1/deliveries/{id}), not on the lists.
	PayloadExpired bool `json:"payload_expired,omitempty"`
	Version        int  `json:"version"`
	// AsOf echoes the as_of parameter of GET /v1/deliveries/{id}: the delivery as it was then.
	AsOf *time.Time `json:"as_of,omitempty"`
}

// awaitingReceipt says when the ledger asks the provider about an accepted message, and when it
// stops waiting and calls the outcome unknown.
type awaitingReceipt struct {
	LookupAt time.Time `json:"lookup_at"`
	GiveUpAt time.Time `json:"give_up_at"`
}

// lastError is why the latest closed attempt did not deliver.
type lastError struct {
	Class      domain.ErrorClass `json:"class"`
	Message    string            `json:"message,omitempty"`
	StatusCode int               `json:"status_code,omitempty"`
}

func newDeliveryView(r projections.StatusRow) deliveryView {
	v := deliveryView{ID: r.ID, NotificationID: r.NotificationID, Channel: r.Channel, Recipient: r.Recipient,
		State: r.State, Priority: r.Priority, Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, Provider: r.Provider,
		ProviderOperationID: r.ProviderOperationID, NextAttemptAt: r.NextAttemptAt, IdempotencyKey: r.RequestKey,
		AcceptedAt: r.AcceptedAt, UpdatedAt: r.UpdatedAt, FirstAttemptAt: r.FirstAttemptAt, TerminalAt: r.TerminalAt,
		Version: r.Version}
	if r.LastErrorClass != "" || r.LastError != "" {
		v.LastError = &lastError{Class: r.LastErrorClass, Message: r.LastError, StatusCode: r.LastStatusCode}
	}
	if r.State == domain.StateProcessing && r.GiveUpAt != nil && r.CheckAt != nil {
		v.AwaitingReceipt = &awaitingReceipt{LookupAt: *r.CheckAt, GiveUpAt: *r.GiveUpAt}
	}
	if r.Suppression != "" {
		var s domain.Suppressed
		if json.Unmarshal([]byte(r.Suppression), &s) == nil {
			v.Suppression = &s
		}
	}
	return v
}

// dlqItem is one entry of GET /v1/dlq.
type dlqItem struct {
	ID              string            `json:"id"`
	Channel         string            `json:"channel"`
	Recipient       string            `json:"recipient"`
	Priority        domain.Priority   `json:"priority"`
	State           domain.State      `json:"state"`
	FailureClass    domain.ErrorClass `json:"failure_class"`
	Exhausted       bool              `json:"exhausted"`
	LastError       string            `json:"last_error,omitempty"`
	LastStatusCode  int               `json:"last_status_code,omitempty"`
	Provider        string            `json:"provider,omitempty"`
	Attempts        int               `json:"attempts"`
	AttemptsInCycle int               `json:"attempts_in_cycle"`
	MaxAttempts     int               `json:"max_attempts"`
	Replays         int               `json:"replays"`
	AcceptedAt      time.Time         `json:"accepted_at"`
	EnteredAt       time.Time         `json:"entered_at"`
	// Evidence lists the current cycle's attempt outcomes and reconciliations, oldest first.
	Evidence json.RawMessage `json:"evidence"`
	Version  int             `json:"version"`
}

func newDLQItem(r projections.DLQRow) dlqItem {
	return dlqItem{ID: r.ID, Channel: r.Channel, Recipient: r.Recipient, Priority: r.Priority, State: r.State,
		FailureClass: r.FailureClass, Exhausted: r.Exhausted, LastError: r.LastError, LastStatusCode: r.LastStatusCode,
		Provider: r.Provider, Attempts: r.Attempts, AttemptsInCycle: r.AttemptsInCycle, MaxAttempts: r.MaxAttempts,
		Replays: r.Cycle, AcceptedAt: r.AcceptedAt, EnteredAt: r.EnteredAt, Evidence: r.Evidence, Version: r.Version}
}

// list is the shape of every list answer: no next_cursor on the last page.
type list[T any] struct {
	Items      []T      `json:"items"`
	NextCursor string   `json:"next_cursor,omitempty"`
	View       viewInfo `json:"view"`
}

func newList[R, T any](page projections.Page[R], conv func(R) T) list[T] {
	out := list[T]{Items: make([]T, 0, len(page.Items)), View: newViewInfo(page.View)}
	for _, r := range page.Items {
		out.Items = append(out.Items, conv(r))
	}
	if page.Next != nil {
		out.NextCursor = page.Next.String()
	}
	return out
}

// listDeliveries is GET /v1/deliveries: the tenant's deliveries from the status view, newest
// first, with keyset pagination.
func (s *server) listDeliveries(w http.ResponseWriter, r *http.Request, tenant string) error {
	f, err := s.parseFilter(queryOf(r), domain.States)
	if err != nil {
		return err
	}
	page, err := s.deps.Views.Deliveries(r.Context(), tenant, f)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, newList(page, newDeliveryView))
	return nil
}

// listDLQ is GET /v1/dlq: the tenant's dead and unknown deliveries, with the same filters.
func (s *server) listDLQ(w http.ResponseWriter, r *http.Request, tenant string) error {
	q := queryOf(r)
	f, err := s.parseFilter(q, []domain.State{domain.StateDead, domain.StateUnknown})
	if err != nil {
		return err
	}
	if f.FailureClass, err = parseFailureClass(q.Get("failure_class")); err != nil {
		return err
	}
	page, err := s.deps.Views.DeadLetters(r.Context(), tenant, f)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, newList(page, newDLQItem))
	return nil
}

// channelStats is one channel of GET /v1/stats.
type channelStats struct {
	Channel    string `json:"channel"`
	Deliveries int64  `json:"deliveries"`
	// States counts the deliveries in each state now; Entered counts the moves into each state,
	// ever (so entered.retrying is the number of retries scheduled).
	States  map[domain.State]int64 `json:"states"`
	Entered map[domain.State]int64 `json:"entered"`
}

// statsAnswer is GET /v1/stats.
type statsAnswer struct {
	Deliveries int64                  `json:"deliveries"`
	States     map[domain.State]int64 `json:"states"`
	Channels   []channelStats         `json:"channels"`
	View       viewInfo               `json:"view"`
}

func zeroStates() map[domain.State]int64 {
	m := make(map[domain.State]int64, len(domain.States))
	for _, st := range domain.States {
		m[st] = 0
	}
	return m
}

// stats is GET /v1/stats: the tenant's counters, per state and per channel.
func (s *server) stats(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := s.deps.Views.Stats(r.Context(), tenant)
	if err != nil {
		return err
	}
	out := statsAnswer{States: zeroStates(), Channels: []channelStats{}, View: newViewInfo(st.View)}
	byChannel := map[string]*channelStats{}
	for _, c := range st.Counts {
		ch := byChannel[c.Channel]
		if ch == nil {
			ch = &channelStats{Channel: c.Channel, States: zeroStates(), Entered: zeroStates()}
			byChannel[c.Channel] = ch
		}
		ch.Deliveries += c.Deliveries
		ch.States[c.State] += c.Deliveries
		ch.Entered[c.State] += c.Entered
		out.Deliveries += c.Deliveries
		out.States[c.State] += c.Deliveries
	}
	for _, ch := range byChannel {
		out.Channels = append(out.Channels, *ch)
	}
	sort.Slice(out.Channels, func(i, j int) bool { return out.Channels[i].Channel < out.Channels[j].Channel })
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// checkQuery refuses query parameters other than the known ones (a misspelt filter would
// otherwise silently widen the answer, an unknown flag such as dry_run silently do the real
// thing), a parameter given twice, and a value the database could not take.
func checkQuery(q url.Values, known ...string) error {
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := storableText(name); err != nil {
			return invalid("", "a query parameter name %v", err)
		}
		if !slices.Contains(known, name) {
			if len(known) == 0 {
				return invalid(name, "this endpoint takes no query parameters")
			}
			return invalid(name, "unknown query parameter; known: %s", strings.Join(known, ", "))
		}
		if len(q[name]) > 1 {
			return invalid(name, "given %d times; give it once", len(q[name]))
		}
		if err := storableText(q.Get(name)); err != nil {
			return invalid(name, "%v", err)
		}
	}
	return nil
}

// parseFilter reads the list filters. Every refusal names the parameter at fault.
func (s *server) parseFilter(q url.Values, states []domain.State) (projections.Filter, error) {
	var f projections.Filter
	if v := q.Get("state"); v != "" {
		f.State = domain.State(v)
		known := false
		names := make([]string, len(states))
		for i, st := range states {
			known = known || st == f.State
			names[i] = string(st)
		}
		if !known {
			return f, invalid("state", "unknown state %q; one of: %s", v, strings.Join(names, ", "))
		}
	}
	if v := q.Get("channel"); v != "" {
		if _, ok := s.cfg.Channels[v]; !ok {
			return f, invalid("channel", "unknown channel %q; known: %s", v, s.channels)
		}
		f.Channel = v
	}
	f.Recipient = q.Get("recipient")
	for _, p := range []struct {
		name string
		into *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, invalid(p.name, "not an RFC 3339 time such as 2026-01-02T15:04:05Z")
			}
			*p.into = t.UTC()
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, invalid("until", "must be after since")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > projections.MaxPageLimit {
			return f, invalid("limit", "must be a whole number from 1 to %d", projections.MaxPageLimit)
		}
		f.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		c, err := projections.ParseCursor(v)
		if err != nil {
			return f, invalid("cursor", "%v: pass the next_cursor of the previous page", err)
		}
		f.After = &c
	}
	return f, nil
}

// parseAsOf reads the as_of parameter of GET /v1/deliveries/{id}; zero when absent.
func parseAsOf(q url.Values) (time.Time, error) {
	v := q.Get("as_of")
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, invalid("as_of", "not an RFC 3339 time such as 2026-01-02T15:04:05Z")
	}
	return t.UTC(), nil
}

package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// An operator's two decisions: replay dead deliveries (one, or a page of the DLQ view), and
// resolve an unknown outcome with evidence. Each is an appended event; the answers show the
// delivery as the decision left it.

// Bounds of the free text an operator records with a decision.
const (
	maxReasonLen   = 500
	maxEvidenceLen = 2000
)

// replayRequest is the optional body of the replay endpoints.
type replayRequest struct {
	Reason string `json:"reason"`
	// Actor names who asked; the key's tenant ("tenant:acme") when absent.
	Actor string `json:"actor"`
}

// reconcileRequest is the body of POST /v1/deliveries/{id}/reconcile.
type reconcileRequest struct {
	// Outcome is what the evidence shows: delivered, dead (failed for good) or retrying (the
	// provider never got it: another attempt is safe; dead if no attempt is left).
	Outcome  string `json:"outcome"`
	Evidence string `json:"evidence"`
	// Actor names who decided; the key's tenant ("tenant:acme") when absent.
	Actor               string `json:"actor"`
	StatusCode          int    `json:"status_code"`
	ProviderOperationID string `json:"provider_operation_id"`
}

// reconcileOutcomes maps the wire names (the state each leads to) to outcome kinds.
var reconcileOutcomes = map[string]domain.OutcomeKind{
	string(domain.StateDelivered): domain.OutcomeDelivered,
	string(domain.StateDead):      domain.OutcomePermanent,
	string(domain.StateRetrying):  domain.OutcomeTransient,
}

// dlqReplayAnswer is POST /v1/dlq/replay.
type dlqReplayAnswer struct {
	Replayed []string        `json:"replayed"`
	Skipped  []replaySkipped `json:"skipped"`
	// NextCursor continues with the DLQ page after this one (the same filters); absent on the
	// last page.
	NextCursor string   `json:"next_cursor,omitempty"`
	View       viewInfo `json:"view"`
}

// replaySkipped is a delivery of the page that was not replayed, and why: the view lags the
// log, so a delivery it lists as dead may have been replayed already.
type replaySkipped struct {
	ID     string       `json:"id"`
	State  domain.State `json:"state,omitempty"`
	Detail string       `json:"detail"`
}

// replayAsk is a replay request as read: its reason, and its optional Idempotency-Key with the
// request's fingerprint.
type replayAsk struct {
	reason string
	actor  string
	key    string
	hash   []byte
}

// readReplay decodes an optional replay body and the optional Idempotency-Key.
func (s *server) readReplay(w http.ResponseWriter, r *http.Request) (replayAsk, error) {
	var ask replayAsk
	if values := r.Header.Values(headerIdempotencyKey); len(values) > 0 {
		if len(values) > 1 {
			return ask, invalid(headerIdempotencyKey, "send the header once")
		}
		if err := checkIdempotencyKey(values[0]); err != nil {
			return ask, err
		}
		ask.key = values[0]
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return ask, err
	}
	ask.hash = requestHash(r.Method, r.URL.Path+"?"+r.URL.RawQuery, body)
	if len(body) == 0 {
		return ask, nil
	}
	var req replayRequest
	if err := decodeJSON(body, &req); err != nil {
		return ask, err
	}
	if err := checkText("reason", req.Reason, maxReasonLen); err != nil {
		return ask, err
	}
	if err := checkText("actor", req.Actor, maxReasonLen); err != nil {
		return ask, err
	}
	ask.reason, ask.actor = req.Reason, req.Actor
	return ask, nil
}

// checkText checks a piece of operator text: what an operator writes that the ledger records
// (a reason, an actor, evidence) and shows again, in the console, the CLI's terminal and the
// logs. Given, it must say something (not only white space), fit maxLen, and hold no control
// character: C0 (line breaks included: each is one line of the history), DEL, C1, and the bidi
// controls that make a terminal or a page show other text than is stored. "" is left to the
// caller, which knows whether the field is required.
func checkText(field, v string, maxLen int) error {
	if err := storableText(v); err != nil {
		return invalid(field, "%v", err)
	}
	if v == "" {
		return nil
	}
	if strings.TrimSpace(v) == "" {
		return invalid(field, "is only white space: write it, or leave the member out")
	}
	for i, r := range v {
		if operatorControl(r) {
			return invalid(field, "holds the control character U+%04X at byte %d: operator text is one line of printable characters", r, i)
		}
	}
	if utf8.RuneCountInString(v) > maxLen {
		return invalid(field, "at most %d characters", maxLen)
	}
	return nil
}

// operatorControl reports the characters operator text may not hold: C0 and C1 controls, DEL,
// and the bidirectional formatting characters (ALM, LRM, RLM, the embeddings, overrides and
// isolates), which reorder what a reader sees; and the line and paragraph separators.
func operatorControl(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// replayDelivery is POST /v1/deliveries/{id}/replay: a dead delivery starts a new attempt cycle.
func (s *server) replayDelivery(w http.ResponseWriter, r *http.Request, tenant string) error {
	ask, err := s.readReplay(w, r)
	if err != nil {
		return err
	}
	// The store answers an id that is not a UUID as not found, like any unknown id.
	id, ok := pathID(r.PathValue("id"))
	if !ok {
		return commands.ErrNotFound
	}
	d, err := s.deps.Replay.Handle(r.Context(), commands.Replay{Tenant: tenant, DeliveryID: id, Reason: ask.reason, Actor: ask.actorOr(tenant),
		RequestKey: ask.key, RequestHash: ask.hash})
	if err != nil {
		return err
	}
	out, err := s.deliveryAfter(r.Context(), tenant, d)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusAccepted, out)
	return nil
}

// replayDLQ is POST /v1/dlq/replay: replays the dead deliveries of one page of the DLQ view,
// chosen with the filters of GET /v1/dlq (state is always dead: an unknown outcome is
// reconciled, not replayed).
func (s *server) replayDLQ(w http.ResponseWriter, r *http.Request, tenant string) error {
	q := queryOf(r)
	if v := q.Get("state"); v != "" && v != string(domain.StateDead) {
		return invalid("state", "only dead deliveries are replayed; an unknown outcome is resolved with POST /v1/deliveries/{id}/reconcile")
	}
	f, err := s.parseFilter(q, []domain.State{domain.StateDead})
	if err != nil {
		return err
	}
	if f.FailureClass, err = parseFailureClass(q.Get("failure_class")); err != nil {
		return err
	}
	f.State = domain.StateDead
	ask, err := s.readReplay(w, r)
	if err != nil {
		return err
	}
	if ask.key != "" {
		// A repeat of a page replay gets the first one's answer.
		stored, err := s.deps.OperatorRequests.RequestGet(r.Context(), tenant, ask.key)
		switch {
		case err == nil && string(stored.Hash) != string(ask.hash):
			return commands.ErrRequestMismatch
		case err == nil:
			return s.writeStored(w, r, stored.Response)
		case !errors.Is(err, commands.ErrNotFound):
			return err
		}
	}
	page, err := s.deps.Views.DeadLetters(r.Context(), tenant, f)
	if err != nil {
		return err
	}
	out := dlqReplayAnswer{Replayed: []string{}, Skipped: []replaySkipped{}, View: newViewInfo(page.View)}
	if page.Next != nil {
		out.NextCursor = page.Next.String()
	}
	for _, row := range page.Items {
		cmd := commands.Replay{Tenant: tenant, DeliveryID: row.ID, Reason: ask.reason, Actor: ask.actorOr(tenant)}
		if ask.key != "" {
			// Each delivery's replay is keyed too, so a repeat after a failure half-way replays
			// none of them twice, even one that died again since.
			cmd.RequestKey, cmd.RequestHash = "dlq:"+row.ID+":"+ask.key, ask.hash
		}
		d, err := s.deps.Replay.Handle(r.Context(), cmd)
		switch {
		case err == nil:
			out.Replayed = append(out.Replayed, row.ID)
		case errors.Is(err, domain.ErrNotDead), errors.Is(err, domain.ErrAlreadyReplayed):
			// Replayed by another request meanwhile (the view lags the log), or by one that
			// raced this one: either way not this request's to replay.
			out.Skipped = append(out.Skipped, replaySkipped{ID: row.ID, State: d.State(), Detail: "no longer dead"})
		case errors.Is(err, commands.ErrNotFound):
			out.Skipped = append(out.Skipped, replaySkipped{ID: row.ID, Detail: "not found"})
		case errors.As(err, new(*commands.ReplaySuppressedError)):
			out.Skipped = append(out.Skipped, replaySkipped{ID: row.ID, State: d.State(), Detail: err.Error()})
		default:
			// What was replayed stays replayed; the caller sees the failure and can run the same
			// request again, which skips what is no longer dead.
			return err
		}
	}
	if ask.key != "" {
		answer, err := json.Marshal(out)
		if err != nil {
			return err
		}
		err = s.deps.OperatorRequests.RequestPut(r.Context(), commands.StoredRequest{Tenant: tenant, Key: ask.key, Hash: ask.hash, Response: answer})
		if errors.Is(err, commands.ErrRequestTaken) {
			// A concurrent repeat finished first: both answer as it did.
			stored, err := s.deps.OperatorRequests.RequestGet(r.Context(), tenant, ask.key)
			if err != nil {
				return err
			}
			return s.writeStored(w, r, stored.Response)
		}
		if err != nil {
			return err
		}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// writeStored answers a repeated request with its first answer.
func (s *server) writeStored(w http.ResponseWriter, r *http.Request, answer []byte) error {
	var out dlqReplayAnswer
	if err := json.Unmarshal(answer, &out); err != nil {
		return fmt.Errorf("decode stored answer: %w", err)
	}
	w.Header().Set(headerIdempotentReplayed, "true")
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// reconcileDelivery is POST /v1/deliveries/{id}/reconcile: resolves an unknown outcome with
// the evidence the operator or provider has.
func (s *server) reconcileDelivery(w http.ResponseWriter, r *http.Request, tenant string) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req reconcileRequest
	if len(body) == 0 {
		return invalid("", "send a JSON body with outcome and evidence")
	}
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	kind, ok := reconcileOutcomes[req.Outcome]
	switch {
	case req.Outcome == "":
		return invalid("outcome", "required: delivered, dead or retrying")
	case !ok:
		return invalid("outcome", "unknown outcome %q; one of: delivered, dead, retrying", req.Outcome)
	case strings.TrimSpace(req.Evidence) == "":
		return invalid("evidence", "required: what shows the outcome (a provider receipt, a log line, a ticket)")
	case req.StatusCode != 0 && (req.StatusCode < 100 || req.StatusCode > 599):
		return invalid("status_code", "must be an HTTP status from 100 to 599")
	}
	for _, t := range []struct {
		field, v string
		max      int
	}{{"evidence", req.Evidence, maxEvidenceLen}, {"actor", req.Actor, maxReasonLen}, {"provider_operation_id", req.ProviderOperationID, maxReasonLen}} {
		if err := checkText(t.field, t.v, t.max); err != nil {
			return err
		}
	}
	if req.Actor == "" {
		req.Actor = tenantActor(tenant)
	}
	id, ok := pathID(r.PathValue("id"))
	if !ok {
		return commands.ErrNotFound
	}
	d, err := s.deps.Reconcile.Handle(r.Context(), commands.Reconcile{Tenant: tenant, DeliveryID: id,
		Outcome:  domain.Outcome{Kind: kind, StatusCode: req.StatusCode, ProviderOperationID: req.ProviderOperationID},
		Evidence: req.Evidence, Actor: req.Actor})
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

// tenantActor is the actor of a decision made with a tenant's key that names none.
func tenantActor(tenant string) string { return "tenant:" + tenant }

// actorOr is the ask's actor, or the tenant's when it names none.
func (a replayAsk) actorOr(tenant string) string {
	if a.actor != "" {
		return a.actor
	}
	return tenantActor(tenant)
}

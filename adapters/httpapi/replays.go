package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// Replay jobs: an operator's replay of every dead delivery a filter selects, run in the
// background (commands.ReplayJobs).

// replayJobRequest is the body of POST /v1/replays.
type replayJobRequest struct {
	Reason         string `json:"reason"`
	Channel        string `json:"channel"`
	FailureClass   string `json:"failure_class"`
	Since          string `json:"since"`
	Until          string `json:"until"`
	Recipient      string `json:"recipient"`
	IncludeUnknown bool   `json:"include_unknown"`
	// Actor names who asks; the key's tenant ("tenant:acme") when absent. Each replay records it.
	Actor string `json:"actor"`
	// DryRun counts the deliveries the job would replay now and creates nothing (no
	// Idempotency-Key needed): the number an operator confirms.
	DryRun bool `json:"dry_run"`
}

// replayJobPreview answers a dry run of POST /v1/replays.
type replayJobPreview struct {
	DryRun         bool                   `json:"dry_run"`
	Matched        int                    `json:"matched"`
	IncludeUnknown bool                   `json:"include_unknown"`
	Filters        commands.ReplayFilters `json:"filters"`
}

// failureClasses are the classes a DLQ entry may have.
var failureClasses = []domain.ErrorClass{domain.ClassPermanent, domain.ClassTransient, domain.ClassUnknown, domain.ClassPanic}

// replayJobView is a job as the API shows it.
type replayJobView struct {
	ID             string                 `json:"id"`
	State          string                 `json:"state"`
	Reason         string                 `json:"reason"`
	Actor          string                 `json:"actor"`
	IncludeUnknown bool                   `json:"include_unknown"`
	Filters        commands.ReplayFilters `json:"filters"`
	Matched        int                    `json:"matched"`
	Replayed       int                    `json:"replayed"`
	Skipped        int                    `json:"skipped"`
	Skips          map[string]int         `json:"skips"`
	CreatedAt      time.Time              `json:"created_at"`
	UpdatedAt      time.Time              `json:"updated_at"`
	FinishedAt     *time.Time             `json:"finished_at,omitempty"`
}

func newReplayJobView(j commands.ReplayJob) replayJobView {
	skips := j.Skips
	if skips == nil {
		skips = map[string]int{}
	}
	actor := j.Actor
	if actor == "" {
		actor = tenantActor(j.Tenant)
	}
	return replayJobView{ID: j.ID, State: j.State, Reason: j.Reason, Actor: actor, IncludeUnknown: j.IncludeUnknown, Filters: j.Filters,
		Matched: j.Matched, Replayed: j.Replayed, Skipped: j.Skipped, Skips: skips, CreatedAt: j.CreatedAt,
		UpdatedAt: j.UpdatedAt, FinishedAt: j.FinishedAt}
}

// createReplayJob answers POST /v1/replays: 202 with the job, which runs in the background; a
// dry run answers 200 with the count the job would match.
func (s *server) createReplayJob(w http.ResponseWriter, r *http.Request, tenant string) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		return invalid("", "send a JSON body with at least a reason")
	}
	var req replayJobRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	var key string
	if !req.DryRun {
		if key, err = idempotencyKeyOf(r); err != nil {
			return err
		}
	}
	if strings.TrimSpace(req.Reason) == "" && !req.DryRun {
		return invalid("reason", "required: why these deliveries are replayed (recorded on each)")
	}
	for _, t := range []struct{ field, v string }{{"reason", req.Reason}, {"recipient", req.Recipient}, {"actor", req.Actor}} {
		if err := checkText(t.field, t.v, maxReasonLen); err != nil {
			return err
		}
	}
	if req.Channel != "" {
		if _, ok := s.cfg.Channels[req.Channel]; !ok {
			return invalid("channel", "unknown channel %q; known: %s", req.Channel, s.channels)
		}
	}
	class, err := parseFailureClass(req.FailureClass)
	if err != nil {
		return err
	}
	filters := commands.ReplayFilters{Channel: req.Channel, FailureClass: class, Recipient: req.Recipient}
	for _, p := range []struct {
		field, v string
		into     **time.Time
	}{{"since", req.Since, &filters.Since}, {"until", req.Until, &filters.Until}} {
		if p.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, p.v)
		if err != nil {
			return invalid(p.field, "not an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		t = t.UTC()
		*p.into = &t
	}
	if filters.Since != nil && filters.Until != nil && !filters.Until.After(*filters.Since) {
		return invalid("until", "must be after since")
	}
	ask := commands.ReplayJob{Tenant: tenant, RequestKey: key, RequestHash: requestHash(r.Method, r.URL.Path, body),
		Reason: req.Reason, Actor: req.Actor, IncludeUnknown: req.IncludeUnknown, Filters: filters}
	if req.DryRun {
		n, err := s.deps.ReplayJobs.Count(r.Context(), ask)
		if err != nil {
			return err
		}
		s.writeJSON(w, r, http.StatusOK, replayJobPreview{DryRun: true, Matched: n, IncludeUnknown: req.IncludeUnknown, Filters: filters})
		return nil
	}
	job, created, err := s.deps.ReplayJobs.Create(r.Context(), ask)
	if errors.Is(err, commands.ErrTooManyMatched) {
		return invalid("", "%v: narrow the filters (channel, failure_class, since, until, recipient)", err)
	}
	if err != nil {
		return err
	}
	if !created {
		w.Header().Set(headerIdempotentReplayed, "true")
	}
	w.Header().Set("Location", "/v1/replays/"+job.ID)
	s.writeJSON(w, r, http.StatusAccepted, newReplayJobView(job))
	return nil
}

// replayJob answers GET /v1/replays/{id}.
func (s *server) replayJob(w http.ResponseWriter, r *http.Request, tenant string) error {
	return s.answerJob(w, r, tenant, s.deps.ReplayJobs.Get)
}

// cancelReplayJob answers POST /v1/replays/{id}/cancel: 200 with the job, cancelled; its runner
// stops at its next page. A repeat answers the same; a finished job is 409 naming its state.
func (s *server) cancelReplayJob(w http.ResponseWriter, r *http.Request, tenant string) error {
	return s.answerJob(w, r, tenant, s.deps.ReplayJobs.Cancel)
}

// answerJob answers with the job of the path's id as do leaves it: 200, or 404 for an id that
// names no job of the tenant.
func (s *server) answerJob(w http.ResponseWriter, r *http.Request, tenant string,
	do func(ctx context.Context, tenant, id string) (commands.ReplayJob, error)) error {
	id, ok := pathID(r.PathValue("id"))
	if !ok {
		return errReplayJobNotFound
	}
	job, err := do(r.Context(), tenant, id)
	if errors.Is(err, commands.ErrNotFound) {
		return errReplayJobNotFound
	}
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, newReplayJobView(job))
	return nil
}

// errReplayJobNotFound answers an unknown job id, or another tenant's.
var errReplayJobNotFound = &requestError{kind: errRouteNotFound, detail: "no replay job with this id"}

// replayJobs answers GET /v1/replays: the tenant's latest jobs, newest first.
func (s *server) replayJobs(w http.ResponseWriter, r *http.Request, tenant string) error {
	limit := 20
	if v := queryOf(r).Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return invalid("limit", "must be a whole number from 1 to 100")
		}
		limit = n
	}
	jobs, err := s.deps.ReplayJobs.List(r.Context(), tenant, limit)
	if err != nil {
		return err
	}
	items := make([]replayJobView, len(jobs))
	for i, j := range jobs {
		items[i] = newReplayJobView(j)
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"items": items})
	return nil
}

// idempotencyKeyOf reads the Idempotency-Key (once) that creating a job needs.
func idempotencyKeyOf(r *http.Request) (string, error) {
	values := r.Header.Values(headerIdempotencyKey)
	switch {
	case len(values) == 0 || values[0] == "":
		return "", invalid(headerIdempotencyKey, "required: a repeat of the request under the same key answers the same job instead of starting another")
	case len(values) > 1:
		return "", invalid(headerIdempotencyKey, "send the header once")
	}
	if err := checkIdempotencyKey(values[0]); err != nil {
		return "", err
	}
	return values[0], nil
}

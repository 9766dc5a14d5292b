package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// Kinds of failure the API itself detects. Handlers return them (usually inside a
// *requestError that names the field); problemFor turns them into a status.
var (
	errInvalid              = errors.New("invalid request")
	errUnauthenticated      = errors.New("missing or unknown bearer key")
	errUnsupportedMediaType = errors.New("unsupported media type")
	errRouteNotFound        = errors.New("no such resource")
	errMethodNotAllowed     = errors.New("method not allowed")
	errNotReady             = errors.New("not ready")
	errForbidden            = errors.New("forbidden")
	errNotYet               = errors.New("not yet")
)

// requestError is a failure the caller can fix. kind selects the status, field names what is at
// fault (a JSON member such as "recipients[1].channel", or a header such as
// "Idempotency-Key"), and detail tells the caller what to change.
type requestError struct {
	kind   error
	field  string
	detail string
}

func (e *requestError) Error() string {
	if e.field == "" {
		return e.detail
	}
	return e.field + ": " + e.detail
}

func (e *requestError) Unwrap() error { return e.kind }

// invalid is a 400 about one field (or the whole body when field is empty).
func invalid(field, format string, args ...any) error {
	return &requestError{kind: errInvalid, field: field, detail: fmt.Sprintf(format, args...)}
}

// problem is an RFC 9457 problem detail. The type is always about:blank: the status and the
// field member carry what a client branches on, and we publish no problem-type documents that
// a URI could point at.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field,omitempty"`
	// Reason and Segment say why a delivery is gone: "archived", in that archive segment.
	Reason  string `json:"reason,omitempty"`
	Segment string `json:"segment,omitempty"`
}

// problemFor is the one place that chooses an HTTP status for an error.
//
// Every input the caller can correct (malformed JSON, unknown members, a value out of range,
// a missing header) is 400. We do not use 422 for semantically wrong values: 422 has one meaning
// in this API, the Idempotency-Key contract's "this key was used with a different request", so a
// client tells a bad body from a reused key by the status alone.
func problemFor(err error) problem {
	p := problem{Type: "about:blank", Detail: err.Error()}
	var re *requestError
	if errors.As(err, &re) {
		p.Field, p.Detail = re.field, re.detail
	}
	var field *commands.InvalidField
	if re == nil && errors.As(err, &field) {
		// A command's refusal of one member (a category not declared, an unknown channel).
		p.Field, p.Detail = field.Field, field.Reason
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		p.Status = http.StatusRequestEntityTooLarge
		p.Detail = fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit)
	case errors.Is(err, commands.ErrFanOutTooLarge):
		// The body fits, but what it fans out to does not; the handler names the member.
		p.Status = http.StatusRequestEntityTooLarge
	case errors.Is(err, errInvalid), errors.Is(err, domain.ErrInvalidDelivery), errors.Is(err, commands.ErrSuppressionInvalid):
		p.Status = http.StatusBadRequest
	case errors.Is(err, errUnauthenticated):
		p.Status = http.StatusUnauthorized
	case errors.Is(err, errForbidden):
		p.Status = http.StatusForbidden
	case errors.Is(err, errNotYet):
		p.Status = http.StatusServiceUnavailable
	case errors.Is(err, commands.ErrContended):
		// Many writers at one delivery at once (a provider's burst of callbacks): trying again
		// in a moment succeeds, and providers do try a 503 again.
		p.Status, p.Detail = http.StatusServiceUnavailable, "the delivery is being changed by other requests; try again shortly"
	case storeUnavailable(err):
		// The database went away under the request (a restart, a failover, an operator ending
		// connections): not a bug of ours, and every write of the API is idempotent, so the
		// caller repeats it. Fixed text: the driver's error names hosts and users.
		p.Status, p.Detail = http.StatusServiceUnavailable, "the database connection was lost; repeat the request (with the same Idempotency-Key, if it had one)"
	case errors.As(err, new(*commands.ArchivedError)):
		// The history left the hot store (retention): the archive holds it.
		var archived *commands.ArchivedError
		errors.As(err, &archived)
		p.Status, p.Reason, p.Segment = http.StatusGone, "archived", archived.Segment
		p.Detail = "archived: this delivery's history left the hot store after the retention period; archive segment " +
			archived.Segment + " holds it (ledger archive show ID)"
	case errors.Is(err, commands.ErrNotFound):
		// Fixed text: the same answer for "no such id" and "another tenant's id". A handler
		// of another resource names it (requestError).
		p.Status = http.StatusNotFound
		if re == nil {
			p.Detail = "no delivery with this id"
		}
	case errors.Is(err, errRouteNotFound):
		p.Status = http.StatusNotFound
	case errors.Is(err, errMethodNotAllowed):
		p.Status = http.StatusMethodNotAllowed
	case errors.Is(err, commands.ErrRequestInFlight):
		// Fixed text: the store's error may carry database detail.
		p.Status, p.Field = http.StatusConflict, headerIdempotencyKey
		p.Detail = "a request with this Idempotency-Key is still being processed; retry later"
	case errors.As(err, new(*domain.CancelRefused)):
		p.Status, p.Field = http.StatusConflict, "state"
		p.Detail, _ = cancelRefusedDetail(err)
	case errors.Is(err, domain.ErrNotDead), errors.Is(err, domain.ErrNotUnknown):
		// The delivery is real but in a state the decision does not apply to.
		p.Status, p.Field = http.StatusConflict, "state"
	case errors.Is(err, commands.ErrPayloadExpired):
		p.Status, p.Field = http.StatusConflict, "payload"
	case errors.As(err, new(*commands.ReplaySuppressedError)):
		// The recipient is suppressed: a replay would end suppressed for good.
		p.Status, p.Field = http.StatusConflict, "state"
	case errors.Is(err, domain.ErrAlreadyReplayed):
		// One replay per dead cycle: another request replayed the death this one saw.
		p.Status, p.Field = http.StatusConflict, "state"
	case errors.As(err, new(*commands.ReplayJobFinishedError)):
		// A finished job cannot be cancelled; the detail names how it finished.
		p.Status, p.Field = http.StatusConflict, "state"
	case errors.Is(err, errUnsupportedMediaType):
		p.Status = http.StatusUnsupportedMediaType
	case errors.Is(err, commands.ErrRequestMismatch):
		p.Status, p.Field = http.StatusUnprocessableEntity, headerIdempotencyKey
		p.Detail = "this Idempotency-Key was used with a different request (method, path or body)"
	case errors.Is(err, context.Canceled):
		// The caller went away (a console page left mid-request): not the server's failure.
		p.Status, p.Detail = http.StatusServiceUnavailable, "the request was cancelled"
	case errors.Is(err, errNotReady):
		// Fixed text: the cause (a driver's error names users, hosts and ports) is for the log,
		// not for whoever can reach an unauthenticated endpoint.
		p.Status, p.Detail = http.StatusServiceUnavailable, "not ready: the database or the broker does not answer; the server log has the cause"
	default:
		// Never echo an unexpected error: it may name tables, hosts or data. It is logged.
		p.Status, p.Field = http.StatusInternalServerError, ""
		p.Detail = "internal error; the server log has the cause"
	}
	p.Title = http.StatusText(p.Status)
	return p
}

// deliveryAttr is the delivery_id of a request to a delivery's routes (/v1/deliveries/{id}/…),
// for its log lines: every line about a delivery names it (none for other routes).
func deliveryAttr(r *http.Request) []any {
	if !strings.HasPrefix(routePath(r.Pattern), "/v1/deliveries/{id}") {
		return nil
	}
	if id := r.PathValue("id"); id != "" {
		return []any{"delivery_id", id}
	}
	return nil
}

// routePath is a route pattern's path ("/v1/deliveries/{id}" of "GET /v1/deliveries/{id}").
func routePath(pattern string) string {
	if _, path, ok := strings.Cut(pattern, " "); ok {
		return path
	}
	return pattern
}

// writeProblem answers with the problem for err, plus the headers its status calls for.
func (s *server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(err)
	if p.Status >= http.StatusInternalServerError && p.Status != http.StatusServiceUnavailable {
		s.logger.ErrorContext(r.Context(), "http request failed", append(deliveryAttr(r),
			"method", r.Method, "path", r.URL.Path, "status", p.Status, "err", err)...)
	}
	switch p.Status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="ledger"`)
	case http.StatusConflict:
		if errors.Is(err, commands.ErrRequestInFlight) {
			// The first request is usually done within a second; tell well-behaved clients so.
			w.Header().Set("Retry-After", "1")
		}
	case http.StatusServiceUnavailable:
		if storeUnavailable(err) {
			// Not logged as a failure of the server, but an operator wants to see it.
			s.logger.WarnContext(r.Context(), "http request met the database unavailable", append(deliveryAttr(r),
				"method", r.Method, "path", r.URL.Path, "err", err)...)
			w.Header().Set("Retry-After", "1")
		}
		if errors.Is(err, errNotYet) || errors.Is(err, commands.ErrContended) {
			// A second is plenty for the call to be recorded, or the other writers to be done.
			w.Header().Set("Retry-After", "1")
		}
	}
	body, merr := json.Marshal(p)
	if merr != nil {
		// A problem is strings and an int: this cannot fail.
		panic(fmt.Sprintf("encode problem: %v", merr))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// storeUnavailable reports whether err says the database could not be reached or dropped the
// connection: SQLSTATE class 08 (connection exception), 57P01-57P05 (the server ended the
// session: shutdown, crash, an operator's pg_terminate_backend, idle timeouts), 53300 (too many
// connections), or a network error on the way. The driver's error types expose the SQLSTATE
// through a method, so the API needs no import of the driver.
func storeUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return false // a net.Error too, but the request's own deadline, not the database
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		state := coded.SQLState()
		return strings.HasPrefix(state, "08") || strings.HasPrefix(state, "57P") || state == "53300"
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// Package httpapi is the ledger's HTTP adapter: it authenticates a tenant by bearer key, turns
// JSON requests into commands, and renders delivery streams as status and audit documents. It
// decides nothing about deliveries itself; the commands and the domain do.
//
// Endpoints:
//
//	POST /v1/deliveries                 accept one delivery (Idempotency-Key required) → 202
//	POST /v1/notifications              accept one notification for up to 1000 recipients, atomically → 202
//	GET  /v1/deliveries/{id}            status, folded from the delivery's events (?as_of=RFC3339: as it was then)
//	GET  /v1/deliveries/{id}/events     audit: every event, in version order, with the state it led to
//	GET  /v1/requests/{key}             the answer an accept request under this Idempotency-Key got
//	GET  /v1/deliveries                 list from the status view (?state=&channel=&recipient=&since=&until=&limit=&cursor=)
//	GET  /v1/dlq                        list from the DLQ view (dead and unknown; same filters, and failure_class)
//	GET  /v1/stats                      the tenant's counters per channel and state
//	GET  /v1/stats/minutes              the tenant's accepted, delivered and dead per minute over the last hour
//	POST /v1/deliveries/{id}/replay     a dead delivery starts a new attempt cycle → 202
//	POST /v1/dlq/replay                 replay the dead deliveries of one DLQ page (GET /v1/dlq's filters, failure_class too)
//	POST /v1/deliveries/{id}/reconcile  resolve an unknown outcome with evidence
//	POST /v1/replays                    a durable bulk replay of a filter's dead deliveries → 202 (dry_run: its count → 200)
//	GET  /v1/replays/{id}, /v1/replays  a replay job's progress; the latest jobs
//	POST /v1/receipts/{provider}        a provider's delivery receipt (authenticated by the provider);
//	                                    GET too for a provider that sends receipts as a query (Vonage)
//	GET  /v1/providers                  each provider's channel and circuit state
//	GET  /u/{token}                     a recipient's one-click unsubscribe page (no key: the token is signed)
//	POST /u/{token}                     the one-click unsubscribe itself (List-Unsubscribe=One-Click, RFC 8058)
//	GET  /console/                      the operators' web console (static; calls this API)
//	GET  /openapi.yaml                  this API's OpenAPI 3.1 description
//	GET  /healthz, GET /readyz          liveness, readiness
//
// The list answers are {"items":[...],"next_cursor":"...","view":{...}}: next_cursor is absent on
// the last page, and view is {name, version, pending_events}: the view the answer was read from
// and how many of the tenant's own recorded events it does not reflect yet (0: complete); it
// says nothing of other tenants, not even the log's position. Pages are keyed on (accepted_at,
// id), newest first, so deliveries accepted while a client pages never shift the pages it has
// yet to read.
//
// Every error is an RFC 9457 application/problem+json document whose field member names the
// offending JSON member, query parameter or header when one is at fault. Status codes:
//
//	400  the caller can fix the request: malformed JSON, an unknown member, a missing or
//	     out-of-range value, an unknown, repeated or undecodable query parameter, a missing,
//	     repeated or too long Idempotency-Key. Semantically wrong values (unknown channel,
//	     invalid recipient, payload not an object) are 400 too, never 422.
//	401  missing or unknown bearer key (with WWW-Authenticate: Bearer)
//	404  unknown route, or a delivery that does not exist or belongs to another tenant (the two
//	     are indistinguishable on purpose)
//	405  known route, other method
//	409  a request with the same Idempotency-Key is still in flight; a replay of a delivery that is
//	     not dead, or a reconciliation of one whose outcome is not unknown (field "state")
//	413  body larger than Config.MaxBodyBytes, or a notification whose payload times its
//	     recipients is over the fan-out bound (field "recipients")
//	415  a Content-Type other than JSON
//	422  the Idempotency-Key was used before with a different request
//	503  /readyz: a dependency is down
//
// Idempotency: a request is identified by its tenant and Idempotency-Key, and fingerprinted by
// sha256(method + path + "\n" + body bytes). A repeat with the same fingerprint gets the first
// answer again (same ids, 202, Idempotent-Replayed: true); the same key on the other accept
// endpoint, or with another body, is a different request and gets 422.
package httpapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/console"
	"github.com/deliveryledger/ledger/tracing"
)

// readyTimeout bounds a readiness check, so a hung database makes /readyz answer 503 in time for
// the orchestrator's probe instead of timing out without an answer.
const readyTimeout = 2 * time.Second

// Header names of the idempotency contract.
const (
	headerIdempotencyKey     = "Idempotency-Key"
	headerIdempotentReplayed = "Idempotent-Replayed"
)

type server struct {
	cfg    Config
	deps   Deps
	logger *slog.Logger
	// keys maps sha256(bearer key) to tenant: looking up a hash rather than the key keeps the
	// lookup's timing independent of how much of a guessed key is right.
	keys     map[[sha256.Size]byte]string
	channels string // the known channel names, for error details
	mux      *http.ServeMux
	// routes lists every route with the query parameters it takes (the tests walk them), and
	// patterns every pattern the mux has, those routes' and the others' (see handle).
	routes   []route
	patterns []string
}

// route is one pattern of the mux and the query parameters it takes; any other is refused.
type route struct {
	pattern string
	params  []string
}

// New builds the API handler. It logs every request at debug level and turns a panic in a
// handler into a 500 problem, so one bad request never takes the process down.
func New(cfg Config, deps Deps, logger *slog.Logger) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("http api config: %w", err)
	}
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &server{cfg: cfg.withDefaults(), deps: deps, logger: logger, mux: http.NewServeMux()}
	s.keys = make(map[[sha256.Size]byte]string, len(cfg.APIKeys))
	for key, tenant := range cfg.APIKeys {
		s.keys[sha256.Sum256([]byte(key))] = tenant
	}
	if len(s.keys) == 0 {
		logger.Warn("no API keys configured: every /v1 request will get 401")
	}
	names := make([]string, 0, len(cfg.Channels))
	for name := range cfg.Channels {
		names = append(names, name)
	}
	sort.Strings(names)
	s.channels = strings.Join(names, ", ")

	filters := []string{"state", "channel", "recipient", "since", "until", "limit", "cursor"}
	s.tenantRoute("POST /v1/deliveries", s.acceptDelivery)
	s.tenantRoute("POST /v1/notifications", s.acceptNotification)
	s.tenantRoute("GET /v1/deliveries/{id}", s.deliveryStatus, "as_of")
	s.tenantRoute("GET /v1/deliveries/{id}/events", s.deliveryEvents)
	if deps.Requests != nil {
		s.tenantRoute("GET /v1/requests/{key}", s.requestAnswer)
	}
	if deps.Views != nil {
		s.tenantRoute("GET /v1/deliveries", s.listDeliveries, filters...)
		s.tenantRoute("GET /v1/dlq", s.listDLQ, append([]string{"failure_class"}, filters...)...)
		s.tenantRoute("GET /v1/stats", s.stats)
		s.tenantRoute("GET /v1/stats/minutes", s.statsMinutes)
	}
	if deps.Replay != nil {
		s.tenantRoute("POST /v1/deliveries/{id}/replay", s.replayDelivery)
		if deps.Views != nil {
			s.tenantRoute("POST /v1/dlq/replay", s.replayDLQ, append([]string{"failure_class"}, filters...)...)
		}
	}
	if deps.Cancel != nil {
		s.tenantRoute("POST /v1/deliveries/{id}/cancel", s.cancelDelivery)
		if deps.Notifications != nil {
			s.tenantRoute("POST /v1/notifications/{id}/cancel", s.cancelNotification)
		}
	}
	if deps.Reconcile != nil {
		s.tenantRoute("POST /v1/deliveries/{id}/reconcile", s.reconcileDelivery)
	}
	if deps.ReplayJobs != nil {
		s.tenantRoute("POST /v1/replays", s.createReplayJob)
		s.tenantRoute("GET /v1/replays/{id}", s.replayJob)
		s.tenantRoute("POST /v1/replays/{id}/cancel", s.cancelReplayJob)
		s.tenantRoute("GET /v1/replays", s.replayJobs, "limit")
	}
	if deps.Providers != nil {
		s.tenantRoute("GET /v1/providers", s.providers)
	}
	if deps.Suppressions != nil {
		s.tenantRoute("POST /v1/suppressions", s.addSuppression)
		s.tenantRoute("GET /v1/suppressions", s.listSuppressions, "channel", "recipient", "include_removed", "limit", "cursor")
		s.tenantRoute("GET /v1/suppressions/{id}", s.suppression)
		s.tenantRoute("DELETE /v1/suppressions/{id}", s.removeSuppression)
		s.tenantRoute("PUT /v1/preferences", s.putPreference)
		s.tenantRoute("GET /v1/preferences", s.preferences, "channel", "recipient")
	}
	if deps.Receipts != nil {
		// Not in s.routes: the provider chooses the callback's query (see receipt). GET is for
		// the providers that send receipts as a query (Receipts.ByGET); receipt refuses it for
		// the others.
		s.handle("POST /v1/receipts/{provider}", http.HandlerFunc(s.receipt))
		s.handle("GET /v1/receipts/{provider}", http.HandlerFunc(s.receipt))
	}
	if len(cfg.UnsubscribeSecret) > 0 && deps.Suppressions != nil {
		// A recipient's one-click unsubscribe (RFC 8058): the signed token is the authority.
		s.publicRoute("GET /u/{token}", s.unsubscribePage)
		s.publicRoute("POST /u/{token}", s.unsubscribe)
	}
	// The operators' console: static pages that call this API with the key an operator enters.
	// It answers /console itself too (its redirect to /console/): left to the mux, that redirect
	// went out without the console's security headers.
	site := console.Handler()
	s.handle(console.Prefix, site)
	s.handle(strings.TrimSuffix(console.Prefix, "/"), site)
	s.publicRoute("GET /openapi.yaml", OpenAPIHandler().ServeHTTP)
	s.publicRoute("GET /healthz", s.healthz)
	s.publicRoute("GET /readyz", s.readyz)
	return s, nil
}

// ServeHTTP recovers panics and logs the request around the routing.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.logger.ErrorContext(r.Context(), "panic in http handler", append(deliveryAttr(r),
				"method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))...)
			if sw.status != 0 {
				// Part of an answer is out: abort the connection, so the client sees a broken
				// response rather than one that looks complete.
				panic(http.ErrAbortHandler)
			}
			s.writeProblem(sw, r, fmt.Errorf("panic: %v", v))
		}
		s.logger.DebugContext(r.Context(), "http request", append(deliveryAttr(r), "method", r.Method, "path", r.URL.Path,
			"status", sw.status, "duration", time.Since(start))...)
	}()
	s.route(sw, r)
}

// route serves r through the mux, but answers unknown routes and wrong methods with problems
// instead of the mux's plain-text pages.
func (s *server) route(w http.ResponseWriter, r *http.Request) {
	if h, pattern := s.mux.Handler(r); pattern == "" {
		// No pattern: the mux would answer 404, 405 or a path-cleaning redirect. Let it decide
		// on a probe, keep its Allow header, and write the problem ourselves.
		probe := &probeWriter{header: http.Header{}}
		h.ServeHTTP(probe, r)
		switch probe.status {
		case http.StatusNotFound:
			s.writeProblem(w, r, &requestError{kind: errRouteNotFound,
				detail: fmt.Sprintf("no resource at %s", r.URL.Path)})
			return
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", probe.header.Get("Allow"))
			s.writeProblem(w, r, &requestError{kind: errMethodNotAllowed,
				detail: fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, probe.header.Get("Allow"))})
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// tenantHandler is a /v1 handler: it runs for an authenticated tenant and returns an error
// instead of writing one, so the status of every failure is chosen in problemFor.
type tenantHandler func(w http.ResponseWriter, r *http.Request, tenant string) error

// tenantRoute registers a /v1 handler: the bearer key is authenticated, then the query is
// parsed and checked against params (see withQuery), before h runs.
func (s *server) tenantRoute(pattern string, h tenantHandler, params ...string) {
	s.routes = append(s.routes, route{pattern: pattern, params: params})
	s.handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tracing.Route(r, pattern)
		tenant, err := s.authenticate(r)
		if err == nil {
			r, err = withQuery(r, params)
		}
		if err == nil {
			err = h(w, r, tenant)
		}
		if err != nil {
			s.writeProblem(w, r, err)
		}
	}))
}

// publicRoute registers a handler that needs no key; its query is checked like any other.
func (s *server) publicRoute(pattern string, h http.HandlerFunc, params ...string) {
	s.routes = append(s.routes, route{pattern: pattern, params: params})
	s.handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tracing.Route(r, pattern)
		r, err := withQuery(r, params)
		if err != nil {
			s.writeProblem(w, r, err)
			return
		}
		h(w, r)
	}))
}

// handle registers a pattern with the mux. Every registration goes through here, so the tests
// see every pattern the server has, the ones that escape the query check included.
func (s *server) handle(pattern string, h http.Handler) {
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, h)
}

// queryKey is the context key of the query withQuery parsed.
type queryKey struct{}

// withQuery parses r's query strictly (parseQuery) and checks it against params (checkQuery),
// and returns r carrying it for the handler, which reads it with queryOf. Every route goes
// through here, so no handler parses a query of its own.
func withQuery(r *http.Request, params []string) (*http.Request, error) {
	if r.URL.RawQuery == "" {
		return r, nil // the common case: nothing to parse, queryOf reads an empty query
	}
	q, err := parseQuery(r.URL.RawQuery)
	if err == nil {
		err = checkQuery(q, params...)
	}
	if err != nil {
		return r, err
	}
	return r.WithContext(context.WithValue(r.Context(), queryKey{}, q)), nil
}

// queryOf is the query withQuery parsed and checked. Handlers read it instead of r.URL.Query(),
// which drops the pairs that do not decode (see parseQuery).
func queryOf(r *http.Request) url.Values {
	q, _ := r.Context().Value(queryKey{}).(url.Values)
	return q
}

// parseQuery parses a raw query as url.ParseQuery does, but refuses what r.URL.Query() would
// silently drop: a pair that does not decode ("dry_run=%zz") or one with a semicolon in it
// ("dry_run=true;"). Dropped, such a pair escapes the parameter check: a dry_run would accept
// for real, a recipient filter would widen the answer. The refusal names the parameter when its
// name decodes, "query" when even that does not.
func parseQuery(raw string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err == nil {
		return q, nil
	}
	for pair := range strings.SplitSeq(raw, "&") {
		if _, perr := url.ParseQuery(pair); perr != nil {
			return nil, invalid(queryField(pair), "the query does not decode (%v): percent-encode names and values, and separate parameters with &", perr)
		}
	}
	return nil, invalid("query", "the query does not decode (%v)", err)
}

// queryField names the parameter of a query pair that does not decode.
func queryField(pair string) string {
	name, _, _ := strings.Cut(pair, "=")
	name, err := url.QueryUnescape(name)
	if err != nil || name == "" || strings.Contains(name, ";") || storableText(name) != nil {
		return "query"
	}
	return name
}

// authenticate returns the tenant of the request's bearer key.
func (s *server) authenticate(r *http.Request) (string, error) {
	if len(r.Header.Values("Authorization")) > 1 {
		// Two keys: which one a proxy or a framework would honour is anyone's guess.
		return "", invalid("Authorization", "send the header once")
	}
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return "", &requestError{kind: errUnauthenticated, field: "Authorization",
			detail: "send Authorization: Bearer <api key>"}
	}
	tenant, ok := s.keys[sha256.Sum256([]byte(strings.TrimSpace(key)))]
	if !ok {
		return "", &requestError{kind: errUnauthenticated, field: "Authorization", detail: "unknown API key"}
	}
	return tenant, nil
}

// healthz is liveness: the process serves HTTP. It checks nothing else on purpose: a database
// outage must not make the orchestrator restart every API process.
func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is readiness: the dependencies a request needs answer, so traffic may be sent here.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.deps.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := s.deps.Ready(ctx); err != nil {
			s.logger.WarnContext(r.Context(), "not ready", "err", err)
			s.writeProblem(w, r, fmt.Errorf("%w: %w", errNotReady, err))
			return
		}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// statusWriter remembers the status written, for the request log and for the panic handler
// (which must not write a second status line).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// probeWriter records what the mux's fallback handlers would answer and discards the body.
type probeWriter struct {
	header http.Header
	status int
}

func (w *probeWriter) Header() http.Header { return w.header }

func (w *probeWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *probeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(b), nil
}

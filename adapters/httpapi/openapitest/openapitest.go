// Package openapitest checks HTTP traffic against the API's OpenAPI description
// (docs/openapi.yaml), so that every request a test sends and every answer it receives proves
// the description right, or fails the test that saw it differ.
//
// Two hooks, for the two ways tests talk to the API:
//
//   - Transport wraps a client's RoundTripper (a test that dials a server);
//   - Wrap wraps the handler (a test that calls ServeHTTP with an httptest recorder).
//
// Both check the request against its operation (security, parameters, body) and the answer
// against the operation's responses (status, headers, body), and report a mismatch with
// t.Errorf naming the method, path and status. An answer to a request the description has no
// operation for must be its 404 or 405 problem (or the mux's redirect to a cleaned path). Beyond what a schema can say, a request is out of
// the description when it sends a query parameter its operation does not list, or one that is not
// an array more than once: the API refuses both.
//
// A test whose purpose is to send what the description forbids (a missing key, a malformed body,
// an unknown parameter) says so with Invalid on the request's context: its request is not
// checked, its answer still is. AnyRequest does that for every request of a hook (fuzz targets).
//
// The hooks are safe for concurrent use: parallel tests and goroutines may share one.
package openapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/deliveryledger/ledger/docs"
)

// Option adjusts a hook.
type Option func(*hook)

// AnyRequest lets every request of the hook break the description (a fuzz target sends garbage on
// purpose); the answers are still checked.
func AnyRequest() Option {
	return func(h *hook) { h.anyRequest = true }
}

type invalidKey struct{}

// Invalid marks a request's context: the request deliberately breaks the description (the test
// checks how the API refuses it), so it is not checked; its answer still is.
func Invalid(ctx context.Context) context.Context {
	return context.WithValue(ctx, invalidKey{}, true)
}

// isInvalid reports whether ctx was marked by Invalid.
func isInvalid(ctx context.Context) bool {
	v, _ := ctx.Value(invalidKey{}).(bool)
	return v
}

// Transport returns a RoundTripper that sends each request through next (http.DefaultTransport
// when nil) and checks the request and its answer, reporting mismatches to t.
func Transport(t testing.TB, next http.RoundTripper, opts ...Option) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{hook: newHook(t, opts), next: next}
}

// Client is an http.Client whose Transport checks every request and answer (see Transport).
func Client(t testing.TB, opts ...Option) *http.Client {
	return &http.Client{Transport: Transport(t, nil, opts...)}
}

// Wrap returns h checking each request it serves and the answer it writes, reporting mismatches
// to t. The answer goes through to the caller's ResponseWriter unchanged.
func Wrap(t testing.TB, h http.Handler, opts ...Option) http.Handler {
	return &handler{hook: newHook(t, opts), next: h}
}

// hook is what both hooks share: where to report, and how strict to be with requests.
type hook struct {
	t          testing.TB
	anyRequest bool
}

func newHook(t testing.TB, opts []Option) *hook {
	h := &hook{t: t}
	for _, opt := range opts {
		opt(h)
	}
	return h
}

// exchange is one request and its answer, as the check reads them.
type exchange struct {
	req     *http.Request // with Body unread (the check reads reqBody)
	reqBody []byte
	status  int
	header  http.Header
	body    []byte
}

// check checks x and reports every mismatch.
func (h *hook) check(x exchange) {
	h.t.Helper()
	s, err := loadSpec()
	if err != nil {
		h.t.Errorf("openapi: %v", err)
		return
	}
	checkRequest := !h.anyRequest && !isInvalid(x.req.Context())
	for _, err := range s.check(x, checkRequest) {
		h.t.Errorf("openapi: %s %s → %d: %v\nanswer: %s", x.req.Method, x.req.URL.RequestURI(), x.status, err, snippet(x.body))
	}
}

type transport struct {
	hook *hook
	next http.RoundTripper
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	reqBody, send, err := readRequestBody(req)
	if err != nil {
		return nil, err
	}
	res, err := tr.next.RoundTrip(send)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("openapitest: read the answer of %s %s: %w", req.Method, req.URL.Path, err)
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	tr.hook.check(exchange{req: req, reqBody: reqBody, status: res.StatusCode, header: res.Header, body: body})
	return res, nil
}

// readRequestBody returns the body of req and the request to send: req itself when its body can
// be read again (GetBody), a copy with the bytes read otherwise (a RoundTripper must not modify
// the request it was given).
func readRequestBody(req *http.Request) ([]byte, *http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, req, nil
	}
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err != nil {
			return nil, nil, fmt.Errorf("openapitest: %s %s: %w", req.Method, req.URL.Path, err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			return nil, nil, fmt.Errorf("openapitest: read the body of %s %s: %w", req.Method, req.URL.Path, err)
		}
		return b, req, nil
	}
	b, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("openapitest: read the body of %s %s: %w", req.Method, req.URL.Path, err)
	}
	send := req.Clone(req.Context())
	send.Body = io.NopCloser(bytes.NewReader(b))
	send.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return b, send, nil
}

type handler struct {
	hook *hook
	next http.Handler
}

func (hd *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var reqBody []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			hd.hook.t.Errorf("openapitest: read the body of %s %s: %v", r.Method, r.URL.Path, err)
			return
		}
		reqBody = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	rec := &recorder{ResponseWriter: w}
	hd.next.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK) // what net/http does for a handler that writes nothing
	}
	hd.hook.check(exchange{req: r, reqBody: reqBody, status: rec.status, header: rec.header, body: rec.body.Bytes()})
}

// recorder passes an answer through to the ResponseWriter and keeps a copy: the status, the
// header as it was when the status was written, and the body.
type recorder struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status, r.header = status, r.ResponseWriter.Header().Clone()
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// spec is the loaded description, and what checking against it needs.
type spec struct {
	doc    *openapi3.T
	router routers.Router
	// unrouted is an operation that answers what the API answers to a request the description
	// has no operation for: its NotFound and MethodNotAllowed responses.
	unrouted *routers.Route
	options  []openapi3.SchemaValidationOption
}

// loadSpec loads docs/openapi.yaml once per process; every hook shares it.
var loadSpec = sync.OnceValues(func() (*spec, error) {
	doc, err := Load(context.Background())
	if err != nil {
		return nil, err
	}
	// Route on paths alone: test servers listen on any host and port, not on the documented one.
	routed := *doc
	routed.Servers = nil
	router, err := gorillamux.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("route docs/openapi.yaml: %w", err)
	}
	unrouted := &openapi3.Operation{Responses: openapi3.NewResponses()}
	for status, name := range map[int]string{http.StatusNotFound: "NotFound", http.StatusMethodNotAllowed: "MethodNotAllowed"} {
		ref := doc.Components.Responses[name]
		if ref == nil {
			return nil, fmt.Errorf("docs/openapi.yaml: components.responses.%s is missing: the answer to a request no operation takes is checked against it", name)
		}
		unrouted.Responses.Set(fmt.Sprint(status), ref)
	}
	return &spec{
		doc:    doc,
		router: router,
		unrouted: &routers.Route{Spec: &routed, Path: "(no operation)", PathItem: &openapi3.PathItem{},
			Operation: unrouted},
		options: []openapi3.SchemaValidationOption{openapi3.WithStringFormatValidator("uuid", uuidFormat{})},
	}, nil
})

// Load reads and validates docs/openapi.yaml.
func Load(ctx context.Context) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docs.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("load docs/openapi.yaml: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml is not a valid OpenAPI document: %w", err)
	}
	return doc, nil
}

// check returns every way x differs from the description; the request is left out unless
// checkRequest.
func (s *spec) check(x exchange, checkRequest bool) []error {
	// The validators read and rewrite the request's body: give them their own copy.
	req := x.req.Clone(x.req.Context())
	req.Body = io.NopCloser(bytes.NewReader(x.reqBody))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(x.reqBody)), nil }
	req.ContentLength = int64(len(x.reqBody))
	if req.URL.Host == "" {
		// A server-side request has a path only; the router wants a URL like a client's.
		u := *req.URL
		u.Scheme, u.Host = "http", req.Host
		req.URL = &u
	}
	route, pathParams, err := s.router.FindRoute(req)
	for name, v := range pathParams {
		// The router matches the escaped path and leaves its segments escaped.
		if u, err := url.PathUnescape(v); err == nil {
			pathParams[name] = u
		}
	}
	if err != nil {
		switch x.status {
		case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
			// The mux cleans paths (a double slash, a dot segment) with a redirect to the clean one.
			return nil
		}
		if x.status < 400 {
			return []error{fmt.Errorf("the description has no operation for this request (%v), but the API answered %d", err, x.status)}
		}
		route, pathParams = s.unrouted, nil
	}
	input := &openapi3filter.RequestValidationInput{Request: req, PathParams: pathParams, Route: route,
		Options: s.filterOptions()}
	var errs []error
	if checkRequest && route != s.unrouted {
		if err := openapi3filter.ValidateRequest(req.Context(), input); err != nil {
			errs = append(errs, fmt.Errorf("the request is not in the description (mark it openapitest.Invalid if that is the test's purpose): %w", err))
		}
		if err := checkQuery(req, route); err != nil {
			errs = append(errs, fmt.Errorf("the request is not in the description (mark it openapitest.Invalid if that is the test's purpose): %w", err))
		}
	}
	res := &openapi3filter.ResponseValidationInput{RequestValidationInput: input, Status: x.status, Header: x.header,
		Options: s.filterOptions()}
	res.SetBodyBytes(x.body)
	if err := openapi3filter.ValidateResponse(req.Context(), res); err != nil {
		errs = append(errs, fmt.Errorf("the answer is not in the description: %w", err))
	}
	return errs
}

func (s *spec) filterOptions() *openapi3filter.Options {
	o := &openapi3filter.Options{
		MultiError:            true,
		IncludeResponseStatus: true,
		SkipSettingDefaults:   true,
		AuthenticationFunc:    authenticate,
		// The operation's own checks (the security scheme above) see what the server sees.
		SchemaValidationOptions: s.options,
	}
	o.WithCustomSchemaErrorFunc(func(err *openapi3.SchemaError) string { return err.Reason })
	return o
}

// authenticate checks that a request carries what a security scheme of the description asks for.
// Only whether the credentials are there and well formed: whether the key is known is the API's
// to say (401), and the answer is checked like any other.
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme := in.SecurityScheme
	if scheme.Type != "http" || !strings.EqualFold(scheme.Scheme, "bearer") {
		return fmt.Errorf("security scheme %q (%s %s) is not checked by openapitest", in.SecuritySchemeName, scheme.Type, scheme.Scheme)
	}
	values := in.RequestValidationInput.Request.Header.Values("Authorization")
	if len(values) != 1 {
		return fmt.Errorf("want one Authorization header, got %d", len(values))
	}
	kind, key, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(kind, "Bearer") || strings.TrimSpace(key) == "" {
		return errors.New("want Authorization: Bearer <key>")
	}
	return nil
}

// checkQuery refuses what the API refuses of a query and a schema cannot say: a parameter the
// operation does not list, and one that is not an array given more than once. An operation with
// a query parameter of type object takes any parameter (the provider's callbacks).
func checkQuery(req *http.Request, route *routers.Route) error {
	params := map[string]*openapi3.Parameter{}
	open := false
	for _, list := range []openapi3.Parameters{route.PathItem.Parameters, route.Operation.Parameters} {
		for _, ref := range list {
			p := ref.Value
			if p == nil || p.In != openapi3.ParameterInQuery {
				continue
			}
			params[p.Name] = p
			if p.Schema != nil && p.Schema.Value != nil && p.Schema.Value.Type.Is("object") {
				open = true
			}
		}
	}
	if open {
		return nil
	}
	q := req.URL.Query()
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	var errs []error
	for _, name := range names {
		p, ok := params[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("query parameter %q is not a parameter of the operation", name))
		case len(q[name]) > 1 && (p.Schema == nil || p.Schema.Value == nil || !p.Schema.Value.Type.Is("array")):
			errs = append(errs, fmt.Errorf("query parameter %q is given %d times", name, len(q[name])))
		}
	}
	return errors.Join(errs...)
}

// canonicalUUID is the form the API writes ids in.
var canonicalUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// uuidFormat checks the uuid format, which kin-openapi leaves unchecked by default.
type uuidFormat struct{}

func (uuidFormat) Validate(v string) error {
	if !canonicalUUID.MatchString(v) {
		return errors.New("not a UUID in canonical lower-case form")
	}
	return nil
}

// snippet is the start of an answer, for a failure message.
func snippet(body []byte) string {
	const max = 600
	if len(body) <= max {
		return string(body)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(body[cut]) {
		cut--
	}
	return string(body[:cut]) + fmt.Sprintf("… (%d bytes)", len(body))
}

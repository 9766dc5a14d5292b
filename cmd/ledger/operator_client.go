package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The operator commands (deliveries, dlq, replay, replays, reconcile) work through the HTTP API
// and never open the database: they see what a tenant's key may see, and every decision they
// make is recorded by the API like any other caller's.

// Defaults of the operator commands' connection settings.
const (
	defaultAPIURL     = "http://127.0.0.1:8080"
	defaultAPITimeout = 30 * time.Second
	// maxAnswerBytes bounds an answer read into memory: a DLQ page of 500 items with their
	// evidence is a few megabytes.
	maxAnswerBytes = 64 << 20
)

// apiClient calls the ledger's HTTP API with one tenant's key.
type apiClient struct {
	base string // scheme://host[:port][/prefix], without a trailing slash
	key  string
	http *http.Client
}

// apiError is the API's refusal of a request: the status of a non-2xx answer and the members of
// its problem+json body (RFC 9457). Field names the culprit (a JSON member, a query parameter or
// a header) when the API names one.
type apiError struct {
	Method string
	Path   string
	Status int
	Title  string
	Detail string
	Field  string
}

func (e *apiError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d %s", e.Method, e.Path, e.Status, e.Title)
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	return b.String()
}

// answer is a 2xx answer: its status, its body as the API sent it (for --json) and its headers.
type answer struct {
	Status int
	Body   []byte
	Header http.Header
}

// decode unmarshals the answer's body into v.
func (a answer) decode(v any) error {
	if err := json.Unmarshal(a.Body, v); err != nil {
		return fmt.Errorf("decode the API's answer: %w", err)
	}
	return nil
}

// get is a GET of path (already escaped) with an optional query.
func (c *apiClient) get(ctx context.Context, path string, query url.Values) (answer, error) {
	return c.do(ctx, http.MethodGet, path, query, nil, nil)
}

// post is a POST of body as JSON, with the headers given (an Idempotency-Key).
func (c *apiClient) post(ctx context.Context, path string, header http.Header, body any) (answer, error) {
	return c.do(ctx, http.MethodPost, path, nil, header, body)
}

// put is a PUT of body as JSON.
func (c *apiClient) put(ctx context.Context, path string, body any) (answer, error) {
	return c.do(ctx, http.MethodPut, path, nil, nil, body)
}

// delete is a DELETE of path with body as JSON (nil: none).
func (c *apiClient) delete(ctx context.Context, path string, body any) (answer, error) {
	return c.do(ctx, http.MethodDelete, path, nil, nil, body)
}

func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, header http.Header, body any) (answer, error) {
	target := c.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return answer{}, fmt.Errorf("encode the request body: %w", err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", "ledger-cli/1")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// The transport's error names the URL; it carries no key.
		return answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if len(raw) > maxAnswerBytes {
		return answer{}, fmt.Errorf("%s %s: the answer is larger than %d bytes", method, path, maxAnswerBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return answer{}, refusal(method, path, resp, raw)
	}
	return answer{Status: resp.StatusCode, Body: raw, Header: resp.Header}, nil
}

// refusal reads a non-2xx answer. A problem+json body gives the title, field and detail; any
// other body (a proxy's HTML page) is shown as a short excerpt.
func refusal(method, path string, resp *http.Response, raw []byte) *apiError {
	e := &apiError{Method: method, Path: path, Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Field  string `json:"field"`
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if (mt == "application/problem+json" || mt == "application/json") && json.Unmarshal(raw, &p) == nil {
		if p.Title != "" {
			e.Title = p.Title
		}
		e.Detail, e.Field = p.Detail, p.Field
		return e
	}
	e.Detail = excerpt(strings.TrimSpace(string(raw)), 200)
	return e
}

// errNotJSON: an answer that should be a JSON document is not one.
var errNotJSON = errors.New("the API's answer is not a JSON document")

// jsonDocument returns the answer's body for --json, ending with one newline.
func jsonDocument(a answer) ([]byte, error) {
	body := bytes.TrimRight(a.Body, "\n")
	if !json.Valid(body) {
		return nil, errNotJSON
	}
	return append(body, '\n'), nil
}

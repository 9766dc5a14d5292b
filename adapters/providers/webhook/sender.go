// Package webhook is the provider adapter that delivers a notification as an HTTP POST of its
// JSON payload to the URL the caller gave as recipient.
//
// Its job beyond sending is to tell the truth about what happened: every attempt ends in a typed
// domain.Outcome, and the line between "the receiver cannot have acted" (transient, safe to
// retry) and "it may have acted" (unknown) is drawn at the moment the request was fully
// written, observed through net/http/httptrace.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

var _ commands.Sender = (*Sender)(nil)

const (
	// maxResponseRead bounds what we read of a response body. Reading (rather than closing
	// early) lets the connection go back to the pool; the bound keeps a hostile or chatty
	// receiver from holding a worker or its memory.
	maxResponseRead = 64 << 10
	// maxSnippet is how much of a failed response's body goes into the history: enough to show
	// the receiver's error message, small enough to store for every attempt.
	maxSnippet = 256
	// maxHeaderEcho bounds the receiver-controlled header values we record (request id,
	// redirect location).
	maxHeaderEcho = 256
	// maxResponseHeaderBytes is far below net/http's 1 MiB default: a webhook response has no
	// business sending large headers.
	maxResponseHeaderBytes = 64 << 10

	// Pooling: webhooks concentrate on few hosts (a tenant's endpoint gets a burst of
	// deliveries), so keep many idle connections per host to avoid a TCP and TLS handshake per
	// attempt (at least as many as calls in flight, see Config.InFlight), with a global bound
	// on file descriptors.
	maxIdleConnsPerHost = 64
	maxIdleConns        = 512
	idleConnTimeout     = 90 * time.Second
	tcpKeepAlive        = 30 * time.Second
)

// Request headers, in the Standard Webhooks style (https://www.standardwebhooks.com/).
const (
	// headerWebhookID carries the delivery id, the same on every attempt, so that a receiver
	// can drop the duplicates our at-least-once delivery may produce.
	headerWebhookID = "webhook-id"
	// headerWebhookTimestamp is the send time in Unix seconds; receivers use it to reject
	// stale replays.
	headerWebhookTimestamp = "webhook-timestamp"
	// headerAttempt tells the receiver which attempt this is, for its own diagnostics.
	headerAttempt = "X-Ledger-Attempt"
	// headerRequestID is where receivers commonly put their id for the request; we record it
	// as the provider operation id.
	headerRequestID = "X-Request-Id"
)

// Sender delivers webhooks. It is safe for concurrent use; create one per process and share it,
// because it owns the connection pool.
type Sender struct {
	client    *http.Client
	transport *http.Transport
	timeout   time.Duration
	userAgent string
	provider  string
	secrets   Secrets
	// now tells the wall-clock time for webhook-timestamp and HTTP-date Retry-After values;
	// tests replace it. Latency is measured with the monotonic clock regardless.
	now func() time.Time
}

// New builds a Sender from cfg, with the defaults for its zero fields.
func New(cfg Config) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("webhook config: %w", err)
	}
	cfg = cfg.withDefaults()
	g := newGuard(cfg.AllowCIDRs)
	dialer := &net.Dialer{KeepAlive: tcpKeepAlive, Control: g.control}
	transport := &http.Transport{
		// No proxy, even if HTTP_PROXY is set: the guard checks the address we dial, and
		// through a proxy that would be the proxy's, not the receiver's.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           max(maxIdleConns, cfg.InFlight),
		MaxIdleConnsPerHost:    max(maxIdleConnsPerHost, cfg.InFlight),
		IdleConnTimeout:        idleConnTimeout,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	return &Sender{
		client:    provider.Client(transport, nil), // no redirects (an SSRF detour); a 3xx is permanent
		transport: transport,
		timeout:   cfg.Timeout,
		userAgent: cfg.UserAgent,
		provider:  cfg.Provider,
		secrets:   cfg.Secrets,
		now:       time.Now,
	}, nil
}

// Provider names the provider in the history and in metrics.
func (s *Sender) Provider() string { return s.provider }

// String names the sender without its tenants' signing secrets, so that printing a Sender
// (whose fields hold them) never writes one.
func (s *Sender) String() string { return "webhook.Sender{provider: " + s.provider + "}" }

// Deduplicates is false: the webhook-id header lets a receiver drop duplicates, but we cannot
// know that it does, so an attempt with an unknown outcome must not be repeated blindly.
func (s *Sender) Deduplicates() bool { return false }

// CloseIdleConnections closes the pooled connections that are not in use; call it on shutdown
// so that receivers are not left holding half-dead connections.
func (s *Sender) CloseIdleConnections() { s.transport.CloseIdleConnections() }

// Send POSTs msg.Payload to msg.Recipient and classifies what happened. It never returns an
// error: every failure is an outcome, and no failure reaches the network if the destination or
// payload is unusable. The attempt is bounded by the configured timeout and by ctx.
func (s *Sender) Send(ctx context.Context, msg commands.WorkMessage) domain.Outcome {
	start := time.Now()
	target, err := destination(msg.Recipient)
	if err != nil {
		return s.outcome(domain.OutcomePermanent, 0, time.Since(start), err.Error())
	}
	if !json.Valid(msg.Payload) {
		// The payload is a snapshot taken at acceptance: it cannot get better on retry.
		return s.outcome(domain.OutcomePermanent, 0, time.Since(start), "payload is not valid JSON")
	}
	if !validHeaderValue(msg.DeliveryID) {
		return s.outcome(domain.OutcomePermanent, 0, time.Since(start),
			fmt.Sprintf("delivery id %q cannot be sent as a header", msg.DeliveryID))
	}

	callCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, target.String(), bytes.NewReader(msg.Payload))
	if err != nil {
		return s.outcome(domain.OutcomePermanent, 0, time.Since(start), fmt.Sprintf("build request: %v", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.userAgent)
	req.Header.Set(headerWebhookID, msg.DeliveryID)
	timestamp := s.now().Unix()
	req.Header.Set(headerWebhookTimestamp, strconv.FormatInt(timestamp, 10))
	if keys := s.secrets[msg.Tenant]; len(keys) > 0 {
		// The signed bytes are exactly the body sent.
		req.Header.Set(headerWebhookSignature, Sign(keys, msg.DeliveryID, timestamp, msg.Payload))
	}
	req.Header.Set(headerAttempt, strconv.Itoa(msg.Attempt))

	// The body is read (rather than the connection closed early) so that the connection goes
	// back to the pool; the bound keeps a hostile or chatty receiver from holding a worker or
	// its memory. Read errors are ignored: the status code decides.
	a := provider.Exchange(ctx, s.client, req, maxResponseRead)
	if a.Response == nil {
		v := classifyTransportError(a)
		return v.Mark(s.outcome(v.Kind, 0, time.Since(start), describeTransportError(target.Host, a.Err, v.Kind)))
	}
	return s.responseOutcome(target, a.Response, a.Body, time.Since(start))
}

// urlSecrets are the spellings of what a webhook URL may hide (its path and its query, which
// often carry the receiver's token), for the texts of a receiver's answer that may echo the
// request: an error page's "Cannot POST /hooks/...", a redirect's Location.
func urlSecrets(u *url.URL) []string {
	var spellings []string
	for _, s := range []string{u.RawQuery, u.EscapedPath(), u.Path} {
		if len(s) > 1 { // "/" hides nothing, and would blank every slash
			spellings = append(spellings, s)
		}
	}
	return spellings
}

// destination parses and checks the recipient URL, so that an unusable one fails without any
// network call.
func destination(recipient string) (*url.URL, error) {
	u, err := url.Parse(recipient)
	if err != nil {
		return nil, fmt.Errorf("invalid webhook URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid webhook URL: scheme must be http or https, got %q", u.Scheme)
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return nil, errors.New("invalid webhook URL: no host")
	}
	return u, nil
}

// responseOutcome classifies a response the receiver sent.
func (s *Sender) responseOutcome(target *url.URL, resp *http.Response, body []byte, latency time.Duration) domain.Outcome {
	host, hidden := target.Host, urlSecrets(target)
	code := resp.StatusCode
	kind := classifyStatus(code)
	if kind == domain.OutcomeDelivered {
		o := s.outcome(kind, code, latency, "")
		o.ProviderOperationID = headerEcho(resp.Header.Get(headerRequestID))
		return o
	}
	msg := fmt.Sprintf("POST to %s: HTTP %d %s", host, code, http.StatusText(code))
	if code >= 300 && code < 400 {
		msg += " (redirects are not followed"
		if loc := headerEcho(provider.Redact(resp.Header.Get("Location"), hidden, "[url]")); loc != "" {
			msg += "; Location: " + loc
		}
		msg += ")"
	}
	if text := snippet(provider.Redact(string(body), hidden, "[url]")); text != "" {
		msg += ": " + text
	}
	o := s.outcome(kind, code, latency, msg)
	// A receiver's only code is its HTTP status: kept as the provider's, so that a refusal's
	// evidence (a suppression's) names its code as every provider's does.
	o.ProviderCode = strconv.Itoa(code)
	o.Suppress = kind == domain.OutcomePermanent && suppressingStatuses[code] != ""
	if kind == domain.OutcomeTransient {
		o.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), s.now())
	}
	return o
}

// suppressingStatuses are the receiver's answers that are hard evidence that the endpoint takes
// no more deliveries (Outcome.Suppress): 410 Gone, which says the resource is gone for good and
// that the sender should forget the URL (RFC 9110, section 15.5.11). Every other answer
// suppresses nothing: a 404 may be a deploy in progress, a 401 or 403 a rotated secret, 3xx a
// moved URL, and 408, 425, 429 and 5xx the moment.
var suppressingStatuses = map[int]string{
	http.StatusGone: "Gone: the endpoint is gone for good",
}

// classifyStatus maps a status code to an outcome: 408, 425, 429 and 5xx say "not now", every
// other non-2xx (redirects included) says the request itself is wrong for this destination.
func classifyStatus(code int) domain.OutcomeKind {
	switch {
	case code >= 200 && code < 300:
		return domain.OutcomeDelivered
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests,
		code >= 500 && code < 600:
		return domain.OutcomeTransient
	default:
		return domain.OutcomePermanent
	}
}

// classifyTransportError maps a failure without a response by the kit's line
// (provider.Unanswered: unknown once the whole request was written, transient and NotSent
// before), except for what only a webhook knows: the SSRF guard's refusal and a name that does
// not exist are a wrong destination, permanent. The destination is the recipient's, not the
// provider's: no failure of it counts against the webhook provider's breaker, which every
// tenant's endpoints share (one dead endpoint must not stop the others' deliveries).
func classifyTransportError(a provider.Answer) provider.Verdict {
	v := provider.Unanswered(a.Written, a.CallerGone)
	v.ProviderFault = false
	var refused *addressNotAllowedError
	if errors.As(a.Err, &refused) {
		return provider.Verdict{Kind: domain.OutcomePermanent}
	}
	var dnsErr *net.DNSError
	if errors.As(a.Err, &dnsErr) && dnsErr.IsNotFound && !dnsErr.IsTemporary && !dnsErr.IsTimeout {
		// Any other resolver trouble (timeout, SERVFAIL, no resolver reachable) may clear up.
		return provider.Verdict{Kind: domain.OutcomePermanent}
	}
	return v
}

// describeTransportError writes the history's error text. It names the host, not the URL (the
// kit took the *url.Error off, whose text repeats the whole URL): a webhook URL often carries a
// secret token in its path or query, and the history is kept forever.
func describeTransportError(host string, err error, kind domain.OutcomeKind) string {
	if kind == domain.OutcomeUnknown {
		return fmt.Sprintf("POST to %s: request written, then %v; the receiver may have acted", host, err)
	}
	return fmt.Sprintf("POST to %s: %v", host, err)
}

// outcome fills the fields every outcome of this adapter has.
func (s *Sender) outcome(kind domain.OutcomeKind, code int, latency time.Duration, errText string) domain.Outcome {
	o := domain.Outcome{
		Kind:       kind,
		Provider:   s.provider,
		StatusCode: code,
		Latency:    latency,
		Err:        errText,
	}
	o.Class = domain.ClassOf(kind)
	return o
}

// snippet is the printable start of a response's body, for the history.
func snippet(body string) string {
	return printable(body[:min(len(body), maxSnippet)])
}

// headerEcho makes a receiver-controlled header value safe to record: bounded and printable.
func headerEcho(v string) string {
	if len(v) > maxHeaderEcho {
		v = v[:maxHeaderEcho]
	}
	return printable(v)
}

// printable turns receiver-controlled bytes into a single line of valid UTF-8 for the history
// and for logs, where control characters could forge lines.
func printable(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// Package twilio is the provider adapter that sends a notification as an SMS through Twilio's
// Messages API, or any gateway that speaks it, and reads what became of the message: from
// Twilio's signed status callbacks (ParseReceipt) and from status lookups (Lookup).
//
// Like every provider adapter it reports each attempt as a typed domain.Outcome. A message
// Twilio took is OutcomeAccepted: it is delivered when a receipt says so. The line between
// "Twilio cannot have created the message" (transient, and NotSent: the attempt may fail over
// at once) and "it may have" (unknown) is drawn at the moment the request was fully written,
// observed by the provider kit (provider.Exchange), as for every HTTP provider. The auth
// token is the password of every call and the key of every callback's signature; the adapter
// keeps it out of everything it records, returns or prints.
package twilio

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/adapters/providers/sms"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

var (
	_ commands.Sender = (*Sender)(nil)
	_ commands.Lookup = (*Sender)(nil)
)

const (
	// maxResponseRead bounds what we read of an answer about one message. The largest honest
	// one echoes the body (1600 characters, up to 12 bytes each when JSON escapes them as a
	// surrogate pair) beside a kilobyte of other members: well under 64 KiB. Past that it is
	// not Twilio answering, and a worker's memory is not the answerer's to fill.
	maxResponseRead = 64 << 10
	// maxDescription is how much of a text Twilio (or whatever answers in its place) wrote goes
	// into the history: Twilio's messages are one sentence; a proxy's HTML page is cut.
	maxDescription = 256
	// MaxRetryAfter caps a Retry-After a 429 may carry: it is input from a peer (Twilio itself
	// sends none; a gateway may), and without a cap a wrong value would park a delivery for
	// years. The retry policy applies its own bound (domain.RetryPolicy.RetryAfterMax).
	MaxRetryAfter = time.Hour

	// Pooling: every call of an account goes to one host, up to sms.ProviderConcurrency at
	// once, so keep that many idle connections to skip a TCP and TLS handshake per call.
	maxIdleConnsPerHost = sms.ProviderConcurrency

	// userAgent identifies the ledger in the logs of a gateway or proxy.
	userAgent = "deliveryledger-twilio/1"
	// apiVersion is the Messages API's version, part of every path.
	apiVersion = "2010-04-01"
)

// messageSID is what a message id may be to be recorded and used in a path: Twilio's are SM or
// MM and 32 hex digits; a compatible gateway may use another alphanumeric form.
var messageSID = regexp.MustCompile(`^[A-Za-z0-9]{2,64}$`)

// Sender sends messages through one Twilio account and sender, and asks Twilio about them. It
// is safe for concurrent use; create one per account and share it, because it owns the
// connection pool.
type Sender struct {
	provider  string
	client    *http.Client
	transport *http.Transport
	timeout   time.Duration
	// base is the base URL without a trailing slash, baseURL the same parsed; host is what
	// messages name.
	base    string
	baseURL *url.URL
	host    string
	// messages is {base}/2010-04-01/Accounts/{account}/Messages.json.
	messages       string
	accountSID     string
	authToken      string
	from           string
	statusCallback string
	acceptDelivers bool
	// history writes the outcomes and peer texts without the spellings of the auth token: the
	// token, and the basic-auth credentials that carry it.
	history provider.History
}

// New builds a Sender from cfg, with the defaults for its zero fields. Its error never contains
// the auth token.
func New(cfg Config) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("twilio config: %w", err)
	}
	cfg = cfg.withDefaults()
	base, err := url.Parse(strings.TrimSuffix(cfg.BaseURL, "/"))
	if err != nil { // Validate parsed it already
		return nil, errors.New("twilio config: base_url: not a URL")
	}
	transport := provider.Transport(maxIdleConnsPerHost)
	s := &Sender{
		provider:       cfg.Provider,
		client:         provider.Client(transport, tracing.WithoutQuery), // no redirects; a 3xx is read as a wrong base URL
		transport:      transport,
		timeout:        cfg.Timeout,
		base:           base.String(),
		baseURL:        base,
		host:           base.Host,
		messages:       base.String() + "/" + apiVersion + "/Accounts/" + cfg.AccountSID + "/Messages.json",
		accountSID:     cfg.AccountSID,
		authToken:      cfg.AuthToken,
		from:           cfg.From,
		statusCallback: cfg.StatusCallback,
		acceptDelivers: cfg.DeliveredOn == DeliveredOnAccept,
		history:        provider.History{Provider: cfg.Provider, Secrets: secretSpellings(cfg.AccountSID, cfg.AuthToken), Mark: "[auth token]", MaxPeerText: maxDescription},
	}
	return s, nil
}

// secretSpellings lists the ways the auth token could appear in a text: whole, percent-encoded
// (a URL or a form may print it so), and inside the basic-auth credentials a proxy may echo.
func secretSpellings(account, token string) []string {
	spellings := []string{token}
	if escaped := url.QueryEscape(token); escaped != token {
		spellings = append(spellings, escaped)
	}
	credentials := base64.StdEncoding.EncodeToString([]byte(account + ":" + token))
	return append(spellings, credentials, strings.TrimRight(credentials, "="))
}

// Provider names the provider in the history and in metrics (Config.Provider).
func (s *Sender) Provider() string { return s.provider }

// Deduplicates is false: the Messages API takes no idempotency key, so a repeated create sends
// a second message, and an attempt with an unknown outcome must not be repeated blindly (a
// lookup by recipient, sender and text tells first).
func (s *Sender) Deduplicates() bool { return false }

// String names the sender without its auth token, so that printing a Sender (whose fields hold
// the token) never writes the secret.
func (s *Sender) String() string {
	return "twilio.Sender{provider: " + s.provider + ", host: " + s.host + ", account: " + s.accountSID + "}"
}

// CloseIdleConnections closes the pooled connections that are not in use; call it on shutdown.
func (s *Sender) CloseIdleConnections() { s.transport.CloseIdleConnections() }

// apiMessage is a Message resource as Twilio answers it (the members the adapter reads).
type apiMessage struct {
	SID          string    `json:"sid"`
	To           string    `json:"to"`
	Body         string    `json:"body"`
	Status       string    `json:"status"`
	ErrorCode    codeValue `json:"error_code"`
	ErrorMessage string    `json:"error_message"`
	DateCreated  string    `json:"date_created"`
	DateUpdated  string    `json:"date_updated"`
}

// apiError is Twilio's error answer.
type apiError struct {
	Code     codeValue `json:"code"`
	Message  string    `json:"message"`
	MoreInfo string    `json:"more_info"`
	Status   int       `json:"status"`
}

// codeValue is an error code as Twilio writes it: a JSON number (error_code, code), which some
// compatible gateways write as a string; null or absent is "".
type codeValue string

// UnmarshalJSON takes a number, a string or null.
func (c *codeValue) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		*c = codeValue(n.String())
		return nil
	}
	var s *string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s != nil {
		*c = codeValue(*s)
	}
	return nil
}

// Send sends msg's text to the number msg.Recipient names and classifies what happened. It never
// returns an error: every failure is an outcome. A recipient or payload that cannot be sent
// fails without a network call; the call is bounded by the configured timeout and by ctx.
func (s *Sender) Send(ctx context.Context, msg commands.WorkMessage) domain.Outcome {
	start := time.Now()
	if err := sms.CheckNumber(msg.Recipient); err != nil {
		// The recipient was checked at acceptance; a snapshot cannot get better on retry.
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), "recipient: "+err.Error())
	}
	text, err := sms.Text(msg.Payload)
	if err != nil {
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), err.Error())
	}
	form := url.Values{"To": {msg.Recipient}, "From": {s.from}, "Body": {text}}
	if s.statusCallback != "" {
		form.Set("StatusCallback", s.statusCallback)
	}

	callCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := s.newRequest(callCtx, http.MethodPost, s.messages, strings.NewReader(form.Encode()))
	if err != nil {
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), "build the create request: unusable base_url")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")

	a := provider.Exchange(ctx, s.client, req, maxResponseRead)
	if a.Response == nil {
		// After the whole request was written Twilio may have created the message, and only a
		// lookup can tell; before, the attempt may go to the next provider at once. A DNS
		// failure is transient too: the host is the operator's setting, and a resolver that
		// cannot find api.twilio.com is far likelier broken for a while than right.
		return s.history.Unanswered(a, time.Since(start), "create message at "+s.host, "Twilio may have created the message")
	}
	return s.responseOutcome(a.Response, a.Body, a.ReadErr, time.Since(start))
}

// newRequest builds a call with the account's credentials.
func (s *Sender) newRequest(ctx context.Context, method, target string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(s.accountSID, s.authToken)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	return req, nil
}

// responseOutcome classifies an answer to a create.
func (s *Sender) responseOutcome(resp *http.Response, answer []byte, readErr error, latency time.Duration) domain.Outcome {
	status := resp.StatusCode
	if status >= 200 && status < 300 {
		return s.acceptedOutcome(status, answer, readErr, latency)
	}

	var e apiError
	parseErr := json.Unmarshal(answer, &e)
	if parseErr != nil {
		e = apiError{} // a type error leaves members decoded so far: none is to be believed
	}
	code, _ := strconv.Atoi(string(e.Code))
	class := classifyAPIError(status, code)

	text := fmt.Sprintf("Twilio answered HTTP %d", status)
	switch {
	case parseErr == nil && (e.Code != "" || e.Message != ""):
		if e.Code != "" {
			text += ", error " + s.history.PeerText(string(e.Code))
		}
		if e.Message != "" {
			text += ": " + s.history.PeerText(e.Message)
		}
	case len(answer) > 0:
		text += " " + http.StatusText(status) + ": " + s.history.PeerText(string(answer))
	default:
		text += " " + http.StatusText(status)
	}
	switch {
	case status >= 300 && status < 400:
		// Location is not echoed: it may repeat the credentials' URL.
		text += " (redirects are not followed; check base_url)"
	case class.kind == domain.OutcomeUnknown:
		text += "; Twilio may have created the message"
	}
	o := s.history.Outcome(class.kind, status, latency, text)
	o.ProviderFault = class.providerFault
	o.Suppress = class.kind == domain.OutcomePermanent && suppressingAPICodes[code] != ""
	if parseErr == nil && e.Code != "" {
		o.ProviderCode = s.history.PeerText(string(e.Code))
	}
	if class.kind == domain.OutcomeTransient {
		o.RetryAfter = provider.RetryAfter(resp.Header.Get("Retry-After"), time.Now(), MaxRetryAfter)
	}
	return o
}

// acceptedOutcome classifies a 2xx. Twilio answered, so it took the request, and may have
// created the message whatever the body says; only an answer that names the message (a sid) is
// an acceptance. Anything else (a body cut short or not Twilio's JSON, no sid) is unknown, not
// transient: retrying could send the message twice. Err says what was missing.
func (s *Sender) acceptedOutcome(status int, answer []byte, readErr error, latency time.Duration) domain.Outcome {
	var m apiMessage
	why := provider.Unproven(readErr, json.Unmarshal(answer, &m), "Twilio's JSON")
	switch {
	case why != "":
	case m.SID == "":
		why = "the answer has no sid"
	case !messageSID.MatchString(m.SID):
		why = "the answer's sid is not a message id"
	}
	if why != "" {
		return provider.UnprovenVerdict.Mark(s.history.Outcome(domain.OutcomeUnknown, status, latency,
			fmt.Sprintf("Twilio answered HTTP %d but %s; the message may have been created", status, why)))
	}
	kind := domain.OutcomeAccepted
	if st, known := statuses[m.Status]; s.acceptDelivers && (!known || st == commands.ReceiptPending || st == commands.ReceiptDelivered) {
		// An acceptance that already says failed (a gateway may answer so) is left to the
		// receipt and the lookup even then.
		kind = domain.OutcomeDelivered
	}
	o := s.history.Outcome(kind, status, latency, "")
	o.ProviderOperationID = m.SID
	o.ProviderCode = s.history.PeerText(m.Status)
	return o
}

// clip bounds a text to maxDescription bytes, cut on a character boundary.
func clip(text string) string { return provider.Clip(text, maxDescription) }

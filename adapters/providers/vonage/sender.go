// Package vonage is the provider adapter that sends a notification as an SMS through Vonage's
// (formerly Nexmo's) SMS API, and reads the delivery receipts Vonage sends back.
//
// Like every provider adapter it reports each attempt as a typed domain.Outcome. Vonage's
// acceptance (status 0) is not delivery: the outcome is domain.OutcomeAccepted, and the delivery
// receipt (ParseReceipt) decides later, unless the provider is configured to count acceptance
// as delivery (Config.DeliveredOn). The line between "Vonage cannot have sent the message"
// (transient) and "it may have" (unknown) is drawn at the moment the request was fully written,
// observed by the provider kit (provider.Exchange), as for every HTTP provider. The API secret travels in the
// request body and the callback token in the callback URL; the adapter keeps both out of
// everything it records, returns or prints.
//
// The Sender does not implement commands.Lookup: the SMS API has no status lookup by message id
// (only the separate Reports API, which this adapter does not use), so an unknown outcome stays
// unknown until a receipt names the delivery or an operator decides.
package vonage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

var _ commands.Sender = (*Sender)(nil)

const (
	// maxResponseRead bounds what we read of an answer. The SMS API answers with one small
	// object per part of the message (a long text is split into parts of 153 characters, a few
	// hundred bytes each); 64 KiB holds far more parts than a notification has. Past that the
	// SMS API is not what answers, and a worker's memory is not the answerer's to fill.
	maxResponseRead = 64 << 10
	// maxPeerText is how much of Vonage's error-text (or of a body that is not the SMS API's
	// JSON) goes into the history: Vonage's are a few words; a proxy's HTML page is cut.
	maxPeerText = 256
	// MaxRetryAfter caps the wait a 429's Retry-After can ask for: it is input from a peer (a
	// proxy in front of the API; the SMS API itself signals throttling with status 1).
	MaxRetryAfter = time.Hour

	// Pooling: every call goes to one host, so keep enough idle connections to skip a TCP and
	// TLS handshake per call (Vonage recommends keep-alive to reach the account's throughput).
	maxIdleConnsPerHost = 64

	// userAgent identifies the ledger in the logs of a proxy.
	userAgent = "deliveryledger-vonage/1"
)

// Sender sends SMS through one Vonage account and sender id, and parses that provider's delivery
// receipts (ParseReceipt). It is safe for concurrent use; create one per provider and share it,
// because it owns the connection pool. It implements commands.Sender but not commands.Lookup:
// Vonage's SMS API cannot be asked what became of a message, so an unknown outcome waits for a
// receipt or an operator.
type Sender struct {
	provider  string
	client    *http.Client
	transport *http.Transport
	timeout   time.Duration
	// endpoint is {base_url}/sms/json; host is what messages name.
	endpoint string
	host     string

	apiKey      string
	apiSecret   string
	from        string
	callback    string
	token       string
	deliveredOn string
	// history writes the outcomes and peer texts without the spellings of the API secret, the
	// callback token and the callback URL (longest first).
	history provider.History
}

// New builds a Sender from cfg, with the defaults for its zero fields. Its error never contains
// a secret.
func New(cfg Config) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("vonage config: %w", err)
	}
	cfg = cfg.withDefaults()
	base, err := url.Parse(cfg.BaseURL)
	if err != nil { // Validate parsed it already
		return nil, errors.New("vonage config: base_url: not a URL")
	}
	transport := provider.Transport(maxIdleConnsPerHost)
	s := &Sender{
		provider:    cfg.Provider,
		client:      provider.Client(transport, tracing.WithoutQuery), // no redirects; a 3xx is read as a wrong base URL
		transport:   transport,
		timeout:     cfg.Timeout,
		endpoint:    strings.TrimSuffix(cfg.BaseURL, "/") + "/sms/json",
		host:        base.Host,
		apiKey:      cfg.APIKey,
		apiSecret:   cfg.APISecret,
		from:        strings.TrimPrefix(cfg.From, "+"),
		callback:    cfg.Callback,
		token:       cfg.CallbackToken,
		deliveredOn: cfg.DeliveredOn,
		history:     provider.History{Provider: cfg.Provider, Secrets: secretSpellings(cfg.APISecret, cfg.CallbackToken, cfg.Callback), Mark: "[redacted]", MaxPeerText: maxPeerText},
	}
	return s, nil
}

// secretSpellings lists the ways a secret could appear in a text: as it is, and escaped as a URL
// query or form value prints it (the request body, a proxy that echoes it).
func secretSpellings(secrets ...string) []string {
	var spellings []string
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		spellings = append(spellings, secret, url.QueryEscape(secret), url.PathEscape(secret))
	}
	slices.SortFunc(spellings, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(spellings)
}

// Provider names the provider in the history and in metrics (Config.Provider).
func (s *Sender) Provider() string { return s.provider }

// Deduplicates is false: the SMS API takes no idempotency key (client-ref is only echoed), so a
// repeated call sends a second SMS, and an attempt with an unknown outcome must not be repeated
// blindly.
func (s *Sender) Deduplicates() bool { return false }

// String names the sender without its secrets, so that printing a Sender (whose fields hold
// them) never writes one.
func (s *Sender) String() string {
	return "vonage.Sender{provider: " + s.provider + ", host: " + s.host + "}"
}

// CloseIdleConnections closes the pooled connections that are not in use; call it on shutdown.
func (s *Sender) CloseIdleConnections() { s.transport.CloseIdleConnections() }

// flexString is a member the SMS API sends as a JSON string ("0", "1"), read as well when a
// proxy or a future version sends it as a number; null reads as empty.
type flexString string

// UnmarshalJSON takes a string, a number or null; anything else is an error.
func (f *flexString) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		*f = flexString(str)
		return nil
	}
	var num json.Number
	if err := json.Unmarshal(b, &num); err == nil {
		*f = flexString(num.String())
		return nil
	}
	if string(b) == "null" {
		*f = ""
		return nil
	}
	return errors.New("want a string or a number")
}

// smsAnswer is the SMS API's answer: one entry per part of the message, each with its own
// status, and a message-id for the parts it accepted.
type smsAnswer struct {
	MessageCount flexString `json:"message-count"`
	Messages     []struct {
		To        flexString  `json:"to"`
		MessageID flexString  `json:"message-id"`
		Status    *flexString `json:"status"`
		ErrorText flexString  `json:"error-text"`
	} `json:"messages"`
}

// Send sends msg's text to the number msg.Recipient names and classifies what happened. It
// never returns an error: every failure is an outcome. A recipient or payload that cannot be
// sent fails without a network call; the call is bounded by the configured timeout and by ctx.
func (s *Sender) Send(ctx context.Context, msg commands.WorkMessage) domain.Outcome {
	start := time.Now()
	to, err := recipientNumber(msg.Recipient)
	if err != nil {
		// The recipient was checked at acceptance; a snapshot cannot get better on retry.
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), "recipient: "+err.Error())
	}
	text, invalid := readText(msg.Payload)
	if invalid != nil {
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), invalid.Error())
	}
	form := url.Values{
		"api_key":    {s.apiKey},
		"api_secret": {s.apiSecret},
		"from":       {s.from},
		"to":         {to},
		"text":       {text},
		// client-ref comes back in every receipt, so a receipt names its delivery even when the
		// acceptance was never recorded (an unknown outcome).
		"client-ref": {msg.DeliveryID},
	}
	if !isGSM7(text) {
		// Without it Vonage encodes the text in the GSM alphabet and replaces what it lacks.
		form.Set("type", "unicode")
	}
	if s.callback != "" {
		form.Set("callback", s.callback)
		form.Set("status-report-req", "1")
	}

	callCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, s.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), "build the SMS API request: unusable base_url")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)

	a := provider.Exchange(ctx, s.client, req, maxResponseRead)
	if a.Response == nil {
		// After the whole request was written Vonage may have accepted the message and sent
		// it, and only a receipt or an operator can tell; before, the next provider may take
		// the message at once.
		return s.history.Unanswered(a, time.Since(start), "SMS API at "+s.host, "Vonage may have sent the message")
	}
	return s.responseOutcome(a.Response, a.Body, a.ReadErr, time.Since(start))
}

// responseOutcome classifies an answer. The SMS API answers HTTP 200 to every request it
// processed, refusals included (the status is in the body); another status is not its answer
// but a proxy's, a load balancer's or a wrong base_url's.
func (s *Sender) responseOutcome(resp *http.Response, answer []byte, readErr error, latency time.Duration) domain.Outcome {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return s.answerOutcome(code, answer, readErr, latency)
	}
	kind := domain.OutcomePermanent
	var also string
	switch {
	case code == http.StatusTooManyRequests:
		// Refused before it was processed: send again later.
		kind = domain.OutcomeTransient
	case code >= 500:
		// Behind a 5xx the message may or may not have been taken: the platform may have
		// failed after accepting it. A retry could send it twice.
		kind = domain.OutcomeUnknown
		also = "; Vonage may have sent the message"
	case code >= 300 && code < 400:
		// Not the SMS API answering (it never redirects): base_url is wrong. Location is not
		// echoed: it is a place nobody configured.
		also = " (redirects are not followed; check base_url)"
	default:
		// 4xx: refusals of the message itself come in a 200's body, so this is about the
		// request's endpoint or credentials: the provider's, for every message.
	}
	text := fmt.Sprintf("SMS API answered HTTP %d %s", code, http.StatusText(code))
	if len(answer) > 0 {
		text += ": " + s.history.PeerText(string(answer))
	}
	o := s.history.Outcome(kind, code, latency, text+also)
	o.ProviderFault = true
	if kind == domain.OutcomeTransient {
		o.RetryAfter = provider.RetryAfter(resp.Header.Get("Retry-After"), time.Now(), MaxRetryAfter)
	}
	return o
}

// answerOutcome classifies a 2xx: the SMS API's answer, one entry per part. All parts
// accepted is an acceptance; all refused is the first refusal's status; some of each means the
// recipient may get part of the message, which is unknown. Anything that is not a readable
// answer is unknown too: Vonage took the request, and may have sent the message.
func (s *Sender) answerOutcome(code int, answer []byte, readErr error, latency time.Duration) domain.Outcome {
	var api smsAnswer
	parseErr := json.Unmarshal(answer, &api)
	why := provider.Unproven(readErr, parseErr, "the SMS API's JSON")
	switch {
	case why != "" && readErr == nil && len(answer) > 0:
		why += " (" + s.history.PeerText(string(answer)) + ")"
	case why != "":
	case len(api.Messages) == 0:
		why = "the answer lists no messages"
	}
	var accepted []string
	refused := -1
	for i, m := range api.Messages {
		if why != "" {
			break
		}
		switch {
		case m.Status == nil || *m.Status == "":
			why = fmt.Sprintf("part %d of the answer has no status", i+1)
		case *m.Status == "0" && !operationID.MatchString(string(m.MessageID)):
			why = fmt.Sprintf("part %d has status 0 but no usable message-id", i+1)
		case *m.Status == "0":
			accepted = append(accepted, string(m.MessageID))
		case refused < 0:
			refused = i
		}
	}
	if why != "" {
		return provider.UnprovenVerdict.Mark(s.history.Outcome(domain.OutcomeUnknown, code, latency,
			fmt.Sprintf("SMS API answered HTTP %d but %s; the message may have been sent", code, why)))
	}

	if refused < 0 {
		kind := domain.OutcomeAccepted
		if s.deliveredOn == DeliveredOnAccept {
			kind = domain.OutcomeDelivered
		}
		o := s.history.Outcome(kind, code, latency, "")
		// A long text is sent in parts, each with its own message-id and its own receipt; the
		// first names the message. Receipts name the delivery by client-ref in any case.
		o.ProviderOperationID = accepted[0]
		return o
	}

	m := api.Messages[refused]
	status := string(*m.Status)
	st := statusOf(status)
	text := fmt.Sprintf("Vonage refused the message: status %s %s", provider.Printable(clip(status)), st.meaning)
	if m.ErrorText != "" {
		text += ": " + s.history.PeerText(string(m.ErrorText))
	}
	kind := st.kind
	if len(accepted) > 0 {
		// Retrying would send the accepted parts again; not retrying may leave the recipient
		// with part of the text. An operator decides.
		kind = domain.OutcomeUnknown
		text = fmt.Sprintf("Vonage accepted %d of the %d parts of the message and refused part %d (status %s %s); the recipient may have part of it",
			len(accepted), len(api.Messages), refused+1, provider.Printable(clip(status)), st.meaning)
	}
	o := s.history.Outcome(kind, code, latency, text)
	o.ProviderCode = provider.Printable(clip(status))
	o.ProviderFault = st.providerFault
	// Part of a long text went: only a whole refusal is evidence against the number.
	o.Suppress = kind == domain.OutcomePermanent && suppressingStatuses[status] != ""
	if len(accepted) > 0 {
		o.ProviderOperationID = accepted[0]
	}
	return o
}

// operationID is what a message-id may be: Vonage's are 16 to 18 hexadecimal characters. It
// is stored and matched against receipts, so it is held to a plain form.
var operationID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

// e164 is a recipient as the SMS channel writes it: + and 7 to 15 digits, not starting with 0.
var e164 = regexp.MustCompile(`^[1-9][0-9]{6,14}$`)

// recipientNumber is the number as Vonage wants it: E.164 without the leading +.
func recipientNumber(recipient string) (string, error) {
	n := strings.TrimPrefix(recipient, "+")
	if !e164.MatchString(n) {
		return "", errors.New("want a phone number in E.164 form (+ and 7 to 15 digits, no spaces)")
	}
	return n, nil
}

// readText reads the payload's text member, matched by its exact name (encoding/json would also
// take "Text" for a struct field).
func readText(payload json.RawMessage) (string, *commands.InvalidField) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(payload, &members); err != nil || members == nil {
		return "", &commands.InvalidField{Field: "payload", Reason: "must be a JSON object with a text member"}
	}
	raw, ok := members["text"]
	if !ok || string(raw) == "null" {
		return "", &commands.InvalidField{Field: "payload.text", Reason: "is required: the message's text"}
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return "", &commands.InvalidField{Field: "payload.text", Reason: "must be a string"}
	}
	if strings.TrimSpace(text) == "" {
		return "", &commands.InvalidField{Field: "payload.text", Reason: "must not be empty or only white space"}
	}
	return text, nil
}

// gsm7 holds the characters of the GSM 03.38 default alphabet and its extension table, which an
// SMS of type text carries; any other character needs type unicode.
var gsm7 = func() map[rune]bool {
	const basic = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?" +
		"¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
	const extension = "\f^{}\\[~]|€"
	set := make(map[rune]bool, len(basic)+len(extension))
	for _, r := range basic + extension {
		set[r] = true
	}
	return set
}()

// isGSM7 reports whether text can be sent as an SMS of type text.
func isGSM7(text string) bool {
	for _, r := range text {
		if !gsm7[r] {
			return false
		}
	}
	return true
}

// clip bounds a text to maxPeerText bytes, cut on a character boundary.
func clip(text string) string { return provider.Clip(text, maxPeerText) }

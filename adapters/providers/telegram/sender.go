// Package telegram is the provider adapter that delivers a notification as a Telegram message,
// sent by a bot through the Bot API's sendMessage method.
//
// Like every provider adapter it reports each attempt as a typed domain.Outcome. The line
// between "Telegram cannot have sent the message" (transient, safe to retry) and "it may have"
// (unknown) is drawn at the moment the request was fully written, observed through
// net/http/httptrace, as in adapters/providers/webhook. The bot token is part of every call's URL; the
// adapter keeps it out of everything it records, returns or prints.
package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

var _ commands.Sender = (*Sender)(nil)

const (
	// maxResponseRead bounds what we read of an answer. The largest honest one echoes the sent
	// message: 4096 characters of text (up to 12 bytes each when escaped as a \u surrogate
	// pair, about 48 KiB) plus its entities (up to 100, with their URLs) and the chat, well
	// under 128 KiB. Past that the Bot API is not what answers, and a worker's memory is not
	// the answerer's to fill.
	maxResponseRead = 128 << 10
	// maxDescription is how much of Telegram's description (or of a body that is not the Bot
	// API's JSON) goes into the history: Telegram's are one short sentence; a proxy's HTML
	// error page is cut to its start.
	maxDescription = 256
	// MaxRetryAfter caps the wait Telegram can ask for: retry_after is input from a peer, and
	// without a cap a wrong value would park a delivery for years. The retry policy applies its
	// own, usually smaller, bound (domain.RetryPolicy.RetryAfterMax).
	MaxRetryAfter = 24 * time.Hour

	// Pooling: every call of a bot goes to one host, up to ProviderRate a second, so keep
	// enough idle connections to skip a TCP and TLS handshake per call.
	maxIdleConnsPerHost = 64

	// userAgent identifies the ledger in the logs of a self-hosted Bot API server or proxy.
	userAgent = "deliveryledger-telegram/1"
)

// Sender sends messages through one bot. It is safe for concurrent use; create one per bot and
// share it, because it owns the connection pool.
type Sender struct {
	provider  string
	client    *http.Client
	transport *http.Transport
	timeout   time.Duration
	// endpoint is {base_url}/bot{token}/sendMessage: it holds the token, so it is never
	// printed; host is what messages name instead.
	endpoint string
	host     string
	// history writes the outcomes and peer texts without the spellings of the token.
	history provider.History
}

// New builds a Sender from cfg, with the defaults for its zero fields. Its error never contains
// the token.
func New(cfg Config) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("telegram config: %w", err)
	}
	cfg = cfg.withDefaults()
	base, err := url.Parse(cfg.BaseURL)
	if err != nil { // Validate parsed it already
		return nil, errors.New("telegram config: base_url: not a URL")
	}
	transport := provider.Transport(maxIdleConnsPerHost)
	s := &Sender{
		provider:  cfg.Provider,
		client:    provider.Client(transport, withoutToken), // no redirects; a 3xx is read as a wrong base URL
		transport: transport,
		timeout:   cfg.Timeout,
		endpoint:  strings.TrimSuffix(cfg.BaseURL, "/") + "/bot" + cfg.Token + "/sendMessage",
		host:      base.Host,
		history:   provider.History{Provider: cfg.Provider, Secrets: tokenSpellings(cfg.Token), Mark: "[token]", MaxPeerText: maxDescription},
	}
	return s, nil
}

// tokenSpellings lists the ways the token could appear in a text: whole, with its colon
// percent-encoded (as a URL may print it), and its secret half alone. The bot id before the
// colon is public (it is the bot's user id) and short, so it is not removed by itself.
func tokenSpellings(token string) []string {
	spellings := []string{token, strings.ReplaceAll(token, ":", "%3A"), strings.ReplaceAll(token, ":", "%3a")}
	if _, secret, ok := strings.Cut(token, ":"); ok && len(secret) >= 8 {
		spellings = append(spellings, secret)
	}
	return spellings
}

// Provider names the provider in the history and in metrics (Config.Provider).
func (s *Sender) Provider() string { return s.provider }

// Deduplicates is false: sendMessage takes no idempotency key, so a repeated call sends a
// second message, and an attempt with an unknown outcome must not be repeated blindly.
func (s *Sender) Deduplicates() bool { return false }

// String names the sender without its token, so that printing a Sender (whose fields hold the
// token) never writes the secret.
func (s *Sender) String() string {
	return "telegram.Sender{provider: " + s.provider + ", host: " + s.host + "}"
}

// CloseIdleConnections closes the pooled connections that are not in use; call it on shutdown.
func (s *Sender) CloseIdleConnections() { s.transport.CloseIdleConnections() }

// sendMessageRequest is the body of a sendMessage call. ChatID is an int64 or "@username".
type sendMessageRequest struct {
	ChatID    any    `json:"chat_id"`
	Text      string `json:"text"`
	ParseMode string `json:"parse_mode,omitempty"`
}

// apiResponse is the Bot API's answer to every method: ok, then result or an error.
type apiResponse struct {
	OK     *bool `json:"ok"`
	Result *struct {
		MessageID *int64 `json:"message_id"`
	} `json:"result"`
	ErrorCode   *int   `json:"error_code"`
	Description string `json:"description"`
	Parameters  *struct {
		// RetryAfter is documented as an integer; a float is taken too, so that a finer
		// value never makes the whole answer unreadable.
		RetryAfter      *float64 `json:"retry_after"`
		MigrateToChatID *int64   `json:"migrate_to_chat_id"`
	} `json:"parameters"`
}

// Send sends msg's text to the chat msg.Recipient names and classifies what happened. It never
// returns an error: every failure is an outcome. A recipient or payload that cannot be sent
// fails without a network call; the call is bounded by the configured timeout and by ctx.
func (s *Sender) Send(ctx context.Context, msg commands.WorkMessage) domain.Outcome {
	start := time.Now()
	c, err := parseChat(msg.Recipient)
	if err != nil {
		// The recipient was checked at acceptance; a snapshot cannot get better on retry.
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), "recipient: "+err.Error())
	}
	m, invalid := readPayload(msg.Payload)
	if invalid != nil {
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), invalid.Error())
	}
	body, err := json.Marshal(sendMessageRequest{ChatID: c.chatID(), Text: m.text, ParseMode: m.parseMode})
	if err != nil {
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), fmt.Sprintf("encode sendMessage: %v", err))
	}

	callCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		// Its text would repeat the URL, token included.
		return s.history.Outcome(domain.OutcomePermanent, 0, time.Since(start), "build the sendMessage request: unusable base_url")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)

	a := provider.Exchange(ctx, s.client, req, maxResponseRead)
	if a.Response == nil {
		// The kit draws the line for every adapter (provider.Unanswered). A DNS failure is
		// transient and NotSent too: the host is the operator's setting, not the caller's, and
		// a resolver that cannot find api.telegram.org is far likelier broken for a while than
		// right. The text names the host, never the URL, which holds the token.
		return s.history.Unanswered(a, time.Since(start), "sendMessage to "+s.host, "Telegram may have sent the message")
	}
	return s.responseOutcome(c, a.Response, a.Body, a.ReadErr, time.Since(start))
}

// responseOutcome classifies an answer. The HTTP status decides (the Bot API sends its
// error_code as the status too); error_code and description are recorded as Telegram gave
// them.
func (s *Sender) responseOutcome(c chat, resp *http.Response, answer []byte, readErr error, latency time.Duration) domain.Outcome {
	code := resp.StatusCode
	var api apiResponse
	parseErr := json.Unmarshal(answer, &api)
	if parseErr != nil {
		// A type error leaves the members decoded so far: none of them is to be believed.
		api = apiResponse{}
	}

	if code >= 200 && code < 300 {
		return s.acceptedOutcome(c, code, &api, readErr, parseErr, latency)
	}

	// Flood control (429, a chat's limit, not the bot's health), or Telegram's servers in
	// trouble (5xx, 408: a fault): it did not send, and will later.
	v := provider.Answered(code)
	switch {
	case code >= 300 && code < 400:
		// Not the Bot API answering (the real one never redirects): base_url is wrong, and
		// retrying will not fix it, for any message. Location is not echoed: it may repeat the
		// token's URL.
		v.ProviderFault = true
	case code == http.StatusUnauthorized, code == http.StatusNotFound:
		// The token is wrong (401) or malformed (404): every message of this bot fails, so it
		// counts against the provider.
		v.ProviderFault = true
	default:
		// 400 (chat not found, text unparsable), 403 (the bot was blocked or removed from the
		// chat), any other 4xx: this request, to this chat, will not succeed by itself; the
		// bot is well.
	}
	kind := v.Kind

	text := fmt.Sprintf("Telegram answered HTTP %d", code)
	switch {
	case parseErr == nil && api.Description != "":
		text += ": " + s.history.PeerText(api.Description)
	case len(answer) > 0:
		text += " " + http.StatusText(code) + ": " + s.history.PeerText(string(answer))
	default:
		text += " " + http.StatusText(code)
	}
	if code >= 300 && code < 400 {
		text += " (redirects are not followed; check base_url)"
	}
	if api.Parameters != nil && api.Parameters.MigrateToChatID != nil {
		// A group upgraded to a supergroup: the caller must send to the new id.
		text += fmt.Sprintf(" (the group is now chat %d)", *api.Parameters.MigrateToChatID)
	}
	o := v.Mark(s.history.Outcome(kind, code, latency, text))
	if api.ErrorCode != nil {
		o.ProviderCode = strconv.Itoa(*api.ErrorCode)
	}
	o.Suppress = kind == domain.OutcomePermanent && suppresses(code, api.Description)
	if kind == domain.OutcomeTransient {
		o.RetryAfter = retryAfter(&api, resp.Header.Get("Retry-After"))
	}
	return o
}

// suppressingRefusal is a Bot API refusal that is hard evidence that the chat takes no more
// messages from this bot: an HTTP status (the Bot API's error_code) and words its description
// holds, "" for any description.
type suppressingRefusal struct {
	status      int
	description string
}

// suppressingRefusals are the refusals that suppress the recipient (Outcome.Suppress). Every
// other answer suppresses nothing: another 400 is this message (its text, its parse_mode), 401
// and 404 the bot's token, 429 and 5xx the moment.
var suppressingRefusals = []suppressingRefusal{
	// 403 Forbidden, whatever its words: the chat refuses this bot until someone in it acts
	// ("bot was blocked by the user", "user is deactivated", "bot was kicked from the group
	// chat", "bot is not a member of the channel chat", "bot can't initiate conversation with a
	// user").
	{status: http.StatusForbidden},
	// 400 with "chat not found" or "user not found": no such chat for this bot.
	{status: http.StatusBadRequest, description: "chat not found"},
	{status: http.StatusBadRequest, description: "user not found"},
}

// suppresses reports whether a refusal with this status and description is one of
// suppressingRefusals. The Bot API's descriptions are stable English ("Bad Request: chat not
// found"); they are compared without regard to case.
func suppresses(status int, description string) bool {
	description = strings.ToLower(description)
	for _, r := range suppressingRefusals {
		if r.status == status && strings.Contains(description, r.description) {
			return true
		}
	}
	return false
}

// acceptedOutcome classifies a 2xx. Telegram answered, so it took the request, and may have
// sent the message whatever the body says; only an answer that proves it (ok:true and a
// message_id) is a delivery. Anything else (a body cut short or not the Bot API's JSON, ok
// false on a 2xx, no message id) is unknown, not transient: retrying could send the message
// twice. Err says what was missing.
func (s *Sender) acceptedOutcome(c chat, code int, api *apiResponse, readErr, parseErr error, latency time.Duration) domain.Outcome {
	why := provider.Unproven(readErr, parseErr, "the Bot API's JSON")
	switch {
	case why != "":
	case api.OK == nil || !*api.OK:
		why = "the answer does not say ok:true"
		if api.Description != "" {
			why += " (" + s.history.PeerText(api.Description) + ")"
		}
	case api.Result == nil || api.Result.MessageID == nil:
		why = "the answer has no result.message_id"
	}
	if why == "" {
		o := s.history.Outcome(domain.OutcomeDelivered, code, latency, "")
		// Message ids count per chat, so the pair names the message (for editMessageText or
		// deleteMessage when reconciling).
		o.ProviderOperationID = c.String() + ":" + strconv.FormatInt(*api.Result.MessageID, 10)
		return o
	}
	o := provider.UnprovenVerdict.Mark(s.history.Outcome(domain.OutcomeUnknown, code, latency,
		fmt.Sprintf("Telegram answered HTTP %d but %s; the message may have been sent", code, why)))
	if api.ErrorCode != nil {
		o.ProviderCode = strconv.Itoa(*api.ErrorCode)
	}
	return o
}

// retryAfter is Telegram's requested wait: parameters.retry_after (seconds), else the
// Retry-After header (provider.RetryAfter), capped at MaxRetryAfter; zero when neither is
// usable, so a bad value never delays a retry beyond the ledger's own schedule.
func retryAfter(api *apiResponse, header string) time.Duration {
	if api.Parameters == nil || api.Parameters.RetryAfter == nil {
		return provider.RetryAfter(header, time.Now(), MaxRetryAfter)
	}
	switch secs := *api.Parameters.RetryAfter; {
	case math.IsNaN(secs) || secs <= 0:
		return 0
	case secs >= MaxRetryAfter.Seconds():
		return MaxRetryAfter
	default:
		return time.Duration(math.Ceil(secs * float64(time.Second)))
	}
}

// clip bounds a text to maxDescription bytes, cut on a character boundary.
func clip(text string) string { return provider.Clip(text, maxDescription) }

// withoutToken renders a Bot API URL for a trace: the method's path with the bot's token
// replaced, since a trace backend is no place for a credential. A URL of another shape is
// rendered as its origin alone.
func withoutToken(u *url.URL) string {
	path := u.EscapedPath()
	if i := strings.LastIndex(path, "/bot"); i >= 0 {
		if j := strings.Index(path[i+1:], "/"); j >= 0 {
			return u.Scheme + "://" + u.Host + path[:i] + "/bot{token}" + path[i+1+j:]
		}
	}
	return u.Scheme + "://" + u.Host
}

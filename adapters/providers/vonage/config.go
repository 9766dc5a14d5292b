package vonage

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
)

// Defaults applied by New to the zero fields of a Config.
const (
	// DefaultBaseURL is Vonage's (formerly Nexmo's) REST host for the SMS API. Another base URL
	// serves a proxy or, in tests and `ledger sink`, vonagefake.
	DefaultBaseURL = "https://rest.nexmo.com"
	// DefaultTimeout bounds one call, from dialling to the last byte of the answer we read. The
	// SMS API answers in well under a second; ten seconds rides out a slow moment without
	// pinning a worker slot, and a longer wait mostly turns transient failures into unknown
	// outcomes.
	DefaultTimeout = 10 * time.Second
	// DefaultDeliveredOn waits for the delivery receipt.
	DefaultDeliveredOn = DeliveredOnReceipt
)

// What counts as delivered (Config.DeliveredOn).
const (
	// DeliveredOnReceipt: Vonage's acceptance is domain.OutcomeAccepted; the delivery is decided
	// by its delivery receipt (ParseReceipt), or by an operator when none comes.
	DeliveredOnReceipt = "receipt"
	// DeliveredOnAccept: Vonage's acceptance is domain.OutcomeDelivered, for accounts or
	// destinations without receipts. Vonage's own documentation warns that a status 0 "does not
	// indicate that Vonage delivered your message": choose it knowingly.
	DeliveredOnAccept = "accept"
)

// MinCallbackTokenLength is the shortest callback token taken: the token is the only thing that
// authenticates a receipt, so it must not be guessable.
const MinCallbackTokenLength = 16

// Config configures one Vonage provider: one account (API key) and one sender. Its fields are
// named in Validate's messages by their config-file keys (provider, base_url, api_key,
// api_secret_env, from, callback_token_env, timeout, delivered_on); Callback is built by the
// wiring from public_url and is named callback.
type Config struct {
	// Provider names this provider in the history and in metrics ("vonage"; a second account as
	// a failover provider needs a name of its own). Required: lowercase letters, digits, - or _,
	// starting with a letter, at most 32 characters, because it becomes a metric label.
	Provider string
	// BaseURL is where the SMS API is served: an absolute http or https URL without query,
	// fragment or user name. Empty means DefaultBaseURL. Calls go to {BaseURL}/sms/json.
	BaseURL string
	// APIKey is the account's API key. Required. It names the account (Vonage echoes it in
	// receipts as api-key) and is not treated as a secret.
	APIKey string
	// APISecret is the account's API secret. Required. It is a secret: nothing this package
	// returns, records or prints contains it.
	APISecret string
	// From is the sender: a number in E.164 (a leading + is dropped, as Vonage wants it) or an
	// alphanumeric sender id of at most 11 letters, digits or spaces. Required. Which one a
	// destination takes is the destination country's rule (North America wants a Vonage
	// number); a refusal is status 15 and counts against the recipient, not the provider.
	From string
	// Callback is the full URL Vonage sends this provider's delivery receipts to,
	// {public_url}/v1/receipts/{provider}?token={CallbackToken}, built by the wiring. It is sent
	// with every message (with status-report-req=1) and overrides the account's dashboard
	// setting. Empty: no callback is sent, and receipts go wherever the dashboard says. It holds
	// the token, so it is treated as a secret.
	Callback string
	// CallbackToken is the secret a receipt's URL must carry as its token query parameter
	// (ParseReceipt). Required when Callback is set, and then equal to Callback's token; at
	// least MinCallbackTokenLength characters. Without it every receipt is refused.
	CallbackToken string
	// Timeout bounds one call. Zero means DefaultTimeout. The attempt's context may impose a
	// shorter deadline.
	Timeout time.Duration
	// DeliveredOn says what counts as delivered: DeliveredOnReceipt (the default when empty)
	// or DeliveredOnAccept.
	DeliveredOn string
}

var (
	// senderNumber and senderName are the two forms of a sender Vonage takes.
	senderNumber = regexp.MustCompile(`^\+?[1-9][0-9]{3,14}$`)
	senderName   = regexp.MustCompile(`^[A-Za-z0-9 ]{1,11}$`)
	// hasLetter tells an alphanumeric sender id from a number.
	hasLetter = regexp.MustCompile(`[A-Za-z]`)
)

// Validate reports every problem of the configuration at once, so an operator fixes them in one
// round instead of one per restart. No message repeats the API secret, the callback token, the
// callback URL (it holds the token) or the base URL (an operator may have pasted a secret into
// it): configuration errors end up in logs.
func (c Config) Validate() error {
	problems := provider.CheckAPI(c.Provider, "vonage", c.BaseURL, checkBaseURL)
	switch {
	case c.APIKey == "":
		problems = append(problems, provider.Errorf("api_key", "api_key is required (the account's API key, from the Vonage dashboard)"))
	case !secretForm(c.APIKey):
		// Vonage documents the key only as the string its dashboard shows (8 hexadecimal
		// characters today), so only what no key has is refused: a pasted quote, space or
		// line break, caught at start-up instead of at the first status 4.
		problems = append(problems, provider.Errorf("api_key", "api_key: want the API key as the dashboard shows it, without spaces, quotes or a line break"))
	}
	switch {
	case c.APISecret == "":
		problems = append(problems, provider.Errorf("api_secret_env", "api_secret_env: the API secret is empty (set the environment variable api_secret_env names)"))
	case !secretForm(c.APISecret):
		problems = append(problems, provider.Errorf("api_secret_env", "api_secret_env: the API secret has spaces, quotes, control characters or a line break"))
	}
	switch {
	case c.From == "":
		problems = append(problems, provider.Errorf("from", "from is required (a Vonage number in E.164, or an alphanumeric sender id)"))
	case !validSender(c.From):
		problems = append(problems, provider.Errorf("from", "from %q: want a number in E.164 (4 to 15 digits, + optional) or an alphanumeric sender id of at most 11 letters, digits or spaces", provider.Printable(clip(c.From))))
	}
	if c.Callback != "" || c.CallbackToken != "" {
		problems = append(problems, c.checkCallback()...)
	}
	if c.Timeout < 0 {
		problems = append(problems, provider.Errorf("timeout", "timeout must not be negative, got %s", c.Timeout))
	}
	switch c.DeliveredOn {
	case "", DeliveredOnReceipt, DeliveredOnAccept:
	default:
		problems = append(problems, provider.Errorf("delivered_on", "delivered_on %q: want %s (wait for the delivery receipt) or %s (count Vonage's acceptance as delivered)",
			provider.Printable(clip(c.DeliveredOn)), DeliveredOnReceipt, DeliveredOnAccept))
	}
	return errors.Join(problems...)
}

// checkCallback checks the callback URL and token together, without repeating either.
func (c Config) checkCallback() []error {
	var problems []error
	tokenOK := true
	switch {
	case c.CallbackToken == "" && c.Callback != "":
		tokenOK = false
		problems = append(problems, provider.Errorf("callback_token_env", "callback_token_env: a callback is set, so the callback token is required (set the environment variable callback_token_env names)"))
	case c.CallbackToken == "":
		tokenOK = false
	case !secretForm(c.CallbackToken):
		tokenOK = false
		problems = append(problems, provider.Errorf("callback_token_env", "callback_token_env: the callback token has spaces, quotes, control characters or a line break"))
	case utf8.RuneCountInString(c.CallbackToken) < MinCallbackTokenLength:
		tokenOK = false
		problems = append(problems, provider.Errorf("callback_token_env", "callback_token_env: the callback token is shorter than %d characters: it alone authenticates receipts", MinCallbackTokenLength))
	}
	if c.Callback == "" {
		return problems
	}
	u, err := url.Parse(c.Callback)
	if err != nil {
		return append(problems, publicURLError("callback: not a URL"))
	}
	switch {
	case u.Scheme != "https" && !(u.Scheme == "http" && loopbackHost(u.Hostname())):
		// The token travels in the URL: in clear text only to this machine (tests, ledger sink).
		problems = append(problems, publicURLError("callback: want an absolute https URL (http only to a loopback host): it carries the callback token"))
	case u.Hostname() == "":
		problems = append(problems, publicURLError("callback: must name a host"))
	case u.User != nil:
		problems = append(problems, publicURLError("callback: must not carry a user name or password"))
	case u.Fragment != "":
		problems = append(problems, publicURLError("callback: must not have a fragment"))
	default:
		q, err := url.ParseQuery(u.RawQuery)
		switch {
		case err != nil:
			problems = append(problems, publicURLError("callback: its query does not parse"))
		case len(q["token"]) != 1:
			problems = append(problems, publicURLError("callback: want exactly one token query parameter (…/v1/receipts/{provider}?token=…)"))
		case tokenOK && !sameSecret(q.Get("token"), c.CallbackToken):
			problems = append(problems, publicURLError("callback: its token query parameter is not the callback token, so every receipt would be refused"))
		}
	}
	return problems
}

// publicURLError blames a problem of the callback URL on public_url, which it is built from.
func publicURLError(msg string) error {
	return &provider.KeyError{Key: "public_url", Root: true, Err: errors.New(msg)}
}

// secretForm reports whether a secret is a single word of printable ASCII without quotes: what a
// generated secret is, and not what a paste with a line break or quotes is.
func secretForm(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b >= 0x7f || b == '"' || b == '\'' {
			return false
		}
	}
	return s != ""
}

// validSender reports whether from is a sender Vonage takes: a number, or a name with a letter.
func validSender(from string) bool {
	if hasLetter.MatchString(from) {
		return senderName.MatchString(from) && strings.TrimSpace(from) != ""
	}
	return senderNumber.MatchString(from)
}

// loopbackHost reports whether host is this machine: localhost or a loopback IP literal.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// checkBaseURL checks a base URL without repeating it (see Validate).
func checkBaseURL(raw string) error {
	return provider.CheckBaseURL(raw, "api_key and api_secret_env")
}

// withDefaults returns c with its zero fields replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DeliveredOn == "" {
		c.DeliveredOn = DefaultDeliveredOn
	}
	return c
}

// String prints the configuration with the secrets masked (the callback too: it holds the
// token), so that logging a Config with %v or %+v never writes them.
func (c Config) String() string {
	return fmt.Sprintf("{Provider:%s BaseURL:%s APIKey:%s APISecret:%s From:%s Callback:%s CallbackToken:%s Timeout:%s DeliveredOn:%s}",
		c.Provider, c.BaseURL, c.APIKey, mask(c.APISecret), c.From, maskCallback(c.Callback), mask(c.CallbackToken), c.Timeout, c.DeliveredOn)
}

// LogValue masks the secrets for log/slog, whose JSON handler would otherwise marshal the fields.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("provider", c.Provider),
		slog.String("base_url", c.BaseURL),
		slog.String("api_key", c.APIKey),
		slog.String("api_secret", mask(c.APISecret)),
		slog.String("from", c.From),
		slog.String("callback", maskCallback(c.Callback)),
		slog.String("callback_token", mask(c.CallbackToken)),
		slog.Duration("timeout", c.Timeout),
		slog.String("delivered_on", c.DeliveredOn),
	)
}

// mask says whether a secret is set without showing any of it.
func mask(secret string) string {
	if secret == "" {
		return ""
	}
	return "[redacted]"
}

// maskCallback shows where receipts go (scheme, host and path) without the query that holds the
// token.
func maskCallback(callback string) string {
	if callback == "" {
		return ""
	}
	u, err := url.Parse(callback)
	if err != nil || u.Host == "" {
		return "[redacted]"
	}
	return u.Scheme + "://" + u.Host + u.EscapedPath() + "?[redacted]"
}

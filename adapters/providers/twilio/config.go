package twilio

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/adapters/providers/sms"
)

// Defaults applied by New to the zero fields of a Config.
const (
	// DefaultBaseURL is Twilio's REST API. Another base URL serves a Twilio-compatible gateway
	// or, in tests and `ledger sink`, twiliofake.
	DefaultBaseURL = "https://api.twilio.com"
	// DefaultTimeout bounds one call, from dialling to the last byte of the answer we read.
	// Twilio answers a create in well under a second; ten seconds rides out a slow moment
	// without pinning a worker slot, and a longer wait mostly turns transient failures into
	// unknown outcomes.
	DefaultTimeout = 10 * time.Second
)

// What a 201 means, Config.DeliveredOn.
const (
	// DeliveredOnReceipt: Twilio took the message (OutcomeAccepted); it is delivered when a
	// status callback or a lookup says so. The default.
	DeliveredOnReceipt = "receipt"
	// DeliveredOnAccept: Twilio's acceptance is the delivery (OutcomeDelivered), for an
	// operator who does not want to wait for carriers' receipts, which some never send.
	DeliveredOnAccept = "accept"
)

// Config configures one Twilio provider: one account and one sender. Validate names its fields
// by their config-file keys (provider, base_url, account_sid, auth_token_env, from, timeout,
// delivered_on; status_callback is derived from public_url) and blames each problem on that key
// (provider.KeyError).
type Config struct {
	// Provider names this provider in the history and in metrics ("twilio"; a second account
	// as a failover provider needs a name of its own). Required: lowercase letters, digits, -
	// or _, starting with a letter, at most 32 characters, because it becomes a metric label
	// and the path of its receipts.
	Provider string
	// BaseURL is where the API is served: an absolute http or https URL without query,
	// fragment or user name. Empty means DefaultBaseURL. Calls go to
	// {BaseURL}/2010-04-01/Accounts/{AccountSID}/Messages.json.
	BaseURL string
	// AccountSID is the account ("AC" and 32 hex digits at Twilio; a compatible gateway may
	// use another form). Required. It is the user name of every call and is not a secret.
	AccountSID string
	// AuthToken is the account's auth token: the password of every call and the key of the
	// status callbacks' signatures. Required. It is a secret: nothing this package returns,
	// records or prints contains it.
	AuthToken string
	// From is the sender: a number in E.164 form, a short code, or an alphanumeric sender id
	// (up to 11 letters, digits and spaces, at least one letter). Required.
	From string
	// StatusCallback is the full URL Twilio posts status updates to,
	// {public_url}/v1/receipts/{Provider}; it is also the URL their signatures cover. Empty
	// means no callbacks: delivery is then learnt by lookups only.
	StatusCallback string
	// Timeout bounds one call. Zero means DefaultTimeout. The attempt's context may impose a
	// shorter deadline.
	Timeout time.Duration
	// DeliveredOn is what a 201 means: DeliveredOnReceipt (the default, for "") or
	// DeliveredOnAccept.
	DeliveredOn string
}

var (
	// accountSID is what AccountSID may be: it is a path segment and the basic-auth user name,
	// so it holds no colon, slash or space. Twilio's are AC and 32 hex digits; compatible
	// gateways use their own (SignalWire a UUID), so the form is not pinned further.
	accountSID = regexp.MustCompile(`^[A-Za-z0-9_-]{2,64}$`)
	// authToken is what AuthToken may be: printable ASCII without spaces, so that a pasted
	// quote, space or line break is caught at start-up instead of at the first 401.
	authToken = regexp.MustCompile(`^[\x21-\x7e]{8,256}$`)
	// shortCode and alphanumericID are the senders other than an E.164 number.
	shortCode      = regexp.MustCompile(`^[0-9]{3,8}$`)
	alphanumericID = regexp.MustCompile(`^[A-Za-z0-9 ]{1,11}$`)
	hasLetter      = regexp.MustCompile(`[A-Za-z]`)
)

// Validate reports every problem of the configuration at once, so an operator fixes them in one
// round instead of one per restart. No message repeats the auth token or a URL (an operator may
// have pasted the token into one): configuration errors end up in logs.
func (c Config) Validate() error {
	problems := provider.CheckAPI(c.Provider, "twilio", c.BaseURL, checkBaseURL)
	switch {
	case c.AccountSID == "":
		problems = append(problems, provider.Errorf("account_sid", "account_sid is required (the account's SID, AC...)"))
	case !accountSID.MatchString(c.AccountSID):
		problems = append(problems, provider.Errorf("account_sid", "account_sid: want 2 to 64 letters, digits, - or _ (Twilio's are AC and 32 hex digits)"))
	}
	switch {
	case c.AuthToken == "":
		problems = append(problems, provider.Errorf("auth_token_env", "auth_token_env: the auth token is required (the environment variable it names is empty or unset)"))
	case !authToken.MatchString(c.AuthToken):
		problems = append(problems, provider.Errorf("auth_token_env", "auth_token_env: the auth token must be 8 to 256 printable characters without spaces (check for quotes, spaces or a line break)"))
	}
	if err := checkFrom(c.From); err != nil {
		problems = append(problems, provider.Errorf("from", "from: %w", err))
	}
	if c.StatusCallback != "" {
		if err := provider.CheckCallbackURL(c.StatusCallback); err != nil {
			problems = append(problems, &provider.KeyError{Key: "public_url", Root: true, Err: fmt.Errorf("status_callback (from public_url): %w", err)})
		}
	}
	if c.Timeout < 0 {
		problems = append(problems, provider.Errorf("timeout", "timeout must not be negative, got %s", c.Timeout))
	}
	switch c.DeliveredOn {
	case "", DeliveredOnReceipt, DeliveredOnAccept:
	default:
		problems = append(problems, provider.Errorf("delivered_on", "delivered_on %q: want %s (the default: delivered when a receipt or a lookup says so) or %s (delivered when Twilio takes the message)",
			c.DeliveredOn, DeliveredOnReceipt, DeliveredOnAccept))
	}
	return errors.Join(problems...)
}

// checkFrom checks the sender.
func checkFrom(from string) error {
	switch {
	case from == "":
		return errors.New("is required: the sender, a number in E.164 form (+14155550100), a short code or an alphanumeric sender id")
	case from[0] == '+':
		if err := sms.CheckNumber(from); err != nil {
			return err
		}
	case shortCode.MatchString(from):
	case alphanumericID.MatchString(from) && hasLetter.MatchString(from):
	default:
		return errors.New("want a number in E.164 form (+14155550100), a short code (digits) or an alphanumeric sender id (up to 11 letters, digits or spaces, at least one letter)")
	}
	return nil
}

// checkBaseURL checks a base URL without repeating it (see Validate).
func checkBaseURL(raw string) error {
	return provider.CheckBaseURL(raw, "account_sid and auth_token_env")
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
		c.DeliveredOn = DeliveredOnReceipt
	}
	return c
}

// String prints the configuration with the auth token masked, so that logging a Config with %v
// or %+v never writes the secret.
func (c Config) String() string {
	return fmt.Sprintf("{Provider:%s BaseURL:%s AccountSID:%s AuthToken:%s From:%s StatusCallback:%s Timeout:%s DeliveredOn:%s}",
		c.Provider, c.BaseURL, c.AccountSID, mask(c.AuthToken), c.From, c.StatusCallback, c.Timeout, c.DeliveredOn)
}

// LogValue masks the auth token for log/slog, whose JSON handler would otherwise marshal the
// field.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("provider", c.Provider),
		slog.String("base_url", c.BaseURL),
		slog.String("account_sid", c.AccountSID),
		slog.String("auth_token", mask(c.AuthToken)),
		slog.String("from", c.From),
		slog.String("status_callback", c.StatusCallback),
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

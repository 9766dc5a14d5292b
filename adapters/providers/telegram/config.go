package telegram

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
)

// Defaults applied by New to the zero fields of a Config.
const (
	// DefaultBaseURL is the public Bot API. Another base URL serves a self-hosted Bot API server
	// (github.com/tdlib/telegram-bot-api) or, in tests and `ledger sink`, telegramfake.
	DefaultBaseURL = "https://api.telegram.org"
	// DefaultTimeout bounds one call, from dialling to the last byte of the answer we read. The
	// Bot API answers sendMessage in well under a second; ten seconds rides out a slow moment
	// without pinning a worker slot, and a longer wait mostly turns transient failures into
	// unknown outcomes.
	DefaultTimeout = 10 * time.Second
)

// Config configures one Telegram provider: one bot. Its fields are named in Validate's messages
// by their config-file keys (provider, base_url, token, timeout), and each problem is blamed on
// the file's key (provider.KeyError: token_env for the token).
type Config struct {
	// Provider names this provider in the history and in metrics ("telegram"; a second bot as
	// a failover provider needs a name of its own). Required: lowercase letters, digits, - or
	// _, starting with a letter, at most 32 characters, because it becomes a metric label.
	Provider string
	// BaseURL is where the Bot API is served: an absolute http or https URL without query,
	// fragment or user name. Empty means DefaultBaseURL. Calls go to
	// {BaseURL}/bot{Token}/sendMessage.
	BaseURL string
	// Token is the bot's token as BotFather gives it ("123456789:AA..."). Required. It is a
	// secret and part of every call's URL: nothing this package returns, records or prints
	// contains it.
	Token string
	// Timeout bounds one call. Zero means DefaultTimeout. The attempt's context may impose a
	// shorter deadline.
	Timeout time.Duration
}

var (
	// tokenForm is the shape of a bot token: the bot's numeric id, a colon, the secret. Checking
	// it catches a pasted quote, space or newline at start-up instead of at the first 401, and
	// guarantees the token needs no escaping in the URL path.
	tokenForm = regexp.MustCompile(`^[0-9]+:[A-Za-z0-9_-]+$`)
	// tokenInPath spots a base URL that already ends in /bot<token>.
	tokenInPath = regexp.MustCompile(`/bot[0-9]+:`)
)

// Validate reports every problem of the configuration at once, so an operator fixes them in one
// round instead of one per restart. No message repeats the token or the base URL (an operator
// may have pasted the token into it): configuration errors end up in logs.
func (c Config) Validate() error {
	problems := provider.CheckAPI(c.Provider, "telegram", c.BaseURL, checkBaseURL)
	switch {
	case c.Token == "":
		problems = append(problems, provider.Errorf("token_env", "token is required (the bot token BotFather gave)"))
	case !tokenForm.MatchString(c.Token):
		problems = append(problems, provider.Errorf("token_env", "token is not of the form <bot id>:<secret> that BotFather gives (check for quotes, spaces or a line break)"))
	}
	if c.Timeout < 0 {
		problems = append(problems, provider.Errorf("timeout", "timeout must not be negative, got %s", c.Timeout))
	}
	return errors.Join(problems...)
}

// checkBaseURL checks a base URL without repeating it (see Validate).
func checkBaseURL(raw string) error {
	if err := provider.CheckBaseURL(raw, ""); err != nil {
		return err
	}
	if u, _ := url.Parse(raw); tokenInPath.MatchString(u.Path) {
		// {base}/bot<token>/bot<token>/sendMessage answers 404 for every call, and the token
		// would then sit in a setting that is not treated as a secret.
		return errors.New("must not contain the /bot<token> part: the token goes in token")
	}
	return nil
}

// withDefaults returns c with its zero fields replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// String prints the configuration with the token masked, so that logging a Config with %v or
// %+v never writes the secret.
func (c Config) String() string {
	return fmt.Sprintf("{Provider:%s BaseURL:%s Token:%s Timeout:%s}", c.Provider, c.BaseURL, maskToken(c.Token), c.Timeout)
}

// LogValue masks the token for log/slog, whose JSON handler would otherwise marshal the field.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("provider", c.Provider),
		slog.String("base_url", c.BaseURL),
		slog.String("token", maskToken(c.Token)),
		slog.Duration("timeout", c.Timeout),
	)
}

// maskToken says whether a token is set without showing any of it: not even the bot id, which
// is enough to tell bots apart but is half of what an attacker needs.
func maskToken(token string) string {
	if token == "" {
		return ""
	}
	return "[redacted]"
}

package email

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
)

// TLSMode says how a Sender protects its SMTP session.
type TLSMode string

const (
	// TLSStartTLS connects in plain text and upgrades with STARTTLS before anything else is
	// sent. STARTTLS is required, not opportunistic: a server that does not offer it is refused
	// (transient), because falling back to plain text would let anyone on the path strip the
	// offer and read the password and every message.
	TLSStartTLS TLSMode = "starttls"
	// TLSImplicit speaks TLS from the first byte (SMTPS, port 465 style).
	TLSImplicit TLSMode = "implicit"
	// TLSNone sends everything in clear. It exists for local test servers (smtpfake, a
	// developer's MailHog); with a username it is refused for any host but the loopback.
	TLSNone TLSMode = "none"
)

// Defaults applied by New to the zero fields of a Config.
const (
	// DefaultTimeout bounds one attempt, from the dial to QUIT. SMTP servers are slow by
	// design (greeting delays, content scanning before the reply to the final "."), so it is
	// longer than the webhook's; a shorter one would turn slow acceptances into unknown
	// outcomes, which only an operator can settle.
	DefaultTimeout = 30 * time.Second
	// DefaultHeloName is what the sender introduces itself as. The machine's host name (what
	// go-mail would use) is a random container id in most deployments, which tells the server
	// nothing and looks like a spam source; operators who need a real name set HeloName.
	DefaultHeloName = "localhost"
)

// Default ports by TLS mode, used when Config.Port is zero: the submission ports, since the
// ledger hands its mail to a provider's relay rather than to recipients' MX hosts.
const (
	DefaultPortStartTLS = 587
	DefaultPortImplicit = 465
	DefaultPortNone     = 25
)

// Config configures one SMTP provider. The field comments name each field by its
// configuration key, which is also how Validate names it.
type Config struct {
	// Provider (provider) is the provider's name as the history and the metrics show it, e.g.
	// "smtp" or "ses-eu". Required: two SMTP providers of one channel must be told apart.
	Provider string
	// Host (host) is the SMTP server's name or IP address, without a port. Required. It is also
	// the name its TLS certificate must carry.
	Host string
	// Port (port) is the server's TCP port; zero means the mode's default (587, 465 or 25).
	Port int
	// TLS (tls) is the TLS mode; empty means TLSStartTLS.
	TLS TLSMode
	// Username (username) turns on SMTP AUTH (PLAIN, or LOGIN when the server offers only
	// that). Empty means no AUTH.
	Username string
	// Password (password) is the AUTH password. It never appears in an outcome or an error.
	Password string
	// From (from) is the sender address of every message: "noreply@example.com" or
	// "Ledger <noreply@example.com>". Required. Its domain is the right-hand side of the
	// Message-ID.
	From string
	// Timeout (timeout) bounds one attempt, dial to QUIT; zero means DefaultTimeout. The
	// attempt's context may impose a shorter deadline.
	Timeout time.Duration
	// RootCAs are the authorities the server's certificate is checked against; nil means the
	// system's. Tests pass the fake server's pool (smtpfake.Server.CertPool).
	RootCAs *x509.CertPool
	// HeloName (helo_name) is the name sent with EHLO; empty means DefaultHeloName.
	HeloName string
	// Unsubscribe, when set, gives a message's one-click unsubscribe link (RFC 8058): with ok,
	// the message carries List-Unsubscribe and List-Unsubscribe-Post; without (no category, a
	// required one, no secret), neither. The wiring sets it (Process); no file key does.
	Unsubscribe func(commands.WorkMessage) (link string, ok bool)
}

// fileKeys are the configuration file's keys of Config's fields where they differ: the password
// comes from the environment variable password_env names, and the provider's name is the block's
// own key (""). Validate blames each problem on its file key (provider.KeyError).
var fileKeys = map[string]string{"host": "host", "port": "port", "tls": "tls", "username": "username",
	"password": "password_env", "from": "from", "timeout": "timeout", "helo_name": "helo_name"}

// Validate reports every problem of the configuration at once, each naming its key, so an
// operator fixes them in one round instead of one per restart.
func (c Config) Validate() error {
	var problems []error
	add := func(key, format string, args ...any) {
		problems = append(problems, provider.Errorf(fileKeys[key], "%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if strings.TrimSpace(c.Provider) == "" {
		add("provider", "is required (the name the history and metrics show, e.g. smtp)")
	} else if hasSpaceOrControl(c.Provider) {
		add("provider", "%q must not contain spaces or control characters (it is a metric label)", c.Provider)
	}
	switch {
	case c.Host == "":
		add("host", "is required")
	case hasSpaceOrControl(c.Host) || strings.Contains(c.Host, "/"):
		add("host", "%q is not a host name or IP address", c.Host)
	default:
		if _, _, err := net.SplitHostPort(c.Host); err == nil {
			add("host", "%q carries a port; give the port in port", c.Host)
		}
	}
	if c.Port < 0 || c.Port > 65535 {
		add("port", "must be from 1 to 65535 (or 0 for the TLS mode's default), got %d", c.Port)
	}
	switch c.TLS {
	case "", TLSStartTLS, TLSImplicit, TLSNone:
	default:
		add("tls", "must be %s, %s or %s, got %q", TLSStartTLS, TLSImplicit, TLSNone, c.TLS)
	}
	if c.Password != "" && c.Username == "" {
		add("password", "is set but username is not; AUTH needs both")
	}
	if strings.ContainsAny(c.Username, "\r\n\x00") {
		add("username", "must not contain CR, LF or NUL")
	}
	if c.Username != "" && c.TLS == TLSNone && !isLoopbackHost(c.Host) {
		// go-mail refuses PLAIN and LOGIN over plain text to anything but the loopback (its
		// smtp.PlainAuth), and it is right to: the password would cross the network in clear.
		add("username", "tls: none would send the password in clear to %s; use starttls or implicit", c.Host)
	}
	if c.From == "" {
		add("from", "is required")
	} else if _, err := senderDomain(c.From); err != nil {
		add("from", "%v", err)
	}
	if c.Timeout < 0 {
		add("timeout", "must not be negative, got %s", c.Timeout)
	}
	if c.HeloName != "" && hasSpaceOrControl(c.HeloName) {
		add("helo_name", "%q must be one host name, without spaces or control characters", c.HeloName)
	}
	return errors.Join(problems...)
}

// withDefaults returns c with its zero fields replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.TLS == "" {
		c.TLS = TLSStartTLS
	}
	if c.Port == 0 {
		switch c.TLS {
		case TLSImplicit:
			c.Port = DefaultPortImplicit
		case TLSNone:
			c.Port = DefaultPortNone
		default:
			c.Port = DefaultPortStartTLS
		}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.HeloName == "" {
		c.HeloName = DefaultHeloName
	}
	return c
}

// senderDomain checks a From value and returns the domain of its address, lowercase.
func senderDomain(from string) (string, error) {
	if strings.ContainsAny(from, "\r\n") {
		return "", errors.New("must not contain CR or LF")
	}
	addr, err := mail.ParseAddress(from)
	if err != nil {
		return "", fmt.Errorf("%q is not one address (noreply@example.com or Name <noreply@example.com>): %v", from, err)
	}
	domain := domainOf(addr.Address)
	if domain == "" {
		return "", fmt.Errorf("%q has no domain", from)
	}
	return domain, nil
}

// isLoopbackHost reports whether go-mail lets AUTH through in plain text to host: exactly the
// names its smtp.isLocalhost (smtp/auth.go) takes, so that Validate refuses what the session
// would refuse later.
func isLoopbackHost(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

// hasSpaceOrControl reports whether s has a space, tab or any control character.
func hasSpaceOrControl(s string) bool {
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return true
		}
	}
	return false
}

// String prints the configuration without the password, so that a Config in a log or an error
// never carries the secret.
func (c Config) String() string {
	password := ""
	if c.Password != "" {
		password = "[redacted]"
	}
	return fmt.Sprintf("{Provider:%s Host:%s Port:%d TLS:%s Username:%s Password:%s From:%s Timeout:%s HeloName:%s}",
		c.Provider, c.Host, c.Port, c.TLS, c.Username, password, c.From, c.Timeout, c.HeloName)
}

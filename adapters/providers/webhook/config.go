package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
)

// Defaults applied by New to the zero fields of a Config.
const (
	// DefaultTimeout bounds one attempt, from dialling to the last byte of the response we read.
	// Ten seconds is long enough for a slow receiver and short enough that a hung one does not
	// pin a worker slot; a longer wait mostly turns transient failures into unknown outcomes.
	DefaultTimeout = 10 * time.Second
	// DefaultUserAgent identifies the ledger to receivers, which often log or filter on it.
	DefaultUserAgent = "deliveryledger-webhook/1"
)

// Config configures a Sender. The zero value is usable: it sends with the defaults above and
// dials public unicast addresses only.
type Config struct {
	// Provider names the provider in the history and in metrics. Empty means Name.
	Provider string
	// Secrets signs each tenant's requests (see Sign); a tenant without one is sent unsigned.
	Secrets Secrets
	// Timeout bounds one attempt (dial, TLS, request, response headers and the part of the body
	// we read). Zero means DefaultTimeout. The caller's context may impose a shorter deadline.
	Timeout time.Duration
	// AllowCIDRs lists address ranges the SSRF guard lets through even though they are not
	// public unicast (a receiver on a private network, 127.0.0.0/8 in tests). Empty means public
	// addresses only. It is the parsed form of LEDGER_WEBHOOK_ALLOW_CIDRS (see ParseCIDRs).
	AllowCIDRs []netip.Prefix
	// UserAgent is sent with every request. Empty means DefaultUserAgent.
	UserAgent string
	// InFlight is the most calls the process makes at once (its worker slots). Up to that many
	// connections to one host are kept open between calls, never fewer than 64: a pool smaller
	// than the calls in flight closes a connection after most calls and dials a new one.
	InFlight int
}

// Validate reports every problem of the configuration at once, so an operator fixes them in
// one round instead of one per restart.
func (c Config) Validate() error {
	var problems []error
	if c.Timeout < 0 {
		problems = append(problems, provider.Errorf("timeout", "webhook timeout must not be negative, got %s", c.Timeout))
	}
	for i, p := range c.AllowCIDRs {
		if !p.IsValid() {
			problems = append(problems, fmt.Errorf("webhook allow CIDR #%d is not a valid prefix", i+1))
		}
	}
	if c.InFlight < 0 {
		problems = append(problems, fmt.Errorf("webhook calls in flight must not be negative, got %d", c.InFlight))
	}
	if !validHeaderValue(c.UserAgent) {
		// A control character would let the value break out of its header line.
		problems = append(problems, fmt.Errorf("webhook user agent %q contains control characters", c.UserAgent))
	}
	return errors.Join(problems...)
}

// withDefaults returns c with its zero fields replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	if c.Provider == "" {
		c.Provider = Name
	}
	return c
}

// ParseCIDRs parses a comma-separated list of CIDR prefixes, the format of
// LEDGER_WEBHOOK_ALLOW_CIDRS. A bare address stands for itself (a /32 or /128), because an
// operator who allows one receiver should not have to remember the prefix syntax. Empty items
// are skipped so that a trailing comma is harmless; an empty string gives nil. All bad items are
// reported together.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var (
		prefixes []netip.Prefix
		problems []error
	)
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			addr, err := netip.ParseAddr(item)
			if err != nil {
				problems = append(problems, fmt.Errorf("parse allow CIDR %q: %w", item, err))
				continue
			}
			prefixes = append(prefixes, netip.PrefixFrom(addr, addr.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			problems = append(problems, fmt.Errorf("parse allow CIDR %q: %w", item, err))
			continue
		}
		prefixes = append(prefixes, p)
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return prefixes, nil
}

// validHeaderValue reports whether v can be sent as a header value: no control characters other
// than horizontal tab (RFC 9110, section 5.5).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < 0x20 && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

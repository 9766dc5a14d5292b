package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/deliveryledger/ledger/adapters/mechanisms/limit"
	"github.com/deliveryledger/ledger/commands"
)

// Name is the webhook channel's name, and its one provider's: in requests, the history, metrics
// and queue names. It is the one place the name is written.
const Name = "webhook"

// DefaultConcurrency caps the webhook calls one process has in flight. It is above the default
// worker concurrency (128 per channel), so out of the box it never refuses; it is a ceiling for
// operators who raise worker concurrency, so that the webhook provider alone cannot exhaust the
// process's sockets and file descriptors.
const DefaultConcurrency = 256

// Channel describes the webhook channel for the registry: senders deliver, in failover order; a
// recipient is an absolute http(s) URL, and the whole payload is the body; calls are limited per
// destination host (limit.HostOf) by the process-wide per-host rule.
func Channel(senders ...commands.Sender) commands.Channel {
	return commands.Channel{
		Name:          Name,
		Providers:     senders,
		Check:         Check,
		Destination:   limit.HostOf,
		Normalize:     Normalize,
		ProviderLimit: commands.Limit{Concurrency: DefaultConcurrency},
	}
}

// Check is the channel's acceptance check: the recipient is a URL ValidateURL takes. The
// payload needs nothing more than what every notification has (a JSON object): it is sent whole.
func Check(recipient string, _ json.RawMessage) error {
	if err := ValidateURL(recipient); err != nil {
		return &commands.InvalidField{Field: "recipient", Reason: err.Error()}
	}
	return nil
}

// ValidateURL checks a webhook recipient at acceptance: an absolute http or https URL with a
// host, a port from 1 to 65535 if it names one, and no user:password (the recipient is shown in
// every status and list answer and kept in the history for ever, so credentials in it would be
// echoed; a receiver that needs a secret takes it in the path or query, or verifies our
// signature). It does not resolve the host: whether the address is allowed is the SSRF guard's
// decision at send time, when DNS gives the address actually dialled.
func ValidateURL(recipient string) error {
	u, err := url.Parse(recipient)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme == "" {
		return errors.New("must be an absolute http or https URL, not a relative reference")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("must be an absolute http or https URL, got scheme %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return errors.New("must be an absolute http or https URL with a host")
	}
	if u.User != nil {
		return errors.New("must not carry a user name or password (they would be shown wherever the recipient is); put a secret in the path or query")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s is not from 1 to 65535", p)
		}
	}
	return nil
}

// Normalize is a recipient's normal form on the channel, what RFC 3986 (section 6.2.2-6.2.3)
// holds equivalent for http(s) and no receiver can tell apart: the scheme and host in lower
// case, the port without leading zeros and dropped when it is the scheme's default (80 for http,
// 443 for https) or empty, the fragment dropped (it never leaves the client), an empty query (a
// "?" alone) dropped and an empty path written "/". The path and query are kept byte for byte as
// given: they are the receiver's, case-sensitive, and a percent-encoding in them may matter to
// it. A recipient ValidateURL refuses is returned as it is.
func Normalize(recipient string) string {
	if ValidateURL(recipient) != nil {
		return recipient
	}
	u, err := url.Parse(recipient)
	if err != nil {
		return recipient
	}
	// ValidateURL took it, so it is scheme "://" authority, then path, query and fragment. The
	// pieces are cut as url.Parse cuts them: the fragment at the first "#", the authority at
	// the first "/" or "?" after it.
	scheme, rest, _ := strings.Cut(recipient, ":")
	rest, ok := strings.CutPrefix(rest, "//")
	if !ok {
		return recipient
	}
	rest, _, _ = strings.Cut(rest, "#")
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	path, query, _ := strings.Cut(rest[end:], "?")
	if path == "" {
		path = "/"
	}
	out := strings.ToLower(scheme) + "://" + normalHost(u) + path
	if query != "" {
		out += "?" + query
	}
	return out
}

// normalHost is the authority of a URL ValidateURL took, in normal form (see Normalize). An
// IPv6 zone ("%25eth0") is kept as given: zone names are the host system's, not case-folded.
func normalHost(u *url.URL) string {
	name, zone, hasZone := strings.Cut(u.Hostname(), "%")
	host := strings.ToLower(name)
	if hasZone {
		host += "%25" + zone
	}
	if strings.Contains(name, ":") {
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" {
		n, _ := strconv.Atoi(p) // ValidateURL checked it is 1 to 65535
		if !(u.Scheme == "http" && n == 80) && !(u.Scheme == "https" && n == 443) {
			host += ":" + strconv.Itoa(n)
		}
	}
	return host
}

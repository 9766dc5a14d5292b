package limit

import (
	"net"
	"net/url"
	"strings"
)

// defaultPorts are dropped from URL hosts so that "https://example.com:443/a" and
// "https://example.com/b" share one entry and one operator override.
var defaultPorts = map[string]string{"http": "80", "https": "443", "ws": "80", "wss": "443"}

// HostOf returns the destination a recipient's calls are limited under:
//
//   - for a URL ("https://Example.com:8443/hook"), the host in lowercase with a trailing dot
//     removed, keeping a non-default port ("example.com:8443") and dropping the scheme's default
//     one. The port is kept because different ports of one name are often different services
//     (an application on :8443 behind a gateway on :443) with their own capacity, and an
//     override in Config.Hosts can name either. An IPv6 literal keeps its brackets only with a
//     port ("[::1]:8080", but "::1");
//   - for an email address ("Ann@Example.com", "mailto:ann@example.com"), the domain after the
//     last '@', in lowercase, since one mail server takes all of the domain's traffic;
//   - otherwise (a phone number, a device token, an unparsable URL), the trimmed recipient
//     itself, so that each such recipient is limited on its own rather than all of them sharing
//     one budget.
//
// The empty string means "no destination host": Acquire then applies provider rules only.
func HostOf(recipient string) string {
	recipient = strings.TrimSpace(recipient)
	if strings.Contains(recipient, "://") {
		u, err := url.Parse(recipient)
		if err != nil || u.Host == "" {
			return recipient
		}
		host, port := u.Hostname(), u.Port()
		if port == defaultPorts[strings.ToLower(u.Scheme)] {
			port = ""
		}
		if host = canonicalHost(host); host == "" {
			return recipient
		}
		if port == "" {
			return host
		}
		return net.JoinHostPort(host, port)
	}
	if at := strings.LastIndexByte(recipient, '@'); at >= 0 && at < len(recipient)-1 {
		return canonicalHost(recipient[at+1:])
	}
	return recipient
}

// canonicalHost lowercases a host name and drops the trailing dot of a fully qualified name, so
// that spellings of one host share one entry. It is applied to Config.Hosts keys too, so that an
// override matches whatever HostOf returns.
func canonicalHost(host string) string {
	host = strings.ToLower(strings.TrimSpace(host))
	if h, port, err := net.SplitHostPort(host); err == nil {
		if h = strings.TrimSuffix(h, "."); h == "" {
			return ""
		}
		return net.JoinHostPort(h, port)
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1] // "[::1]" without a port is written "::1" by HostOf
	}
	return strings.TrimSuffix(host, ".")
}

package provider

// What the provider adapters of fixed, operator-configured HTTP APIs (Telegram, Twilio, Vonage)
// share about their peer: making text it wrote safe for the history and the logs (one printable
// line, bounded, without the credentials), and the connection pool of one such destination.

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/deliveryledger/ledger/tracing"
)

// Printable turns peer-controlled text into a single line of valid UTF-8 for the history and
// for logs: control characters, line and paragraph separators and bidirectional controls could
// forge lines or disguise what a reader sees.
func Printable(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp, unicode.Bidi_Control) {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// Clip bounds a text to max bytes, cut on a character boundary and marked with "…".
func Clip(text string, max int) string {
	if len(text) <= max {
		return text
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}

// Redact replaces every spelling of a secret in text with mark. An adapter builds its messages
// not to contain its secrets; this is the net under them, for texts that come from elsewhere
// (an error of net/http, a proxy's error page that echoes the request).
func Redact(text string, spellings []string, mark string) string {
	for _, secret := range spellings {
		text = strings.ReplaceAll(text, secret, mark)
	}
	return text
}

// Pooling of one fixed destination.
const (
	idleConnTimeout = 90 * time.Second
	tcpKeepAlive    = 30 * time.Second
	// maxResponseHeaderBytes is far below net/http's 1 MiB default: the APIs send a few short
	// headers.
	maxResponseHeaderBytes = 64 << 10
)

// Transport is the connection pool of one destination the operator configured, keeping up to
// idle connections to it so that a call skips the TCP and TLS handshakes. It goes through the
// environment's proxy: the destination is fixed, so a proxy cannot be an SSRF detour, and
// senders often run where only an egress proxy reaches the internet (loopback URLs, in tests
// and `ledger sink`, never go through one).
func Transport(idle int) *http.Transport {
	dialer := &net.Dialer{KeepAlive: tcpKeepAlive}
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           idle,
		MaxIdleConnsPerHost:    idle,
		IdleConnTimeout:        idleConnTimeout,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
}

// Client is the HTTP client of a provider's calls over transport: traced when tracing is on,
// each span's URL rendered by render (nil: as it is; a credential in a URL must not reach a
// trace backend), and redirects never followed. A redirect would re-send the message, and the
// credentials, to a place nobody configured (for a webhook: somewhere the caller did not
// choose, a classic SSRF detour); the fixed APIs never redirect, so the 3xx is returned and the
// adapter reads it as a wrong base URL, permanent.
func Client(transport *http.Transport, render func(*url.URL) string) *http.Client {
	return &http.Client{
		Transport:     tracing.Transport(transport, render),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

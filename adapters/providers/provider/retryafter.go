package provider

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryAfter turns a Retry-After header value (RFC 9110, section 10.2.3) into a wait relative
// to now: either delta-seconds ("120") or an HTTP-date. It returns 0 when the value is empty,
// malformed, negative or in the past, so that a bad header never delays a retry beyond the
// ledger's own schedule, and caps the result at max: Retry-After is input from a peer we do not
// control, and without a cap "Retry-After: 99999999999" would park a delivery for centuries. It
// never panics: it parses untrusted input.
func RetryAfter(v string, now time.Time, max time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if isDigits(v) {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(max/time.Second) {
			// Only overflow can fail on digits: an absurdly large value, capped like any other.
			return max
		}
		return time.Duration(secs) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	// Sub saturates instead of overflowing for dates far from now.
	d := at.Sub(now)
	if d <= 0 {
		return 0
	}
	return min(d, max)
}

// isDigits reports whether s is 1*DIGIT: strconv would also accept a sign, which the grammar
// of delta-seconds does not.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

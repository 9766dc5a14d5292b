package webhook

import (
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
)

// MaxRetryAfter caps the wait a receiver can ask for. Retry-After is input from a peer we do not
// control: without a cap, "Retry-After: 99999999999" would park a delivery for centuries.
const MaxRetryAfter = 24 * time.Hour

// ParseRetryAfter is a receiver's Retry-After as a wait from now, capped at MaxRetryAfter
// (provider.RetryAfter): 0 when it is empty, malformed or in the past.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	return provider.RetryAfter(v, now, MaxRetryAfter)
}

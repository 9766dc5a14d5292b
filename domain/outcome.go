package domain

import (
	"math"
	"time"
)

// OutcomeKind says what an attempt's result means for the delivery.
type OutcomeKind string

const (
	// OutcomeDelivered: the provider accepted the notification.
	OutcomeDelivered OutcomeKind = "delivered"
	// OutcomeTransient: the provider did not act and may succeed later (timeout or reset before
	// the request was written, DNS temporary failure, HTTP 408/425/429/5xx).
	OutcomeTransient OutcomeKind = "transient"
	// OutcomePermanent: retrying cannot help (invalid destination, other 4xx, 3xx).
	OutcomePermanent OutcomeKind = "permanent"
	// OutcomeUnknown: the provider may have acted (timeout or reset after the request was
	// written, a worker died mid-call).
	OutcomeUnknown OutcomeKind = "unknown"
)

// ErrorClass names why an attempt did not deliver, on the wire and in the history.
type ErrorClass string

// Error classes recorded in attempt results.
const (
	ClassTransient ErrorClass = "transient"
	ClassPermanent ErrorClass = "permanent"
	ClassUnknown   ErrorClass = "unknown"
	// ClassPanic: the adapter panicked; the message is dead-lettered with the panic recorded.
	ClassPanic ErrorClass = "panic"
)

// Outcome is the typed result of one attempt, as an adapter reports it.
type Outcome struct {
	Kind                OutcomeKind
	Class               ErrorClass // defaults to the class of Kind
	Provider            string
	StatusCode          int
	Latency             time.Duration
	ProviderOperationID string
	// ProviderCode is the provider's own code for the answer, kept with the attempt for audit:
	// an SMTP reply and enhanced code ("550 5.1.1"), a Telegram error_code, a Twilio error code.
	ProviderCode string
	// RetryAfter is the provider's requested wait (Retry-After), zero if none.
	RetryAfter time.Duration
	Err        string
}

// RetryPolicy decides how often and when a transiently failed delivery is tried again.
type RetryPolicy struct {
	// Base is the ceiling of the first retry delay; each further attempt doubles it.
	Base time.Duration
	// Cap bounds the delay ceiling.
	Cap time.Duration
	// MaxAttempts is the number of attempts in one cycle, the first included: the default and
	// the most a request may ask for, fixed on each delivery at acceptance.
	MaxAttempts int
	// RetryAfterMax bounds a provider's Retry-After (zero: no bound).
	RetryAfterMax time.Duration
}

// Defaults of the retry policy.
const (
	DefaultRetryBase     = 30 * time.Second
	DefaultRetryCap      = 30 * time.Minute
	DefaultMaxAttempts   = 10
	DefaultRetryAfterMax = time.Hour
)

// DefaultRetryPolicy returns the policy used when nothing is configured.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Base: DefaultRetryBase, Cap: DefaultRetryCap, MaxAttempts: DefaultMaxAttempts, RetryAfterMax: DefaultRetryAfterMax}
}

// Ceiling is the largest delay after the given failed attempt (1-based): Base·2^(attempt-1),
// bounded by Cap.
func (p RetryPolicy) Ceiling(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(p.Base) * math.Pow(2, float64(attempt-1))
	// >=, not >: float64(math.MaxInt64) rounds up to 2^63, which time.Duration cannot hold, so a
	// product equal to the cap must not be converted back.
	if d >= float64(p.Cap) || math.IsInf(d, 0) {
		return p.Cap
	}
	return time.Duration(d)
}

// NextAttemptAt is the retry schedule: full jitter (a uniformly random delay up to the ceiling;
// jitter is a number in [0,1) supplied by the caller, so the function stays pure), and a
// provider's Retry-After (bounded by RetryAfterMax) wins when it is longer.
func (p RetryPolicy) NextAttemptAt(attempt int, now time.Time, jitter float64, retryAfter time.Duration) time.Time {
	delay := time.Duration(jitter * float64(p.Ceiling(attempt)))
	if p.RetryAfterMax > 0 && retryAfter > p.RetryAfterMax {
		retryAfter = p.RetryAfterMax
	}
	if retryAfter > delay {
		delay = retryAfter
	}
	return now.Add(delay)
}

// Tiers are the delay queues that follow from the policy: Base·2^k up to and including Cap.
func (p RetryPolicy) Tiers() []time.Duration {
	var tiers []time.Duration
	for d := p.Base; d > 0; d *= 2 {
		if d >= p.Cap {
			tiers = append(tiers, p.Cap)
			break
		}
		tiers = append(tiers, d)
		if d > math.MaxInt64/2 {
			// Doubling would overflow before reaching a cap this large: the cap is the next tier.
			tiers = append(tiers, p.Cap)
			break
		}
	}
	return tiers
}

package domain

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
	// OutcomeAccepted: the provider took the message and will say later whether it was
	// delivered (an SMS gateway's receipt). The delivery stays processing, without holding a
	// worker, until a receipt, a status lookup or a deadline decides. A provider configured to
	// count its acceptance as delivery reports OutcomeDelivered instead.
	OutcomeAccepted OutcomeKind = "accepted"
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

// ClassOf is the error class an outcome of kind has unless an adapter says otherwise (panic):
// none for delivered.
func ClassOf(kind OutcomeKind) ErrorClass {
	switch kind {
	case OutcomeTransient:
		return ClassTransient
	case OutcomePermanent:
		return ClassPermanent
	case OutcomeUnknown:
		return ClassUnknown
	}
	return ""
}

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
	// NotSent says the request never reached the provider (connection refused, a name that
	// does not resolve, a TLS failure, a reset before the whole request was written; SMTP: the
	// session ended before RCPT TO): the same attempt may move on to the channel's next
	// provider at once. Set by the adapter, read by the attempt's failover. Only a transient
	// outcome can be NotSent; an unknown one never is (the provider may have sent it).
	NotSent bool
	// ProviderFault says the outcome counts against the provider's health (5xx, timeouts,
	// connection errors, refused credentials or setup), not against the recipient (an invalid
	// number) nor the caller (its context ended). Set by the adapter; the attempt reports it to
	// the provider's circuit breaker, which opens after its threshold of them.
	ProviderFault bool
	// FailedOver lists the providers the attempt tried first, whose calls never reached them
	// (set by the attempt, never by an adapter).
	FailedOver []ProviderTry
	// ReceiptTimeout and ReceiptMaxWait (OutcomeAccepted) say when to ask the provider about a
	// message no receipt has decided, and when to stop waiting and call the outcome unknown.
	ReceiptTimeout time.Duration
	ReceiptMaxWait time.Duration
}

// ProviderTry is a provider an attempt tried before the one whose answer it records: the call
// did not reach it (its circuit was open, the connection was refused), so it cannot have sent.
type ProviderTry struct {
	Provider string `json:"provider"`
	Error    string `json:"error"`
}

// Defaults of the receipt wait of a provider that confirms delivery later.
const (
	DefaultReceiptTimeout = 10 * time.Minute
	DefaultReceiptMaxWait = 24 * time.Hour
)

// RetryPolicy decides how often and when a transiently failed delivery is tried again: either
// exponentially (Base, Cap, full jitter) or by an explicit Schedule of delays.
type RetryPolicy struct {
	// Base is the ceiling of the first retry delay; each further attempt doubles it.
	Base time.Duration
	// Cap bounds the delay ceiling.
	Cap time.Duration
	// Schedule, when set, replaces Base and Cap: the delays after attempt 1, 2, ..., used as
	// they are (no jitter). A schedule of n delays means n+1 attempts, then dead.
	Schedule []time.Duration
	// RetryUnknown (a channel's unknown: retry) schedules the next attempt after an unknown
	// outcome like after a transient one, for receivers that deduplicate on the delivery id:
	// the history marks such a retry as a possible duplicate.
	RetryUnknown bool
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

// ScheduleOf returns the exponential-free policy of explicit delays: a schedule of n delays
// allows n+1 attempts.
func ScheduleOf(delays []time.Duration, retryAfterMax time.Duration) RetryPolicy {
	return RetryPolicy{Schedule: delays, MaxAttempts: len(delays) + 1, RetryAfterMax: retryAfterMax}
}

// Ceiling is the largest delay after the given failed attempt (1-based): Base·2^(attempt-1),
// bounded by Cap; with a Schedule, the schedule's delay for that attempt (its last one beyond).
func (p RetryPolicy) Ceiling(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if len(p.Schedule) > 0 {
		return p.Schedule[min(attempt, len(p.Schedule))-1]
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
	if len(p.Schedule) > 0 {
		delay = p.Ceiling(attempt) // an explicit schedule is kept as written
	}
	if p.RetryAfterMax > 0 && retryAfter > p.RetryAfterMax {
		retryAfter = p.RetryAfterMax
	}
	if retryAfter > delay {
		delay = retryAfter
	}
	return now.Add(delay)
}

// Tiers are the delay queues that follow from the policy: Base·2^k up to and including Cap, or
// the schedule's distinct delays, ascending.
func (p RetryPolicy) Tiers() []time.Duration {
	if len(p.Schedule) > 0 {
		tiers := slices.Clone(p.Schedule)
		slices.Sort(tiers)
		return slices.Compact(tiers)
	}
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

// Validate reports every problem of the policy at once.
func (p RetryPolicy) Validate() error {
	var problems []error
	if len(p.Schedule) > 0 {
		if p.Base != 0 || p.Cap != 0 {
			problems = append(problems, errors.New("a schedule and base/cap exclude each other"))
		}
		for i, d := range p.Schedule {
			if d <= 0 {
				problems = append(problems, fmt.Errorf("schedule[%d] %s is not positive", i, d))
			}
		}
		if p.MaxAttempts > len(p.Schedule)+1 {
			problems = append(problems, fmt.Errorf("max attempts %d exceeds the %d attempts a schedule of %d delays allows", p.MaxAttempts, len(p.Schedule)+1, len(p.Schedule)))
		}
	} else if p.Base <= 0 || p.Cap < p.Base {
		problems = append(problems, fmt.Errorf("base %s and cap %s: need 0 < base <= cap", p.Base, p.Cap))
	}
	if p.MaxAttempts < 1 {
		problems = append(problems, fmt.Errorf("max attempts %d is below 1", p.MaxAttempts))
	}
	if p.RetryAfterMax < 0 {
		problems = append(problems, fmt.Errorf("retry-after max %s is negative", p.RetryAfterMax))
	}
	return errors.Join(problems...)
}

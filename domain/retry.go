package domain

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// RetryPolicy decides how often and when a transiently failed delivery is tried again. How long
// each wait is belongs to its Strategy; the policy holds what every strategy shares: the number
// of attempts, a provider's Retry-After and its bound, and whether an unknown outcome is retried.
type RetryPolicy struct {
	// Strategy gives the wait after each failed attempt; nil is DefaultRetryStrategy().
	Strategy RetryStrategy
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

// RetryStrategy is how long a delivery waits after each failed attempt. The policy around it adds
// the attempts, Retry-After and the bounds every strategy shares (RetryPolicy.Validate), so a new
// strategy is one type implementing this, plus its name in the configuration file's parser
// (cmd/internal/app/file.go). Implementations are values without a clock or a random source:
// the caller draws the jitter, so the schedule stays a pure function.
type RetryStrategy interface {
	// Ceiling is the longest wait after the given failed attempt (1-based; below 1 counts as 1),
	// whatever the jitter.
	Ceiling(attempt int) time.Duration
	// Delay is the wait after the given failed attempt for a jitter in [0,1): at most Ceiling.
	Delay(attempt int, jitter float64) time.Duration
	// Tiers are the delay queues the waits of a cycle of maxAttempts attempts need: ascending,
	// distinct, with the Ceiling of each attempt 1 to maxAttempts-1 among them, so that a wait
	// rounded up to a tier is never held longer than its ceiling.
	Tiers(maxAttempts int) []time.Duration
	// Validate reports every problem of the strategy for a cycle of maxAttempts attempts.
	Validate(maxAttempts int) error
	// String describes the strategy, as `ledger config check` prints it.
	String() string
}

// Defaults of the retry policy.
const (
	DefaultRetryBase     = 30 * time.Second
	DefaultRetryCap      = 30 * time.Minute
	DefaultMaxAttempts   = 10
	DefaultRetryAfterMax = time.Hour
)

// Bounds every retry policy keeps, whatever its strategy: each distinct wait is a delay queue on
// RabbitMQ (a queue-level TTL, see docs/design.md, "RabbitMQ topology").
const (
	// MinRetryDelay is the shortest wait: a queue's TTL counts whole milliseconds, and a shorter
	// one would be a tier of 0 ms that returns the message at once.
	MinRetryDelay = time.Millisecond
	// MaxRetryDelay is the longest wait a delay tier holds: the x-message-ttl RabbitMQ documents
	// for a queue, 2^32-1 ms (about 49.7 days). A broker's own limit varies by version (3.10
	// takes up to ten years and refuses more with value_too_large); the documented one holds on
	// every broker, and a longer wait goes round the longest tier again.
	MaxRetryDelay = (1<<32 - 1) * time.Millisecond
	// MaxAttemptsLimit is the most attempts one cycle may have (LEDGER_MAX_ATTEMPTS, a channel's
	// max_attempts, a schedule's delays plus one): beyond it a delivery retries for months.
	MaxAttemptsLimit = 100
	// MaxRetryTiers is the most distinct waits a policy may give: each is a queue per channel.
	MaxRetryTiers = 32
)

// DefaultRetryStrategy is the strategy of a policy that names none: exponential with full
// jitter from DefaultRetryBase to DefaultRetryCap.
func DefaultRetryStrategy() RetryStrategy {
	return Exponential{Base: DefaultRetryBase, Cap: DefaultRetryCap}
}

// DefaultRetryPolicy returns the policy used when nothing is configured.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Strategy: DefaultRetryStrategy(), MaxAttempts: DefaultMaxAttempts, RetryAfterMax: DefaultRetryAfterMax}
}

// ScheduleOf returns the policy of explicit delays: a schedule of n delays allows n+1 attempts.
func ScheduleOf(delays []time.Duration, retryAfterMax time.Duration) RetryPolicy {
	return RetryPolicy{Strategy: Schedule(delays), MaxAttempts: len(delays) + 1, RetryAfterMax: retryAfterMax}
}

// strategy is the policy's strategy, the default when it names none.
func (p RetryPolicy) strategy() RetryStrategy {
	if p.Strategy == nil {
		return DefaultRetryStrategy()
	}
	return p.Strategy
}

// Ceiling is the largest delay after the given failed attempt (1-based).
func (p RetryPolicy) Ceiling(attempt int) time.Duration { return p.strategy().Ceiling(attempt) }

// NextAttemptAt is the retry schedule: the strategy's delay for the attempt (jitter is a number in
// [0,1) supplied by the caller, so the function stays pure), and a provider's Retry-After
// (bounded by RetryAfterMax) wins when it is longer.
func (p RetryPolicy) NextAttemptAt(attempt int, now time.Time, jitter float64, retryAfter time.Duration) time.Time {
	delay := p.strategy().Delay(attempt, jitter)
	if p.RetryAfterMax > 0 && retryAfter > p.RetryAfterMax {
		retryAfter = p.RetryAfterMax
	}
	if retryAfter > delay {
		delay = retryAfter
	}
	return now.Add(delay)
}

// Tiers are the delay queues that follow from the policy, ascending.
func (p RetryPolicy) Tiers() []time.Duration { return p.strategy().Tiers(p.MaxAttempts) }

// String describes the policy, as `ledger config check` prints it.
func (p RetryPolicy) String() string {
	return fmt.Sprintf("%s, %d attempts", p.strategy(), p.MaxAttempts)
}

// Validate reports every problem of the policy at once: the strategy's own, then the bounds
// every strategy keeps (attempts, the number of tiers, the shortest and longest wait).
func (p RetryPolicy) Validate() error {
	var problems []error
	attemptsOK := p.MaxAttempts >= 1 && p.MaxAttempts <= MaxAttemptsLimit
	if !attemptsOK {
		problems = append(problems, fmt.Errorf("max attempts %d: want 1 to %d", p.MaxAttempts, MaxAttemptsLimit))
	}
	if p.RetryAfterMax < 0 {
		problems = append(problems, fmt.Errorf("retry-after max %s is negative", p.RetryAfterMax))
	}
	s := p.strategy()
	if err := s.Validate(p.MaxAttempts); err != nil {
		problems = append(problems, err)
	} else if attemptsOK {
		problems = append(problems, tierBounds(s.Tiers(p.MaxAttempts))...)
	}
	return errors.Join(problems...)
}

// tierBounds refuses tiers that RabbitMQ cannot hold or that are too many queues.
func tierBounds(tiers []time.Duration) []error {
	if len(tiers) == 0 {
		return []error{errors.New("no delay tiers")}
	}
	var problems []error
	if len(tiers) > MaxRetryTiers {
		problems = append(problems, fmt.Errorf("%d distinct waits, each a delay queue of its own: at most %d", len(tiers), MaxRetryTiers))
	}
	if tiers[0] < MinRetryDelay {
		problems = append(problems, fmt.Errorf("the shortest wait %s is below %s: delay queues count whole milliseconds", tiers[0], MinRetryDelay))
	}
	if last := tiers[len(tiers)-1]; last > MaxRetryDelay {
		problems = append(problems, fmt.Errorf("the longest wait %s is beyond %s, the longest TTL RabbitMQ documents for a delay queue (2^32-1 ms)", last, MaxRetryDelay))
	}
	return problems
}

// Exponential waits a uniformly random time up to Base·2^(attempt-1), bounded by Cap (full
// jitter): the default, which spreads out the retries of deliveries that failed together.
type Exponential struct {
	// Base is the ceiling of the first retry delay; each further attempt doubles it.
	Base time.Duration
	// Cap bounds the delay ceiling.
	Cap time.Duration
}

// Ceiling is Base·2^(attempt-1), bounded by Cap.
func (e Exponential) Ceiling(attempt int) time.Duration {
	attempt = max(attempt, 1)
	d := float64(e.Base) * math.Pow(2, float64(attempt-1))
	// >=, not >: float64(math.MaxInt64) rounds up to 2^63, which time.Duration cannot hold, so a
	// product equal to the cap must not be converted back.
	if d >= float64(e.Cap) || math.IsInf(d, 0) {
		return e.Cap
	}
	return time.Duration(d)
}

// Delay is a uniformly random share (jitter) of the ceiling.
func (e Exponential) Delay(attempt int, jitter float64) time.Duration {
	return time.Duration(jitter * float64(e.Ceiling(attempt)))
}

// Tiers are Base·2^k up to and including Cap, whatever the attempts: a jittered delay rounds up
// to the ceiling of its attempt or below.
func (e Exponential) Tiers(int) []time.Duration {
	var tiers []time.Duration
	for d := e.Base; d > 0; d *= 2 {
		if d >= e.Cap {
			tiers = append(tiers, e.Cap)
			break
		}
		tiers = append(tiers, d)
		if d > math.MaxInt64/2 {
			// Doubling would overflow before reaching a cap this large: the cap is the next tier.
			tiers = append(tiers, e.Cap)
			break
		}
	}
	return tiers
}

// Validate needs 0 < Base <= Cap.
func (e Exponential) Validate(int) error {
	if e.Base <= 0 || e.Cap < e.Base {
		return fmt.Errorf("base %s and cap %s: need 0 < base <= cap", e.Base, e.Cap)
	}
	return nil
}

// String is "exponential from 30s to 30m, full jitter".
func (e Exponential) String() string {
	return fmt.Sprintf("exponential from %s to %s, full jitter", e.Base, e.Cap)
}

// Schedule waits its delays after attempt 1, 2, ..., as written (no jitter), its last delay for
// any attempt beyond them: for an operator who knows the receiver's rhythm. A schedule of n
// delays means n+1 attempts, then dead.
type Schedule []time.Duration

// Ceiling is the schedule's delay for the attempt, its last one beyond.
func (s Schedule) Ceiling(attempt int) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(max(attempt, 1), len(s))-1]
}

// Delay is the ceiling: a schedule is kept as written.
func (s Schedule) Delay(attempt int, _ float64) time.Duration { return s.Ceiling(attempt) }

// Tiers are the schedule's distinct delays.
func (s Schedule) Tiers(int) []time.Duration {
	tiers := slices.Clone([]time.Duration(s))
	slices.Sort(tiers)
	return slices.Compact(tiers)
}

// Validate needs positive delays, at most MaxAttemptsLimit-1 of them, and no more attempts than
// the delays allow.
func (s Schedule) Validate(maxAttempts int) error {
	var problems []error
	switch {
	case len(s) == 0:
		problems = append(problems, errors.New("a schedule needs at least one delay"))
	case len(s) > MaxAttemptsLimit-1:
		problems = append(problems, fmt.Errorf("a schedule of %d delays: at most %d (n delays are n+1 attempts, at most %d)", len(s), MaxAttemptsLimit-1, MaxAttemptsLimit))
	}
	for i, d := range s {
		if d <= 0 {
			problems = append(problems, fmt.Errorf("schedule[%d] %s is not positive", i, d))
		}
	}
	if maxAttempts > len(s)+1 {
		problems = append(problems, fmt.Errorf("max attempts %d exceeds the %d attempts a schedule of %d delays allows", maxAttempts, len(s)+1, len(s)))
	}
	return errors.Join(problems...)
}

// String is "schedule [1m0s 5m0s]".
func (s Schedule) String() string { return fmt.Sprintf("schedule %v", []time.Duration(s)) }

// Quadratic waits Base·attempt² after each failed attempt, as computed (no jitter): 1 s, 4 s,
// 9 s, ... from a base of 1 s, the ledger's first retry rule, a gentler climb than doubling.
// Cap, when set, bounds the wait.
type Quadratic struct {
	// Base is the wait after the first failed attempt.
	Base time.Duration
	// Cap bounds the wait; zero leaves it unbounded (the policy's bounds still apply).
	Cap time.Duration
}

// Ceiling is Base·attempt², bounded by Cap when set.
func (q Quadratic) Ceiling(attempt int) time.Duration {
	a := float64(max(attempt, 1))
	d := float64(q.Base) * a * a
	switch {
	case q.Cap > 0 && d >= float64(q.Cap):
		return q.Cap
	case d >= math.MaxInt64: // a Duration cannot hold it (see Exponential.Ceiling)
		return math.MaxInt64
	}
	return time.Duration(d)
}

// Delay is the ceiling: the squares are kept as computed.
func (q Quadratic) Delay(attempt int, _ float64) time.Duration { return q.Ceiling(attempt) }

// Tiers are the waits after attempts 1 to maxAttempts-1 (at least the first), distinct.
func (q Quadratic) Tiers(maxAttempts int) []time.Duration {
	var tiers []time.Duration
	for a := 1; a <= min(max(maxAttempts-1, 1), MaxAttemptsLimit); a++ {
		if c := q.Ceiling(a); len(tiers) == 0 || c > tiers[len(tiers)-1] {
			tiers = append(tiers, c)
		}
	}
	return tiers
}

// Validate needs a positive Base and a Cap of zero or at least Base.
func (q Quadratic) Validate(int) error {
	if q.Base <= 0 || (q.Cap != 0 && q.Cap < q.Base) {
		return fmt.Errorf("base %s and cap %s: need 0 < base, and base <= cap when a cap is set", q.Base, q.Cap)
	}
	return nil
}

// String is "quadratic from 1s (1s, 4s, 9s, ...)", with its cap when set.
func (q Quadratic) String() string {
	s := fmt.Sprintf("quadratic from %s (%s, %s, %s, ...)", q.Base, q.Ceiling(1), q.Ceiling(2), q.Ceiling(3))
	if q.Cap > 0 {
		s += " to " + q.Cap.String()
	}
	return s
}

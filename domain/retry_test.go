package domain

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// justBelowOne is the largest jitter in [0,1).
var justBelowOne = math.Nextafter(1, 0)

func TestCeilingDoublesFromBaseAndIsCapped(t *testing.T) {
	t.Parallel()

	p := RetryPolicy{Strategy: Exponential{Base: 30 * time.Second, Cap: 30 * time.Minute}, MaxAttempts: 10}
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{-5, 30 * time.Second}, // below the first attempt counts as the first
		{0, 30 * time.Second},
		{1, 30 * time.Second},
		{2, time.Minute},
		{3, 2 * time.Minute},
		{4, 4 * time.Minute},
		{5, 8 * time.Minute},
		{6, 16 * time.Minute},
		{7, 30 * time.Minute}, // 32m, capped
		{8, 30 * time.Minute},
		{10, 30 * time.Minute},
	}
	for _, tt := range tests {
		if got := p.Ceiling(tt.attempt); got != tt.want {
			t.Errorf("Ceiling(%d) = %v, want %v", tt.attempt, got, tt.want)
		}
	}
}

func TestCeilingHugeAttemptsDoNotOverflow(t *testing.T) {
	t.Parallel()

	strategies := []Exponential{
		{Base: DefaultRetryBase, Cap: DefaultRetryCap},
		{Base: 10 * time.Millisecond, Cap: 80 * time.Millisecond},
		{Base: time.Nanosecond, Cap: math.MaxInt64}, // a cap meaning "no cap"
		{Base: time.Hour, Cap: math.MaxInt64},
		{Base: math.MaxInt64 / 2, Cap: math.MaxInt64},
	}
	attempts := []int{64, 65, 100, 1024, 1 << 20, math.MaxInt32, math.MaxInt64}
	for _, e := range strategies {
		prev := time.Duration(0)
		for attempt := 1; attempt <= 70; attempt++ {
			got := e.Ceiling(attempt)
			if got <= 0 || got > e.Cap {
				t.Errorf("%v: Ceiling(%d) = %v, want in (0, %v]", e, attempt, got, e.Cap)
			}
			if got < prev {
				t.Errorf("%v: Ceiling(%d) = %v, below Ceiling(%d) = %v", e, attempt, got, attempt-1, prev)
			}
			prev = got
		}
		for _, attempt := range attempts {
			if got := e.Ceiling(attempt); got != e.Cap {
				t.Errorf("%v: Ceiling(%d) = %v, want the cap %v", e, attempt, got, e.Cap)
			}
			next := RetryPolicy{Strategy: e}.NextAttemptAt(attempt, testNow, justBelowOne, 0)
			if next.Before(testNow) {
				t.Errorf("%v: NextAttemptAt(%d) = %v, before now", e, attempt, next)
			}
		}
	}
}

func TestNextAttemptAtWithoutJitter(t *testing.T) {
	t.Parallel()

	p := RetryPolicy{Strategy: Exponential{Base: 30 * time.Second, Cap: 30 * time.Minute}, MaxAttempts: 10}
	for _, attempt := range []int{1, 2, 7, 50} {
		if got := p.NextAttemptAt(attempt, testNow, 0, 0); !got.Equal(testNow) {
			t.Errorf("NextAttemptAt(%d, jitter 0) = %v, want now %v", attempt, got, testNow)
		}
		if got, want := p.NextAttemptAt(attempt, testNow, 0, 90*time.Second), testNow.Add(90*time.Second); !got.Equal(want) {
			t.Errorf("NextAttemptAt(%d, jitter 0, retry-after 90s) = %v, want %v", attempt, got, want)
		}
	}
}

func TestNextAttemptAtJitterStaysBelowCeiling(t *testing.T) {
	t.Parallel()

	policies := []RetryPolicy{
		{Strategy: Exponential{Base: 30 * time.Second, Cap: 30 * time.Minute}},
		{Strategy: Exponential{Base: 10 * time.Millisecond, Cap: 80 * time.Millisecond}},
		{Strategy: Exponential{Base: time.Nanosecond * 3, Cap: time.Hour}},
	}
	for _, p := range policies {
		for attempt := 1; attempt <= 12; attempt++ {
			ceiling := testNow.Add(p.Ceiling(attempt))
			for _, jitter := range []float64{0.999, 0.999999, justBelowOne} {
				got := p.NextAttemptAt(attempt, testNow, jitter, 0)
				if !got.Before(ceiling) {
					t.Errorf("policy %+v: NextAttemptAt(%d, jitter %v) = %v, not before now+ceiling %v",
						p, attempt, jitter, got, ceiling)
				}
				if got.Before(testNow) {
					t.Errorf("policy %+v: NextAttemptAt(%d, jitter %v) = %v, before now", p, attempt, jitter, got)
				}
			}
			// Half the jitter is half the ceiling: the delay scales with jitter, it is not fixed.
			half := p.NextAttemptAt(attempt, testNow, 0.5, 0).Sub(testNow)
			if want := p.Ceiling(attempt) / 2; half < want-1 || half > want+1 {
				t.Errorf("policy %+v: NextAttemptAt(%d, jitter 0.5) is now+%v, want about %v", p, attempt, half, want)
			}
		}
	}
}

func TestNextAttemptAtRetryAfterOnlyWhenLonger(t *testing.T) {
	t.Parallel()

	p := RetryPolicy{Strategy: Exponential{Base: 30 * time.Second, Cap: 30 * time.Minute}}
	// Attempt 3: ceiling 2m; jitter 0.5 gives a delay of 1m.
	if got, want := p.NextAttemptAt(3, testNow, 0.5, 5*time.Minute), testNow.Add(5*time.Minute); !got.Equal(want) {
		t.Errorf("longer Retry-After: %v, want %v", got, want)
	}
	if got, want := p.NextAttemptAt(3, testNow, 0.5, 10*time.Second), testNow.Add(time.Minute); !got.Equal(want) {
		t.Errorf("shorter Retry-After: %v, want %v", got, want)
	}
	// A Retry-After beyond the cap is still honoured: the provider asked for it.
	if got, want := p.NextAttemptAt(3, testNow, 0.5, 2*time.Hour), testNow.Add(2*time.Hour); !got.Equal(want) {
		t.Errorf("Retry-After beyond the cap: %v, want %v", got, want)
	}
}

func TestTiers(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		policy RetryPolicy
		want   []time.Duration
	}{
		{
			"default",
			RetryPolicy{Strategy: Exponential{Base: 30 * time.Second, Cap: 30 * time.Minute}},
			[]time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute,
				8 * time.Minute, 16 * time.Minute, 30 * time.Minute},
		},
		{
			"cap on a power of two",
			RetryPolicy{Strategy: Exponential{Base: 10 * time.Millisecond, Cap: 80 * time.Millisecond}},
			[]time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond},
		},
		{
			"cap equals base",
			RetryPolicy{Strategy: Exponential{Base: time.Second, Cap: time.Second}},
			[]time.Duration{time.Second},
		},
	}
	for _, tt := range tests {
		if got := tt.policy.Tiers(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: Tiers() = %v, want %v", tt.name, got, tt.want)
		}
	}
	if got := DefaultRetryPolicy().Tiers(); !slices.Equal(got, tests[0].want) {
		t.Errorf("DefaultRetryPolicy().Tiers() = %v, want %v", got, tests[0].want)
	}
}

// TestTiersCoverEveryCeiling checks the promise the broker topology relies on: whatever the
// attempt, its ceiling rounds up to a tier, and the largest tier is the cap.
func TestTiersCoverEveryCeiling(t *testing.T) {
	t.Parallel()

	strategies := []Exponential{
		{Base: DefaultRetryBase, Cap: DefaultRetryCap},
		{Base: 10 * time.Millisecond, Cap: 80 * time.Millisecond},
		{Base: 7 * time.Second, Cap: 5 * time.Minute},
		{Base: time.Nanosecond, Cap: math.MaxInt64}, // doubling would overflow before the cap
	}
	for _, e := range strategies {
		tiers := e.Tiers(DefaultMaxAttempts)
		if len(tiers) == 0 || len(tiers) > 64 {
			t.Errorf("%v: %d tiers", e, len(tiers))
			continue
		}
		if tiers[len(tiers)-1] != e.Cap {
			t.Errorf("%v: largest tier %v, want the cap %v", e, tiers[len(tiers)-1], e.Cap)
		}
		for i, d := range tiers {
			if d <= 0 || (i > 0 && d <= tiers[i-1]) {
				t.Errorf("%v: tiers %v are not positive and increasing", e, tiers)
				break
			}
		}
		for _, attempt := range []int{1, 2, 3, 10, 63, 64, 1000, math.MaxInt64} {
			c := e.Ceiling(attempt)
			if _, found := slices.BinarySearch(tiers, c); !found {
				t.Errorf("%v: Ceiling(%d) = %v is not a tier of %v", e, attempt, c, tiers)
			}
		}
	}
}

func TestRetryAfterIsBoundedByRetryAfterMax(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := RetryPolicy{Strategy: Exponential{Base: time.Second, Cap: time.Minute}, MaxAttempts: 5, RetryAfterMax: time.Hour}
	if got := p.NextAttemptAt(1, now, 0, 3*time.Hour); !got.Equal(now.Add(time.Hour)) {
		t.Fatalf("Retry-After 3h with max 1h: next at %s, want now+1h", got.Sub(now))
	}
	if got := p.NextAttemptAt(1, now, 0, 30*time.Minute); !got.Equal(now.Add(30 * time.Minute)) {
		t.Fatalf("Retry-After 30m: next at %s, want now+30m", got.Sub(now))
	}
}

// TestExplicitSchedule: a schedule's delays are used as written (no jitter), its tiers are its
// distinct delays, and n delays mean n+1 attempts, then dead.
func TestExplicitSchedule(t *testing.T) {
	t.Parallel()
	p := ScheduleOf([]time.Duration{20 * time.Millisecond, 40 * time.Millisecond}, time.Hour)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for attempt, want := range map[int]time.Duration{1: 20 * time.Millisecond, 2: 40 * time.Millisecond, 3: 40 * time.Millisecond} {
		for _, jitter := range []float64{0, 0.5, 0.99} {
			if got := p.NextAttemptAt(attempt, testNow, jitter, 0).Sub(testNow); got != want {
				t.Errorf("attempt %d, jitter %v: delay %s, want %s", attempt, jitter, got, want)
			}
		}
	}
	if got := p.NextAttemptAt(1, testNow, 0, time.Second).Sub(testNow); got != time.Second {
		t.Errorf("a longer Retry-After: delay %s, want 1s", got)
	}
	if got := (RetryPolicy{Strategy: Schedule{time.Minute, time.Second, time.Minute}}).Tiers(); !slices.Equal(got, []time.Duration{time.Second, time.Minute}) {
		t.Errorf("tiers %v, want [1s 1m]", got)
	}
	spec := validSpec()
	spec.MaxAttempts = p.MaxAttempts
	s := processing(t, spec)
	for i := 1; i <= 2; i++ {
		s.add(t)(s.d.RecordOutcome(s.d.Attempt(), Outcome{Kind: OutcomeTransient}, p, testNow, 0))
		if s.d.State() != StateRetrying {
			t.Fatalf("after failure %d: %s, want retrying", i, s.d.State())
		}
		s.add(t)(s.d.Queue(testNow))
		s.add(t)(s.d.StartAttempt("webhook", testNow))
	}
	s.add(t)(s.d.RecordOutcome(s.d.Attempt(), Outcome{Kind: OutcomeTransient}, p, testNow, 0))
	if s.d.State() != StateDead || s.d.Attempt() != 3 {
		t.Fatalf("after the third failure: %s at attempt %d, want dead at 3", s.d.State(), s.d.Attempt())
	}
	for _, bad := range []RetryPolicy{{Strategy: Schedule{0}, MaxAttempts: 2}, {Strategy: Schedule{}, MaxAttempts: 1},
		{Strategy: Schedule{time.Second}, MaxAttempts: 3}, {Strategy: Exponential{Base: time.Second, Cap: time.Millisecond}, MaxAttempts: 1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v: Validate accepted it", bad)
		}
	}
}

// TestQuadraticStrategy: seed 001's rule as a named strategy: 1 s, 4 s, 9 s from a base of 1 s,
// kept as computed whatever the jitter, and at 4 attempts the fourth failure is dead.
func TestQuadraticStrategy(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Strategy: Quadratic{Base: time.Second}, MaxAttempts: 4}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{time.Second, 4 * time.Second, 9 * time.Second}
	if got := p.Tiers(); !slices.Equal(got, want) {
		t.Errorf("tiers %v, want %v", got, want)
	}
	spec := validSpec()
	spec.MaxAttempts = p.MaxAttempts
	s := processing(t, spec)
	for i, delay := range want {
		now := testNow.Add(time.Duration(i) * time.Hour)
		s.add(t)(s.d.RecordOutcome(s.d.Attempt(), Outcome{Kind: OutcomeTransient}, p, now, []float64{0, 0.5, justBelowOne}[i]))
		if s.d.State() != StateRetrying || s.d.NextAttemptAt() == nil || s.d.NextAttemptAt().Sub(now) != delay {
			t.Fatalf("after failure %d: %s, next attempt %v, want retrying after %s", i+1, s.d.State(), s.d.NextAttemptAt(), delay)
		}
		s.add(t)(s.d.Queue(now))
		s.add(t)(s.d.StartAttempt("webhook", now))
	}
	s.add(t)(s.d.RecordOutcome(s.d.Attempt(), Outcome{Kind: OutcomeTransient}, p, testNow, 0))
	if s.d.State() != StateDead || s.d.Attempt() != 4 {
		t.Fatalf("after the fourth failure: %s at attempt %d, want dead at 4", s.d.State(), s.d.Attempt())
	}
	capped := Quadratic{Base: time.Second, Cap: 5 * time.Second}
	if got := capped.Tiers(10); !slices.Equal(got, []time.Duration{time.Second, 4 * time.Second, 5 * time.Second}) {
		t.Errorf("capped at 5s: tiers %v", got)
	}
}

// TestEveryStrategyKeepsTheTierPromise: for each strategy, a delay is never above its ceiling,
// and each ceiling of a cycle is a tier, so a delay rounded up to a tier is never held longer.
func TestEveryStrategyKeepsTheTierPromise(t *testing.T) {
	t.Parallel()
	policies := []RetryPolicy{
		DefaultRetryPolicy(),
		{Strategy: Exponential{Base: 7 * time.Second, Cap: 5 * time.Minute}, MaxAttempts: 20},
		{Strategy: Schedule{time.Minute, time.Second, time.Minute, 3 * time.Hour}, MaxAttempts: 5},
		{Strategy: Quadratic{Base: time.Second}, MaxAttempts: 4},
		{Strategy: Quadratic{Base: 250 * time.Millisecond, Cap: time.Minute}, MaxAttempts: 30},
	}
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			t.Errorf("%v: %v", p, err)
		}
		tiers := p.Tiers()
		for attempt := 1; attempt < p.MaxAttempts; attempt++ {
			c := p.Ceiling(attempt)
			if _, found := slices.BinarySearch(tiers, c); !found {
				t.Errorf("%v: ceiling %s of attempt %d is not a tier of %v", p, c, attempt, tiers)
			}
			for _, jitter := range []float64{0, 0.5, justBelowOne} {
				if d := p.NextAttemptAt(attempt, testNow, jitter, 0).Sub(testNow); d < 0 || d > c {
					t.Errorf("%v: attempt %d, jitter %v: delay %s outside [0, %s]", p, attempt, jitter, d, c)
				}
			}
		}
	}
}

// TestRetryPolicyBounds: whatever the strategy, a policy that would make RabbitMQ refuse a delay
// queue (a TTL beyond 2^32-1 ms), a 0 ms tier, a queue per delay by the hundred or a cycle of
// millions of attempts is refused.
func TestRetryPolicyBounds(t *testing.T) {
	t.Parallel()
	many := make(Schedule, MaxAttemptsLimit)
	distinct := make(Schedule, MaxRetryTiers+1)
	for i := range many {
		many[i] = time.Second
	}
	for i := range distinct {
		distinct[i] = time.Duration(i+1) * time.Second
	}
	for _, tt := range []struct {
		policy RetryPolicy
		want   string
	}{
		{RetryPolicy{Strategy: Exponential{Base: time.Nanosecond, Cap: 2000000 * time.Hour}, MaxAttempts: math.MaxInt64}, "max attempts 9223372036854775807: want 1 to 100"},
		{RetryPolicy{Strategy: Exponential{Base: time.Second, Cap: 2000000 * time.Hour}, MaxAttempts: 10}, "the longest wait 2000000h0m0s is beyond 1193h2m47.295s"},
		{RetryPolicy{Strategy: Exponential{Base: time.Microsecond, Cap: time.Second}, MaxAttempts: 10}, "the shortest wait 1µs is below 1ms"},
		{RetryPolicy{Strategy: Exponential{Base: time.Millisecond, Cap: MaxRetryDelay}, MaxAttempts: 10}, "33 distinct waits"},
		{RetryPolicy{Strategy: Quadratic{Base: time.Hour}, MaxAttempts: 100}, "99 distinct waits"},
		{RetryPolicy{Strategy: Quadratic{Base: 24 * time.Hour}, MaxAttempts: 9}, "the longest wait 1536h0m0s is beyond"},
		{RetryPolicy{Strategy: many, MaxAttempts: MaxAttemptsLimit + 1}, "a schedule of 100 delays: at most 99"},
		{RetryPolicy{Strategy: distinct, MaxAttempts: len(distinct) + 1}, "33 distinct waits"},
		{RetryPolicy{Strategy: Schedule{MaxRetryDelay + time.Millisecond}, MaxAttempts: 2}, "the longest wait"},
	} {
		if err := tt.policy.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: Validate() = %v, want it to say %q", tt.policy, err, tt.want)
		}
	}
	for _, ok := range []RetryPolicy{
		{Strategy: Schedule{MaxRetryDelay, time.Millisecond}, MaxAttempts: 3},
		{Strategy: Exponential{Base: 2 * time.Millisecond, Cap: MaxRetryDelay}, MaxAttempts: MaxAttemptsLimit},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
}

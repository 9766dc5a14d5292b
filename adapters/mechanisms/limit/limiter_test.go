package limit

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testProvider is the provider the tests limit; any name would do.
const testProvider = "webhook"

// fakeClock is the injected clock: tests move time by hand instead of sleeping.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testBundle is what setup gives each test.
type testBundle struct {
	limiter *Limiter
	clock   *fakeClock
}

func setup(t *testing.T, cfg Config) *testBundle {
	t.Helper()
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	l, err := New(cfg, clock.now)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &testBundle{limiter: l, clock: clock}
}

// mustAcquire fails the test unless the call is allowed, and returns its release.
func (b *testBundle) mustAcquire(t *testing.T, provider, host string) func() {
	t.Helper()
	release, ok, retryAfter, reason := b.limiter.Acquire(provider, host)
	if !ok {
		t.Fatalf("Acquire(%q, %q) refused (%s, retry after %s), want allowed", provider, host, reason, retryAfter)
	}
	if release == nil {
		t.Fatalf("Acquire(%q, %q) allowed with a nil release", provider, host)
	}
	return release
}

// mustRefuse fails the test unless the call is refused, and returns the refusal.
func (b *testBundle) mustRefuse(t *testing.T, provider, host string) (time.Duration, string) {
	t.Helper()
	release, ok, retryAfter, reason := b.limiter.Acquire(provider, host)
	if ok {
		release()
		t.Fatalf("Acquire(%q, %q) allowed, want refused", provider, host)
	}
	if release != nil {
		t.Errorf("Acquire(%q, %q) refused with a non-nil release", provider, host)
	}
	if retryAfter <= 0 {
		t.Errorf("Acquire(%q, %q) refused with retryAfter %s, want > 0", provider, host, retryAfter)
	}
	return retryAfter, reason
}

func TestAcquireHostConcurrencyCap(t *testing.T) {
	t.Parallel()
	b := setup(t, DefaultConfig())

	releases := make([]func(), 0, DefaultHostConcurrency)
	for range DefaultHostConcurrency {
		releases = append(releases, b.mustAcquire(t, testProvider, "example.com"))
	}
	retryAfter, reason := b.mustRefuse(t, testProvider, "example.com")
	if retryAfter != ConcurrencyRetryAfter {
		t.Errorf("retryAfter = %s, want %s", retryAfter, ConcurrencyRetryAfter)
	}
	if want := fmt.Sprintf("host example.com concurrency %d", DefaultHostConcurrency); reason != want {
		t.Errorf("reason = %q, want %q", reason, want)
	}

	releases[0]()
	b.mustAcquire(t, testProvider, "example.com")
	b.mustRefuse(t, testProvider, "example.com")
}

func TestAcquireProviderConcurrencyCap(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Providers: map[string]Rule{"webhook": {Concurrency: 3}}})

	first := b.mustAcquire(t, "webhook", "a.example")
	b.mustAcquire(t, "webhook", "b.example")
	b.mustAcquire(t, "webhook", "c.example")
	retryAfter, reason := b.mustRefuse(t, "webhook", "d.example")
	if retryAfter != ConcurrencyRetryAfter {
		t.Errorf("retryAfter = %s, want %s", retryAfter, ConcurrencyRetryAfter)
	}
	if want := "provider webhook concurrency 3"; reason != want {
		t.Errorf("reason = %q, want %q", reason, want)
	}
	if got := b.limiter.InFlight("webhook"); got != 3 {
		t.Errorf("InFlight(webhook) = %d, want 3", got)
	}

	// Another provider has its own count, and an unconfigured one is unlimited but counted.
	b.mustAcquire(t, "sms", "d.example")
	if got := b.limiter.InFlight("sms"); got != 1 {
		t.Errorf("InFlight(sms) = %d, want 1", got)
	}
	if got := b.limiter.InFlight("never-seen"); got != 0 {
		t.Errorf("InFlight(never-seen) = %d, want 0", got)
	}

	first()
	if got := b.limiter.InFlight("webhook"); got != 2 {
		t.Errorf("InFlight(webhook) after release = %d, want 2", got)
	}
	b.mustAcquire(t, "webhook", "d.example")
}

func TestAcquireTokenBucket(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{DefaultHost: Rule{Rate: 5}}) // burst defaults to 5

	for range 5 {
		b.mustAcquire(t, testProvider, "example.com")() // released at once: rate, not concurrency
	}
	retryAfter, reason := b.mustRefuse(t, testProvider, "example.com")
	if want := 200 * time.Millisecond; absDiff(retryAfter, want) > time.Millisecond {
		t.Errorf("retryAfter = %s, want about %s (1/rate)", retryAfter, want)
	}
	if want := "host example.com rate 5/s"; reason != want {
		t.Errorf("reason = %q, want %q", reason, want)
	}

	b.clock.advance(199 * time.Millisecond)
	retryAfter, _ = b.mustRefuse(t, testProvider, "example.com")
	if absDiff(retryAfter, time.Millisecond) > 100*time.Microsecond {
		t.Errorf("retryAfter 199ms later = %s, want about 1ms", retryAfter)
	}
	b.clock.advance(time.Millisecond)
	b.mustAcquire(t, testProvider, "example.com")
	b.mustRefuse(t, testProvider, "example.com")
}

func TestAcquireProviderRate(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Providers: map[string]Rule{"webhook": {Rate: 0.5, Burst: 1}}})

	b.mustAcquire(t, "webhook", "a.example")
	retryAfter, reason := b.mustRefuse(t, "webhook", "b.example")
	if want := 2 * time.Second; absDiff(retryAfter, want) > time.Millisecond {
		t.Errorf("retryAfter = %s, want about %s", retryAfter, want)
	}
	if want := "provider webhook rate 0.5/s"; reason != want {
		t.Errorf("reason = %q, want %q", reason, want)
	}
}

// TestAcquireRefusalTakesNothing checks that a refusal leaves every slot and every token where
// it was, whichever of the two rules refuses.
func TestAcquireRefusalTakesNothing(t *testing.T) {
	t.Parallel()

	t.Run("host concurrency refuses after provider would grant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{
			Providers:   map[string]Rule{"webhook": {Concurrency: 2}},
			DefaultHost: Rule{Concurrency: 1},
		})
		b.mustAcquire(t, "webhook", "a.example")
		for range 10 {
			b.mustRefuse(t, "webhook", "a.example")
		}
		if got := b.limiter.InFlight("webhook"); got != 1 {
			t.Fatalf("InFlight(webhook) after host refusals = %d, want 1", got)
		}
		b.mustAcquire(t, "webhook", "b.example")
		_, reason := b.mustRefuse(t, "webhook", "c.example")
		if want := "provider webhook concurrency 2"; reason != want {
			t.Errorf("reason = %q, want %q", reason, want)
		}
	})

	t.Run("host bucket empty keeps the provider token", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{
			Providers:   map[string]Rule{"webhook": {Rate: 1, Burst: 2}},
			DefaultHost: Rule{Rate: 1, Burst: 1},
		})
		b.mustAcquire(t, "webhook", "h.example") // provider 1 token left, host none
		_, reason := b.mustRefuse(t, "webhook", "h.example")
		if want := "host h.example rate 1/s"; reason != want {
			t.Errorf("reason = %q, want %q", reason, want)
		}
		b.mustAcquire(t, "webhook", "other.example") // the provider's last token
		_, reason = b.mustRefuse(t, "webhook", "third.example")
		if want := "provider webhook rate 1/s"; reason != want {
			t.Errorf("reason = %q, want %q", reason, want)
		}
	})

	t.Run("provider bucket empty keeps the host token", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{
			Providers:   map[string]Rule{"webhook": {Rate: 1, Burst: 1}},
			DefaultHost: Rule{Rate: 1, Burst: 1},
		})
		b.mustAcquire(t, "webhook", "x.example") // provider empty
		_, reason := b.mustRefuse(t, "webhook", "h.example")
		if want := "provider webhook rate 1/s"; reason != want {
			t.Errorf("reason = %q, want %q", reason, want)
		}
		b.mustAcquire(t, "sms", "h.example") // h's only token
		_, reason = b.mustRefuse(t, "sms", "h.example")
		if want := "host h.example rate 1/s"; reason != want {
			t.Errorf("reason = %q, want %q", reason, want)
		}
	})

	t.Run("repeated refusals do not push the wait back", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{DefaultHost: Rule{Rate: 10, Burst: 1}})
		b.mustAcquire(t, testProvider, "h.example")
		for range 100 {
			retryAfter, _ := b.mustRefuse(t, testProvider, "h.example")
			if absDiff(retryAfter, 100*time.Millisecond) > time.Millisecond {
				t.Fatalf("retryAfter = %s, want about 100ms: refusals are queueing tokens", retryAfter)
			}
		}
		b.clock.advance(100 * time.Millisecond)
		b.mustAcquire(t, testProvider, "h.example")
	})

	t.Run("both buckets empty reports the longer wait", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Config{
			Providers:   map[string]Rule{"webhook": {Rate: 4, Burst: 1}},
			DefaultHost: Rule{Rate: 1, Burst: 1},
		})
		b.mustAcquire(t, "webhook", "h.example")
		retryAfter, reason := b.mustRefuse(t, "webhook", "h.example")
		if absDiff(retryAfter, time.Second) > time.Millisecond {
			t.Errorf("retryAfter = %s, want about 1s (the host's wait)", retryAfter)
		}
		if want := "host h.example rate 1/s"; reason != want {
			t.Errorf("reason = %q, want %q", reason, want)
		}
		b.clock.advance(time.Second)
		b.mustAcquire(t, "webhook", "h.example")
	})
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{
		Providers:   map[string]Rule{"webhook": {Concurrency: 5}},
		DefaultHost: Rule{Concurrency: 1},
	})

	release := b.mustAcquire(t, "webhook", "h.example")
	release()
	release()
	if got := b.limiter.InFlight("webhook"); got != 0 {
		t.Fatalf("InFlight after a double release = %d, want 0", got)
	}
	// Had the second release counted, the host would now admit two calls.
	b.mustAcquire(t, "webhook", "h.example")
	b.mustRefuse(t, "webhook", "h.example")
}

func TestAcquireHostIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, DefaultConfig())

	for range DefaultHostConcurrency {
		b.mustAcquire(t, testProvider, "slow.example") // held: the host never answers
	}
	b.mustRefuse(t, testProvider, "slow.example")

	held := make([]func(), 0, DefaultHostConcurrency)
	for range DefaultHostConcurrency {
		held = append(held, b.mustAcquire(t, testProvider, "fast.example"))
	}
	b.mustRefuse(t, testProvider, "fast.example")
	for _, release := range held {
		release()
	}
	for range 100 {
		b.mustAcquire(t, testProvider, "fast.example")()
	}
	if got, want := b.limiter.InFlight(testProvider), DefaultHostConcurrency; got != want {
		t.Errorf("InFlight = %d, want %d (the slow host's calls)", got, want)
	}
}

func TestAcquireHostOverrides(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{
		DefaultHost: Rule{Concurrency: 1},
		Hosts: map[string]Rule{
			"Big.Example": {Concurrency: 3}, // keys are matched in lowercase
			"internal":    {},               // exempt
		},
	})

	for range 3 {
		b.mustAcquire(t, testProvider, "big.example")
	}
	_, reason := b.mustRefuse(t, testProvider, "big.example")
	if want := "host big.example concurrency 3"; reason != want {
		t.Errorf("reason = %q, want %q", reason, want)
	}
	for range 50 {
		b.mustAcquire(t, testProvider, "internal")
	}
	// No host: the provider rule alone applies, and the default host rule does not.
	for range 50 {
		b.mustAcquire(t, testProvider, "")
	}
	b.mustAcquire(t, testProvider, "other.example")
	b.mustRefuse(t, testProvider, "other.example")
}

// TestAcquireConcurrentNeverExceedsCaps hammers the limiter from many goroutines (run it with
// -race) and checks the caps with counters kept outside the limiter.
func TestAcquireConcurrentNeverExceedsCaps(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprintf("slot wait %s", wait), func(t *testing.T) {
			t.Parallel()
			testConcurrentCaps(t, wait)
		})
	}
}

// testConcurrentCaps hammers one limiter from many goroutines; with a slot wait, slots are also
// handed from ending calls to waiters, and given up by waiters whose wait ended.
func testConcurrentCaps(t *testing.T, wait time.Duration) {
	const (
		providerCap = 6
		hostCap     = 4
		goroutines  = 32
		iterations  = 500
	)
	hosts := []string{"a.example", "b.example", "c.example"}
	b := setup(t, Config{
		Providers:   map[string]Rule{"webhook": {Concurrency: providerCap}},
		DefaultHost: Rule{Concurrency: hostCap},
		SlotWait:    wait,
	})

	var (
		providerNow, providerMax atomic.Int64
		hostNow, hostMax         [3]atomic.Int64
		granted, refused         atomic.Int64
		wg                       sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := range iterations {
				h := (g + i) % len(hosts)
				release, ok, _, _ := b.limiter.Acquire("webhook", hosts[h])
				if !ok {
					refused.Add(1)
					continue
				}
				granted.Add(1)
				storeMax(&providerMax, providerNow.Add(1))
				storeMax(&hostMax[h], hostNow[h].Add(1))
				runtime.Gosched() // let others in while the "call" is in flight
				hostNow[h].Add(-1)
				providerNow.Add(-1)
				release()
			}
		})
	}
	wg.Wait()

	if got := providerMax.Load(); got > providerCap {
		t.Errorf("provider calls in flight reached %d, cap %d", got, providerCap)
	}
	for i, h := range hosts {
		if got := hostMax[i].Load(); got > hostCap {
			t.Errorf("host %s calls in flight reached %d, cap %d", h, got, hostCap)
		}
	}
	if granted.Load() == 0 {
		t.Error("no call was granted")
	}
	if got := b.limiter.InFlight("webhook"); got != 0 {
		t.Errorf("InFlight after every release = %d, want 0", got)
	}
	t.Logf("granted %d, refused %d, max in flight %d", granted.Load(), refused.Load(), providerMax.Load())
}

func storeMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

func TestLimiterEvictsIdleHosts(t *testing.T) {
	t.Parallel()
	const minSweep = 16
	b := setup(t, Config{
		DefaultHost: Rule{Concurrency: 1},
		Hosts:       map[string]Rule{"drained.example": {Rate: 1, Burst: 1}},
	})
	b.limiter.mu.Lock()
	b.limiter.minSweep, b.limiter.sweepAt = minSweep, minSweep
	b.limiter.mu.Unlock()

	b.mustAcquire(t, testProvider, "busy.example")      // held: must survive sweeps
	b.mustAcquire(t, testProvider, "drained.example")() // bucket empty: must survive sweeps
	for i := range 1000 {
		b.mustAcquire(t, testProvider, fmt.Sprintf("h%d.example", i))()
	}

	b.limiter.mu.Lock()
	size := len(b.limiter.hosts)
	b.limiter.mu.Unlock()
	if size > minSweep {
		t.Errorf("host entries after 1000 idle hosts = %d, want at most %d", size, minSweep)
	}
	// Evicting either survivor would have handed it a fresh slot or a full bucket.
	_, reason := b.mustRefuse(t, testProvider, "busy.example")
	if want := "host busy.example concurrency 1"; reason != want {
		t.Errorf("busy host: reason = %q, want %q", reason, want)
	}
	_, reason = b.mustRefuse(t, testProvider, "drained.example")
	if want := "host drained.example rate 1/s"; reason != want {
		t.Errorf("drained host: reason = %q, want %q", reason, want)
	}
}

func TestLimiterSweepThresholdGrowsWithBusyHosts(t *testing.T) {
	t.Parallel()
	const minSweep = 4
	b := setup(t, Config{DefaultHost: Rule{Concurrency: 1}})
	b.limiter.mu.Lock()
	b.limiter.minSweep, b.limiter.sweepAt = minSweep, minSweep
	b.limiter.mu.Unlock()

	// Every host stays busy, so no sweep can free anything; the threshold must grow with the map
	// or every new host would pay for a full sweep.
	const busy = 100
	for i := range busy {
		b.mustAcquire(t, testProvider, fmt.Sprintf("h%d.example", i))
	}
	b.limiter.mu.Lock()
	size, sweepAt := len(b.limiter.hosts), b.limiter.sweepAt
	b.limiter.mu.Unlock()
	if size != busy {
		t.Fatalf("host entries = %d, want %d (busy hosts must not be evicted)", size, busy)
	}
	if sweepAt <= size {
		t.Errorf("next sweep at %d entries, want above the %d busy ones", sweepAt, size)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()

	if _, err := New(Config{DefaultHost: Rule{Concurrency: -1}}, nil); err == nil {
		t.Error("New accepted a negative concurrency")
	}
	l, err := New(DefaultConfig(), nil) // nil clock means time.Now
	if err != nil {
		t.Fatalf("New(DefaultConfig()): %v", err)
	}
	release, ok, _, reason := l.Acquire(testProvider, "example.com")
	if !ok {
		t.Fatalf("Acquire with the real clock refused: %s", reason)
	}
	release()
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}

// TestProviderDestinationRules: a provider with its own destination rule (a bot's one message a
// second per chat) limits each of its destinations on its own entry, leaves other providers'
// calls to the same destination to theirs, and an operator's host rule still wins.
func TestProviderDestinationRules(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{
		DefaultHost:  Rule{Concurrency: 1},
		Destinations: map[string]Rule{"bot": {Rate: 1, Burst: 1}},
		Hosts:        map[string]Rule{"vip": {Rate: 10, Burst: 2}},
	})
	b.mustAcquire(t, "bot", "chat-1")()
	_, reason := b.mustRefuse(t, "bot", "chat-1")
	if want := "provider bot destination chat-1 rate 1/s"; reason != want {
		t.Errorf("reason = %q, want %q", reason, want)
	}
	b.mustAcquire(t, "bot", "chat-2")() // another chat has its own bucket
	// The same destination of another provider follows the default host rule, on its own entry.
	held := b.mustAcquire(t, "webhook", "chat-1")
	b.mustRefuse(t, "webhook", "chat-1")
	held()
	// The operator's rule for a destination wins over the provider's.
	b.mustAcquire(t, "bot", "vip")()
	b.mustAcquire(t, "bot", "vip")()
	b.mustRefuse(t, "bot", "vip")
	b.clock.advance(time.Second)
	b.mustAcquire(t, "bot", "chat-1")()
}

// TestAcquireWaitsForASlot: a full concurrency cap is waited on for SlotWait. A call that ends
// within the wait hands its slot to the waiter; when none ends, the refusal comes after the wait
// and not before, and a rate limit is never waited on.
func TestAcquireWaitsForASlot(t *testing.T) {
	t.Parallel()
	const wait = 300 * time.Millisecond
	b := setup(t, Config{DefaultHost: Rule{Concurrency: 1}, SlotWait: wait})
	release := b.mustAcquire(t, testProvider, "example.com")
	time.AfterFunc(20*time.Millisecond, release)
	start := time.Now()
	b.mustAcquire(t, testProvider, "example.com")
	if waited := time.Since(start); waited >= wait {
		t.Errorf("the freed slot was taken after %s, want before the wait of %s ended", waited, wait)
	}

	start = time.Now()
	b.mustRefuse(t, testProvider, "example.com")
	if waited := time.Since(start); waited < wait {
		t.Errorf("refused after %s, want after the slot wait of %s", waited, wait)
	}

	rated := setup(t, Config{DefaultHost: Rule{Rate: 1, Burst: 1}, SlotWait: time.Hour})
	rated.mustAcquire(t, testProvider, "example.com")
	refused := make(chan bool, 1)
	go func() {
		_, ok, _, _ := rated.limiter.Acquire(testProvider, "example.com")
		refused <- !ok
	}()
	select {
	case r := <-refused:
		if !r {
			t.Error("a second call within the rate's second was allowed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire waited for a rate limit's token")
	}
}

// TestSlotWaitNegative: a negative wait is a configuration error.
func TestSlotWaitNegative(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{SlotWait: -time.Second}, nil); err == nil {
		t.Fatal("New accepted a negative slot wait")
	}
}

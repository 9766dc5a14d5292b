package fairshare

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"testing"
	"time"
)

// testTimeout bounds every wait of a test and each test's context, so that a scheduling bug
// fails the test instead of hanging the suite. It is far above what any test needs, even under
// -race on a loaded machine.
const testTimeout = 30 * time.Second

// setup builds a scheduler and a context that ends with the test.
func setup(t *testing.T, cfg Config) (*Scheduler, context.Context) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return s, ctx
}

// mustAcquire takes a slot that must be free now: the scheduler grants synchronously, so an
// Acquire that blocks here is a bug, reported after a short wait rather than hanging.
func mustAcquire(t *testing.T, s *Scheduler, c Class) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	release, err := s.Acquire(ctx, c)
	if err != nil {
		t.Fatalf("Acquire(%s) with a slot expected free: %v (in flight %v)", c, err, s.InFlight())
	}
	return release
}

// pending is an Acquire running in its own goroutine.
type pending struct {
	class   Class
	done    chan struct{}
	release func()
	err     error
}

// acquireAsync starts an Acquire and waits until it is queued (or has returned), so that tests
// control the order in which waiters arrive.
func acquireAsync(t *testing.T, ctx context.Context, s *Scheduler, c Class) *pending {
	t.Helper()
	before := s.Waiting()[c]
	p := &pending{class: c, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.release, p.err = s.Acquire(ctx, c)
	}()
	waitFor(t, "the waiter to queue", func() bool { return p.returned() || s.Waiting()[c] > before })
	return p
}

// returned reports whether the Acquire has returned.
func (p *pending) returned() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// granted waits for the Acquire to return a slot and returns its release.
func (p *pending) granted(t *testing.T) func() {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(testTimeout):
		t.Fatalf("%s waiter was never granted", p.class)
	}
	if p.err != nil {
		t.Fatalf("%s waiter: %v", p.class, p.err)
	}
	return p.release
}

// waitFor polls cond until it holds, failing after testTimeout. Scheduler state changes
// synchronously, but goroutines under test reach Acquire when the runtime gets to them.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for tries := 0; !cond(); tries++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		if tries < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// counts builds a per-class map with every class present, as the accessors return.
func counts(high, normal, low int) map[Class]int {
	return map[Class]int{High: high, Normal: normal, Low: low}
}

// assertState checks the in-flight and waiting counts together, since a slot is only ever
// lost or double-granted between the two.
func assertState(t *testing.T, s *Scheduler, inFlight, waiting map[Class]int) {
	t.Helper()
	if got := s.InFlight(); !maps.Equal(got, inFlight) {
		t.Errorf("InFlight() = %v, want %v", got, inFlight)
	}
	if got := s.Waiting(); !maps.Equal(got, waiting) {
		t.Errorf("Waiting() = %v, want %v", got, waiting)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Slots: 0, Shares: map[Class]int{High: 50}})
	if err == nil || s != nil {
		t.Fatalf("New() = %v, %v; want nil and an error", s, err)
	}
}

func TestAcquireRefusesUnknownClass(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t, Config{Slots: 4})
	release, err := s.Acquire(ctx, Class("urgent"))
	if !errors.Is(err, ErrUnknownClass) || release != nil {
		t.Fatalf("Acquire(urgent): release non-nil %t, err %v; want nil and ErrUnknownClass", release != nil, err)
	}
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
}

func TestAcquireWithEndedContextTakesNoSlot(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{Slots: 4})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release, err := s.Acquire(ctx, High)
	if !errors.Is(err, context.Canceled) || release != nil {
		t.Fatalf("Acquire(): release non-nil %t, err %v; want nil and context.Canceled", release != nil, err)
	}
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
}

// TestSoleWaitingClassBorrowsEverySlot: unused reservation is lent while its owners do not wait,
// whatever the borrower's own share.
func TestSoleWaitingClassBorrowsEverySlot(t *testing.T) {
	t.Parallel()
	for _, class := range Classes() {
		t.Run(class.String(), func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t, Config{Slots: 16})
			var releases []func()
			for range 16 {
				releases = append(releases, mustAcquire(t, s, class))
			}
			want := map[Class]int{High: 0, Normal: 0, Low: 0}
			want[class] = 16
			assertState(t, s, want, counts(0, 0, 0))

			// A 17th must wait: borrowing never goes beyond Slots.
			next := acquireAsync(t, ctx, s, class)
			if next.returned() {
				t.Fatalf("17th Acquire returned (err %v) with all 16 slots in use", next.err)
			}
			releases[0]()
			releases[0] = next.granted(t)
			assertState(t, s, want, counts(0, 0, 0))
			for _, release := range releases {
				release()
			}
			assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
		})
	}
}

// TestFreedSlotGoesToWaitingOwner: high holds all 16 slots; once normal waits, the freed slots
// go to normal until it reaches its reservation, even though a high waiter queued first.
func TestFreedSlotGoesToWaitingOwner(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t, Config{Slots: 16}) // reserves 10/5/1
	var highs []func()
	for range 16 {
		highs = append(highs, mustAcquire(t, s, High))
	}
	highWaiter := acquireAsync(t, ctx, s, High)
	normal1 := acquireAsync(t, ctx, s, Normal)
	normal2 := acquireAsync(t, ctx, s, Normal)
	assertState(t, s, counts(16, 0, 0), counts(1, 2, 0))

	highs[0]()
	n1 := normal1.granted(t)
	assertState(t, s, counts(15, 1, 0), counts(1, 1, 0))
	highs[1]()
	n2 := normal2.granted(t)
	assertState(t, s, counts(14, 2, 0), counts(1, 0, 0))
	if highWaiter.returned() {
		t.Fatal("the high waiter got a slot while normal, below its reservation, was waiting")
	}

	// Nobody owed a slot waits any more: the high waiter may borrow.
	highs[2]()
	h := highWaiter.granted(t)
	assertState(t, s, counts(14, 2, 0), counts(0, 0, 0))

	for _, release := range append(highs[3:], n1, n2, h) {
		release()
	}
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
}

// TestOwnersAreServedByPriority: when several classes are owed slots, the freed slot goes to the
// highest priority owner, whatever the arrival order; a borrower waits for all of them.
func TestOwnersAreServedByPriority(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t, Config{Slots: 16}) // reserves 10/5/1
	var lows []func()
	for range 16 {
		lows = append(lows, mustAcquire(t, s, Low))
	}
	lowWaiter := acquireAsync(t, ctx, s, Low) // over its reservation: a borrower
	normal := acquireAsync(t, ctx, s, Normal)
	high1 := acquireAsync(t, ctx, s, High)
	high2 := acquireAsync(t, ctx, s, High)

	var held []func()
	for i, next := range []*pending{high1, high2, normal, lowWaiter} {
		lows[i]()
		held = append(held, next.granted(t))
		for _, later := range []*pending{high1, high2, normal, lowWaiter}[i+1:] {
			if later.returned() {
				t.Fatalf("grant %d: the %s waiter was served out of order", i+1, later.class)
			}
		}
	}
	assertState(t, s, counts(2, 1, 13), counts(0, 0, 0))
	for _, release := range append(lows[4:], held...) {
		release()
	}
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
}

// TestWaitersOfAClassAreServedInArrivalOrder checks FIFO within a class.
func TestWaitersOfAClassAreServedInArrivalOrder(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t, Config{Slots: 1, Shares: map[Class]int{Normal: 100}})
	release := mustAcquire(t, s, Normal)
	var waiters []*pending
	for range 5 {
		waiters = append(waiters, acquireAsync(t, ctx, s, Normal))
	}
	for i, w := range waiters {
		release()
		release = w.granted(t)
		for j, later := range waiters[i+1:] {
			if later.returned() {
				t.Fatalf("waiter %d was served before waiter %d", i+j+2, i+1)
			}
		}
	}
	release()
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
}

// TestZeroShareClassOnlyBorrows: a class with share 0 runs on idle capacity only.
func TestZeroShareClassOnlyBorrows(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t, Config{Slots: 2, Shares: map[Class]int{High: 100}})
	low1, low2 := mustAcquire(t, s, Low), mustAcquire(t, s, Low)
	lowWaiter := acquireAsync(t, ctx, s, Low)
	high1 := acquireAsync(t, ctx, s, High)
	high2 := acquireAsync(t, ctx, s, High)

	low1()
	h1 := high1.granted(t)
	low2()
	h2 := high2.granted(t)
	if lowWaiter.returned() {
		t.Fatal("the zero-share class got a slot while its owner was waiting")
	}
	h1()
	l := lowWaiter.granted(t)
	assertState(t, s, counts(1, 0, 1), counts(0, 0, 0))
	h2()
	l()
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
}

// TestCancelledWaiterLeavesItsClaim: a waiter that gives up takes its class's claim with it, so
// the next freed slot may be borrowed, and no slot is lost.
func TestCancelledWaiterLeavesItsClaim(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t, Config{Slots: 16})
	var highs []func()
	for range 16 {
		highs = append(highs, mustAcquire(t, s, High))
	}
	normalCtx, cancelNormal := context.WithCancel(ctx)
	normal := acquireAsync(t, normalCtx, s, Normal)
	highWaiter := acquireAsync(t, ctx, s, High)

	cancelNormal()
	<-normal.done
	if !errors.Is(normal.err, context.Canceled) || normal.release != nil {
		t.Fatalf("cancelled Acquire: release non-nil %t, err %v; want nil and context.Canceled", normal.release != nil, normal.err)
	}
	assertState(t, s, counts(16, 0, 0), counts(1, 0, 0))

	highs[0]()
	highs[0] = highWaiter.granted(t)
	for _, release := range highs {
		release()
	}
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
	// Every slot is still there.
	for range 16 {
		defer mustAcquire(t, s, Low)()
	}
}

// TestCancelRacingGrantDoesNotLeak cancels a waiter at the moment its slot is released to it,
// many times, so that both orders happen: the slot must either be returned to the caller or be
// handed on, never kept.
func TestCancelRacingGrantDoesNotLeak(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t, Config{Slots: 1, Shares: map[Class]int{High: 100}})
	var won, lost int
	for i := range 300 {
		holder := mustAcquire(t, s, High)
		waiterCtx, cancel := context.WithCancel(ctx)
		waiter := acquireAsync(t, waiterCtx, s, High)
		if i%2 == 0 {
			// The waiter wakes on cancel while the release grants it the slot: it then sees
			// both its grant and the ended context.
			cancel()
		} else {
			go cancel()
		}
		holder()
		<-waiter.done
		if waiter.err == nil {
			won++
			waiter.release()
		} else {
			lost++
		}
		if got := s.InFlight()[High]; got != 0 {
			t.Fatalf("after a cancel racing a grant (err %v), %d slot in flight, want 0", waiter.err, got)
		}
	}
	t.Logf("waiter got the slot %d times, gave up %d times", won, lost)
	if lost == 0 {
		t.Fatal("no waiter ever gave up: the race this test is about never happened")
	}
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t, Config{Slots: 2, Shares: map[Class]int{High: 100}})
	first, second := mustAcquire(t, s, High), mustAcquire(t, s, High)
	first()
	first()
	assertState(t, s, counts(1, 0, 0), counts(0, 0, 0))

	third := mustAcquire(t, s, High)
	// Both slots are taken again: a double release that freed a slot would let this through.
	waiterCtx, cancel := context.WithCancel(ctx)
	waiter := acquireAsync(t, waiterCtx, s, High)
	if waiter.returned() {
		t.Fatalf("Acquire returned (err %v) with both slots in use", waiter.err)
	}
	cancel()
	<-waiter.done
	if waiter.err == nil {
		t.Fatal("Acquire got a third slot out of two")
	}
	second()
	third()
	second()
	third()
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
}

// TestIdleClassBanksNoCredit: with fewer slots than classes, a class that was idle while another
// ran alone joins at the current virtual time; it must not make up for the idle time with a
// burst that shuts the other class out.
func TestIdleClassBanksNoCredit(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t, Config{Slots: 1}) // weighted 60/30/10
	holder := mustAcquire(t, s, High)
	for range 100 {
		next := acquireAsync(t, ctx, s, High)
		holder()
		holder = next.granted(t)
	}
	normal1 := acquireAsync(t, ctx, s, Normal)
	normal2 := acquireAsync(t, ctx, s, Normal)
	high := acquireAsync(t, ctx, s, High)

	holder()
	n1 := normal1.granted(t)
	n1()
	h := high.granted(t)
	if normal2.returned() {
		t.Fatal("normal got a second slot in a row after being idle; high was shut out")
	}
	h()
	normal2.granted(t)()
	assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
}

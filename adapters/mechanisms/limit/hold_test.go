package limit

import (
	"testing"
	"time"
)

// TestAcquireForKeepsTheSlotOfARefusedTicket: with a rate of 10/s and a burst of 1, a call under
// a ticket that the rate refuses is told the time of the next free slot, and that slot is its:
// a newcomer is told the slot after it, and the ticket asking again at its time proceeds
// without asking the bucket again. Acquire without a ticket still takes nothing on a refusal.
func TestAcquireForKeepsTheSlotOfARefusedTicket(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Providers: map[string]Rule{testProvider: {Rate: 10, Burst: 1}}})
	b.mustAcquire(t, testProvider, "")()

	_, ok, first, _ := b.limiter.AcquireFor("d1/1", testProvider, "")
	if ok || first != 100*time.Millisecond {
		t.Fatalf("ticket d1/1 after the burst: ok=%v, retry after %s; want refused, the slot in 100ms", ok, first)
	}
	// A second ticket is given the slot after d1/1's, since that one is taken.
	if _, ok, second, _ := b.limiter.AcquireFor("d2/1", testProvider, ""); ok || second != 200*time.Millisecond {
		t.Fatalf("ticket d2/1: ok=%v, retry after %s; want refused, the slot in 200ms", ok, second)
	}
	// Asking without a ticket is refused for the slot after both, and keeps nothing.
	if _, ok, later, _ := b.limiter.Acquire(testProvider, ""); ok || later != 300*time.Millisecond {
		t.Fatalf("no ticket: ok=%v, retry after %s; want refused, 300ms", ok, later)
	}

	// Early, the ticket is told to wait for its slot still (nothing more is taken).
	b.clock.advance(50 * time.Millisecond)
	if _, ok, wait, _ := b.limiter.AcquireFor("d1/1", testProvider, ""); ok || wait != 50*time.Millisecond {
		t.Fatalf("ticket d1/1 50ms early: ok=%v, retry after %s; want refused, 50ms", ok, wait)
	}
	// At its time it proceeds, though the bucket holds no token for anyone else.
	b.clock.advance(50 * time.Millisecond)
	release, ok, wait, reason := b.limiter.AcquireFor("d1/1", testProvider, "")
	if !ok {
		t.Fatalf("ticket d1/1 at its slot refused (%s, %s)", reason, wait)
	}
	release()
	if _, ok, _, _ := b.limiter.Acquire(testProvider, ""); ok {
		t.Fatal("a newcomer at d1/1's slot was allowed: the slot was given twice")
	}
	// The slot was taken once: the ticket asking again is a new call that waits for the rate.
	if _, ok, _, _ := b.limiter.AcquireFor("d1/1", testProvider, ""); ok {
		t.Fatal("ticket d1/1 proceeded twice on one slot")
	}
}

// TestAcquireForForgetsASlotNotTaken: a slot whose ticket does not come back within holdKeep is
// forgotten, so the map of held slots does not grow with attempts that went elsewhere, and the
// ticket coming back after that asks the bucket like any call.
func TestAcquireForForgetsASlotNotTaken(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Providers: map[string]Rule{testProvider: {Rate: 1, Burst: 1}}})
	b.limiter.minSweep, b.limiter.holdSweepAt = 2, 2
	b.mustAcquire(t, testProvider, "")()
	for _, ticket := range []string{"a/1", "b/1"} {
		if _, ok, _, _ := b.limiter.AcquireFor(ticket, testProvider, ""); ok {
			t.Fatalf("ticket %s allowed after the burst", ticket)
		}
	}
	b.clock.advance(2*time.Second + holdKeep + time.Millisecond)
	// A new hold sweeps the expired ones.
	b.mustAcquire(t, testProvider, "")()
	if _, ok, _, _ := b.limiter.AcquireFor("c/1", testProvider, ""); ok {
		t.Fatal("ticket c/1 allowed right after a call at 1/s")
	}
	if n := len(b.limiter.holds); n != 1 {
		t.Errorf("%d slots held after the sweep, want 1 (c/1's)", n)
	}
}

package fairshare

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// heldSlot is a granted slot handed to the simulation's driver, which decides when it ends.
type heldSlot struct {
	class   Class
	release func()
}

// saturate runs a simulation in logical time: goroutines per class re-acquire without end, so
// every class always has waiters, and a driver holds every granted slot for exactly Slots grants
// (it releases the oldest slot, then waits for the one grant this causes). Before each release
// it waits until every goroutine is queued, so the outcome depends on the scheduler only, not on
// goroutine timing. It returns the classes of the measured grants, in order, after a warm-up
// that lets the initial allocation (whoever arrived first) settle.
func saturate(t *testing.T, s *Scheduler, goroutines map[Class]int, warmup, measure int) []Class {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	grants := make(chan heldSlot)
	var wg sync.WaitGroup
	total := 0
	for class, n := range goroutines {
		total += n
		for range n {
			wg.Go(func() {
				for {
					release, err := s.Acquire(ctx, class)
					if err != nil {
						return
					}
					select {
					case grants <- heldSlot{class: class, release: release}:
					case <-ctx.Done():
						release()
						return
					}
				}
			})
		}
	}
	var held []heldSlot
	defer func() {
		cancel()
		for _, h := range held {
			h.release()
		}
		wg.Wait()
		assertState(t, s, counts(0, 0, 0), counts(0, 0, 0))
	}()
	receive := func() {
		t.Helper()
		select {
		case g := <-grants:
			held = append(held, g)
		case <-time.After(testTimeout):
			t.Fatalf("no grant (in flight %v, waiting %v)", s.InFlight(), s.Waiting())
		}
	}
	queued := func() bool {
		n := 0
		for _, w := range s.Waiting() {
			n += w
		}
		return n == total
	}

	for len(held) < s.slots {
		receive()
	}
	var measured []Class
	for n := range warmup + measure {
		waitFor(t, "every goroutine to queue", queued)
		held[0].release()
		held = held[1:]
		receive()
		if n >= warmup {
			measured = append(measured, held[len(held)-1].class)
		}
	}
	return measured
}

// tally counts grants per class.
func tally(grants []Class) map[Class]int {
	n := counts(0, 0, 0)
	for _, c := range grants {
		n[c]++
	}
	return n
}

// percentages formats per-class shares of n for logs and failures.
func percentages(got map[Class]int, n int) string {
	return fmt.Sprintf("high %.2f%%, normal %.2f%%, low %.2f%% of %d grants",
		100*float64(got[High])/float64(n), 100*float64(got[Normal])/float64(n), 100*float64(got[Low])/float64(n), n)
}

// TestSaturatedSharesFollowReservations: a flood of high waiters with normal and low saturated
// too. Each class must get at least its reserved fraction of the grants, and high its 60%.
func TestSaturatedSharesFollowReservations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		slots int
		// minPercent is the least share of grants each class must get. With 16 slots low
		// reserves 1 slot, 6.25%: 10% of 16 rounds down, so 7% is out of reach by construction.
		minPercent map[Class]int
	}{
		{slots: 16, minPercent: counts(60, 25, 6)},
		{slots: 20, minPercent: counts(60, 25, 7)},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d slots", tt.slots), func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, Config{Slots: tt.slots})
			grants := saturate(t, s, counts(4*tt.slots, tt.slots/2, tt.slots/4), 4*tt.slots, 100*tt.slots)
			got := tally(grants)
			t.Logf("reserved %v; measured %s", s.Reserved(), percentages(got, len(grants)))
			for _, class := range Classes() {
				if got[class]*100 < tt.minPercent[class]*len(grants) {
					t.Errorf("%s got %d of %d grants, want at least %d%%", class, got[class], len(grants), tt.minPercent[class])
				}
			}
		})
	}
}

// TestFewerSlotsThanClassesShareByWeight: with 1 or 2 slots nothing is reserved, and the slots
// go round by weight, so no class starves behind a high flood.
func TestFewerSlotsThanClassesShareByWeight(t *testing.T) {
	t.Parallel()
	for _, slots := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d slots", slots), func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, Config{Slots: slots})
			grants := saturate(t, s, counts(16, 4, 2), 50, 1000)
			got := tally(grants)
			t.Logf("reserved %v; measured %s", s.Reserved(), percentages(got, len(grants)))
			want := DefaultShares()
			for _, class := range Classes() {
				if (got[class]-want[class]*len(grants)/100)*100 < -2*len(grants) {
					t.Errorf("%s got %d of %d grants, want at least %d%% less 2 points", class, got[class], len(grants), want[class])
				}
			}
			// Low, at 10%, must come round at least every 20 grants.
			gap, longest := 0, 0
			for _, c := range grants {
				if gap++; c == Low {
					gap = 0
				}
				longest = max(longest, gap)
			}
			if longest > 20 {
				t.Errorf("low waited %d grants in a row, want at most 20", longest)
			}
		})
	}
}

package retention

import (
	"context"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/projections"
)

// TestPacerRestsSoTheWorkIsItsShare: at a share of a quarter, a read whose events take 1 ms of
// work each rests three times as long as it worked, a chunk at a time, on a clock of the test's;
// at a share of 1 it never rests.
func TestPacerRestsSoTheWorkIsItsShare(t *testing.T) {
	for _, tc := range []struct {
		share float64
		want  time.Duration
	}{{0.25, 3 * 1024 * time.Millisecond}, {1, 0}, {0, 3 * 1024 * time.Millisecond}} {
		clock := time.Unix(0, 0)
		var rested time.Duration
		rests := 0
		p := newPacer(tc.share)
		p.now = func() time.Time { return clock }
		p.sleep = func(_ context.Context, d time.Duration) error {
			rested += d
			clock = clock.Add(d)
			rests++
			return nil
		}
		emit := p.wrap(context.Background(), func(projections.LoggedEvent) error {
			clock = clock.Add(time.Millisecond) // the work on one event
			return nil
		})
		for range 1024 {
			if err := emit(projections.LoggedEvent{}); err != nil {
				t.Fatal(err)
			}
		}
		if rested != tc.want {
			t.Errorf("share %.2f: rested %s over 1024 events of 1 ms, want %s", tc.share, rested, tc.want)
		}
		if tc.want > 0 && rests != 1024/paceChunk {
			t.Errorf("share %.2f: %d rests, want one a chunk of %d", tc.share, rests, paceChunk)
		}
	}
}

package app

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAcceptPacingSlowsAcceptsWhileWorkWaits: with no worker consuming, the work queue fills;
// once it holds twice --accept-pace-backlog, an accept waits --accept-pace-max-wait before its
// commit, and the wait is counted; below the bound, and without pacing, accepts do not wait.
func TestAcceptPacingSlowsAcceptsWhileWorkWaits(t *testing.T) {
	t.Parallel()
	const backlog, maxWait = 4, 600 * time.Millisecond
	for _, paced := range []bool{true, false} {
		t.Run(fmt.Sprintf("paced=%v", paced), func(t *testing.T) {
			t.Parallel()
			b := setupE2E(t, "api,relay", func(c *Config) {
				if paced {
					c.AcceptPaceBacklog, c.AcceptPaceMaxWait = backlog, maxWait
				}
			})
			timed := func(key string) time.Duration {
				t.Helper()
				start := time.Now()
				b.notify(t, key, b.sink.URL+"/"+key)
				return time.Since(start)
			}
			for i := range backlog {
				if d := timed(fmt.Sprintf("below-%d", i)); d >= maxWait/2 {
					t.Fatalf("accept %d took %s with at most %d messages waiting", i, d, i)
				}
			}
			for i := range backlog + 2 {
				timed(fmt.Sprintf("fill-%d", i))
			}
			// The relay publishes within milliseconds; the pacer reads the depth every 250 ms.
			time.Sleep(3 * acceptPaceInterval)
			d := timed("over")
			if paced && d < maxWait {
				t.Fatalf("with %d messages waiting (bound %d) an accept took %s, want the %s wait", 2*backlog+2, backlog, d, maxWait)
			}
			if !paced && d >= maxWait/2 {
				t.Fatalf("without pacing an accept took %s", d)
			}
			count := sample(b.metricsText(t), "ledger_accept_paced_seconds_count")
			if paced && count < 1 || !paced && count != 0 {
				t.Fatalf("ledger_accept_paced_seconds_count %v with pacing %v", count, paced)
			}
		})
	}
}

// sample reads one sample of a /metrics text (0 when it is absent).
func sample(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return 0
}

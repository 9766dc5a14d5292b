package amqp

import (
	"testing"
	"time"
)

// TestReconnectBackoff: the pause doubles while sessions fail at once, stops at the longest, and
// starts over after a session that ran well (the old consumer kept its 5 s after any outage).
func TestReconnectBackoff(t *testing.T) {
	b := reconnectBackoff(0, 0)
	var got []time.Duration
	for range 8 {
		got = append(got, b)
		b = reconnectBackoff(b, 10*time.Millisecond)
	}
	if got[0] != firstReconnect || got[1] != 2*firstReconnect || got[7] != maxReconnect {
		t.Fatalf("pauses while failing: %v, want %s doubling up to %s", got, firstReconnect, maxReconnect)
	}
	if after := reconnectBackoff(maxReconnect, time.Hour); after != firstReconnect {
		t.Fatalf("pause after a session of an hour: %s, want %s", after, firstReconnect)
	}
}

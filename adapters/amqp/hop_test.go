package amqp

import (
	"testing"
	"time"
)

// TestHopRoundsDown: a message due in d takes the longest wait (retry tier or deferral wait)
// not longer than d, so it never comes back after it is due; under the shortest wait it takes
// the shortest.
func TestHopRoundsDown(t *testing.T) {
	t.Parallel()
	topo := Topology{Prefix: "p", Channels: []string{"webhook"}, Tiers: []time.Duration{30 * time.Second, 5 * time.Minute, time.Hour}}
	for _, c := range []struct {
		delay time.Duration
		topic string
		holds time.Duration
	}{
		{0, "p.webhook.defer.50ms", 50 * time.Millisecond},
		{30 * time.Millisecond, "p.webhook.defer.50ms", 50 * time.Millisecond},
		{900 * time.Millisecond, "p.webhook.defer.500ms", 500 * time.Millisecond},
		{time.Second, "p.webhook.defer.1s", time.Second},
		{45 * time.Second, "p.webhook.defer.30s", 30 * time.Second},
		{4 * time.Minute, "p.webhook.defer.1m", time.Minute},
		{6 * time.Minute, "p.webhook.retry.5m", 5 * time.Minute},
		{61 * time.Second, "p.webhook.defer.1m", time.Minute},
		{15 * time.Hour, "p.webhook.retry.1h", time.Hour},
	} {
		topic, holds := topo.Hop("webhook", c.delay)
		if topic != c.topic || holds != c.holds {
			t.Errorf("Hop(%s) = %s, %s; want %s, %s", c.delay, topic, holds, c.topic, c.holds)
		}
	}
}

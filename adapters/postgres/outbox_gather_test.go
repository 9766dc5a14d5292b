package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// TestRelayGathersAfterANotification: woken by an append's notification, the relay waits its
// gather time before it polls, so that appends committed close together travel in one batch; a
// poll that found rows, with more visible, reads on at once.
func TestRelayGathersAfterANotification(t *testing.T) {
	t.Parallel()
	wake := make(chan struct{}, 1)
	b := &notifyBackoff{ctx: context.Background(), wake: wake, maxWait: time.Hour, gather: 10 * time.Millisecond,
		visible: func() bool { return false }}
	logger := watermill.NopLogger{}
	wake <- struct{}{}
	if got := b.next(logger, true, nil); got != 10*time.Millisecond {
		t.Errorf("after a notification the relay waits %s before it polls, want its gather of 10ms", got)
	}
	b.visible = func() bool { return true }
	if got := b.next(logger, false, nil); got != 0 {
		t.Errorf("after a batch with more rows visible the relay waits %s, want 0", got)
	}
	b.gather = 0
	wake <- struct{}{}
	if got := b.next(logger, true, nil); got != 0 {
		t.Errorf("with no gather the relay waits %s after a notification, want 0", got)
	}
}

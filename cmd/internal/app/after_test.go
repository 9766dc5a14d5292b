package app

import (
	"context"
	"testing"
	"time"
)

// TestAfterShiftsAPeriodicTaskByItsPhase: a maintenance loop starts its phase after the process,
// so that loops of commensurate intervals do not tick together; a stop during the wait ends it.
func TestAfterShiftsAPeriodicTaskByItsPhase(t *testing.T) {
	t.Parallel()
	began := time.Now()
	var startedAfter time.Duration
	if err := after(150*time.Millisecond, func(context.Context) error {
		startedAfter = time.Since(began)
		return nil
	})(context.Background()); err != nil {
		t.Fatal(err)
	}
	if startedAfter < 150*time.Millisecond {
		t.Fatalf("the task started %s after the call, want its phase of 150ms", startedAfter)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if err := after(time.Hour, func(context.Context) error { ran = true; return nil })(ctx); err != nil || ran {
		t.Fatalf("stopped during its phase: err %v, ran %v; want neither", err, ran)
	}
}

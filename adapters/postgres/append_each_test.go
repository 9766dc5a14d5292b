package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// TestAppendEachOfRecordedVersionsWritesNothing: the relay's queued marks are mostly recorded by
// the worker first (with the attempt's start), so a batch of them often finds every version
// taken. Such rows must be left out before the insert: a row that reaches it has its defaults
// evaluated, the position's nextval and pg_current_xact_id(), which gives the transaction an id
// and its commit a WAL flush, for nothing. The position sequence of the test's own schema shows
// whether a row reached the insert.
func TestAppendEachOfRecordedVersionsWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d, events := acceptedEvents(t)
	if err := b.store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	queued := []domain.Event{domain.FirstQueued(d.ID(), d.Tenant(), time.Now().UTC())}
	if n, err := b.store.AppendEach(ctx, queued); err != nil || n != 1 {
		t.Fatalf("AppendEach of a new version wrote %d (%v), want 1", n, err)
	}
	position := func() (last int64) {
		t.Helper()
		var called bool
		if err := b.schema.Pool.QueryRow(ctx, `SELECT last_value, is_called FROM events_position_seq`).Scan(&last, &called); err != nil || !called {
			t.Fatalf("the position sequence: %v (called %v)", err, called)
		}
		return last
	}
	before := position()
	again := []domain.Event{domain.FirstQueued(d.ID(), d.Tenant(), time.Now().UTC())}
	if n, err := b.store.AppendEach(ctx, again); err != nil || n != 0 {
		t.Fatalf("AppendEach of a recorded version wrote %d (%v), want 0", n, err)
	}
	if after := position(); after != before {
		t.Fatalf("AppendEach of a recorded version took positions %d to %d: its row reached the insert (and a transaction id)", before, after)
	}
}

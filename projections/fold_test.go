package projections_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// TestEveryEventTypeLeadsToOneState: the DLQ and counters projections know a delivery's state
// from the type of its latest event that is not preserving (a receipt keeps any state). If the transition table ever sends one event type to
// two states, this fails before the projections do.
func TestEveryEventTypeLeadsToOneState(t *testing.T) {
	t.Parallel()
	for _, typ := range domain.EventTypes {
		if domain.Preserving(typ) {
			// It keeps the state before it; the projections look further back for that.
			if _, err := projections.StateAfter(typ); err == nil {
				t.Fatalf("StateAfter(%s) answers, but %s keeps whatever state it finds", typ, typ)
			}
			continue
		}
		s, err := projections.StateAfter(typ)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Valid() {
			t.Fatalf("%s leads to %q", typ, s)
		}
	}
	want := map[domain.EventType]bool{domain.EventReplayed: true, domain.EventReconciledDelivered: true, domain.EventReconciledRetry: true}
	if len(projections.LeavesDLQ) != len(want) {
		t.Fatalf("types that leave the DLQ: %v, want %v", projections.LeavesDLQ, want)
	}
	for typ := range want {
		if !projections.LeavesDLQ[typ] {
			t.Fatalf("types that leave the DLQ: %v, want %v", projections.LeavesDLQ, want)
		}
	}
}

// TestStatusFoldAgreesWithTheAggregate folds random histories both ways: the status view and the
// aggregate must tell the same story for every field they share.
func TestStatusFoldAgreesWithTheAggregate(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(30, 31))
	for i := range 500 {
		h := newHistory(t, rng, "acme", time.Now())
		h.run(rng)
		row, err := projections.FoldStatus(h.events)
		if err != nil {
			t.Fatal(err)
		}
		d := h.d
		var class domain.ErrorClass
		var message string
		var code int
		if r := d.LastResult(); r != nil {
			class, message, code = r.Class, r.Error, r.StatusCode
		}
		next := d.NextAttemptAt()
		sameNext := (next == nil) == (row.NextAttemptAt == nil) &&
			(next == nil || next.Truncate(time.Microsecond).Equal(*row.NextAttemptAt))
		if row.ID != d.ID() || row.Tenant != d.Tenant() || row.NotificationID != d.NotificationID() ||
			row.Channel != d.Channel() || row.Recipient != d.Recipient() || row.Priority != d.Priority() ||
			row.State != d.State() || row.Version != d.Version() || row.Attempts != d.Attempt() ||
			row.MaxAttempts != d.MaxAttempts() || row.RequestKey != d.RequestKey() ||
			!row.AcceptedAt.Equal(d.AcceptedAt()) || !row.UpdatedAt.Equal(d.UpdatedAt()) ||
			row.LastErrorClass != class || row.LastError != message || row.LastStatusCode != code || !sameNext {
			t.Fatalf("history %d (%d events): status row %+v disagrees with the aggregate (state %s, version %d, attempt %d, last %v, next %v)",
				i, len(h.events), row, d.State(), d.Version(), d.Attempt(), d.LastResult(), next)
		}
		if acc := d.Awaiting(); (acc == nil) != (row.GiveUpAt == nil) ||
			acc != nil && (!acc.GiveUpAt.Truncate(time.Microsecond).Equal(*row.GiveUpAt) || row.CheckAt == nil) {
			t.Fatalf("history %d: awaiting %+v, status row check_at %v give_up_at %v", i, acc, row.CheckAt, row.GiveUpAt)
		}
		if d.State() == domain.StateUnknown && row.CheckAt == nil {
			t.Fatalf("history %d: an unknown delivery has no check_at", i)
		}
		if (row.TerminalAt != nil) != d.State().Terminal() {
			t.Fatalf("history %d: terminal_at %v in state %s", i, row.TerminalAt, d.State())
		}
	}
}

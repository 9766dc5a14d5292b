// Package commandstest holds the fixtures that the tests of several packages share: delivery
// histories written straight into an event store, for tests of what comes after them.
package commandstest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// DeadDelivery records in store a webhook delivery of tenant to recipient that failed for good
// at its first attempt (410), or, with unknown, whose first attempt's outcome is unknown, and
// returns its id.
func DeadDelivery(t testing.TB, store commands.EventStore, tenant, recipient string, unknown bool) string {
	t.Helper()
	now := time.Now().UTC()
	id := uuid.Must(uuid.NewV7()).String()
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: tenant, Channel: "webhook",
		Recipient: recipient, Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 3}, now)
	if err != nil {
		t.Fatal(err)
	}
	add := func(more []domain.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, more...)
	}
	add(d.Queue(now))
	add(d.StartAttempt("webhook", now))
	kind := domain.OutcomePermanent
	if unknown {
		kind = domain.OutcomeUnknown
	}
	add(d.RecordOutcome(1, domain.Outcome{Kind: kind, StatusCode: 410, Err: "gone"}, domain.DefaultRetryPolicy(), now, 0))
	if err := store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}
	return id
}

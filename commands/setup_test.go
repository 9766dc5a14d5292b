package commands_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// acceptedDelivery records a new webhook delivery of tenant acme (3 attempts at most) and
// returns it, its accepted event stored.
func acceptedDelivery(t *testing.T, store *postgres.EventStore) *domain.Delivery {
	t.Helper()
	d, events, err := domain.Accept(domain.AcceptSpec{ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Channel: "webhook",
		Recipient: "https://example.com/h", Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 3},
		commands.SystemClock{}.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

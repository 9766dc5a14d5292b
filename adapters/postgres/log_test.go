package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/projections"
)

// TestLogOrderComparesTransactionIDsAsNumbers: the readers order by the xid8 column, not by
// its text, in which transaction 10 comes before transaction 9 (and 100000 before 99999, which
// a busy cluster reaches within hours).
func TestLogOrderComparesTransactionIDsAsNumbers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ten, nine := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	// Transaction 10 takes the lower position; the log order is still 9 first.
	for _, row := range []struct{ txid, id string }{{"10", ten}, {"9", nine}} {
		if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO events (transaction_id, delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
			VALUES ($1::text::xid8, $2::uuid, 'acme', 1, 'delivery.accepted', $3, '{}', $4)`, row.txid, row.id, row.id+"/accepted", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.store.ReadLog(ctx, projections.LogPosition{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].DeliveryID != nine || got[1].DeliveryID != ten || got[0].At.TransactionID != 9 {
		t.Fatalf("read %+v, want transaction 9 then 10", got)
	}
	rest, err := b.store.ReadLog(ctx, got[0].At, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 1 || rest[0].DeliveryID != ten {
		t.Fatalf("after transaction 9: %+v, want transaction 10's event only", rest)
	}

	var exported []string
	if err := b.store.ExportLog(ctx, postgres.LogRange{}, func(e projections.LoggedEvent) error {
		exported = append(exported, e.DeliveryID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(exported) != 2 || exported[0] != nine || exported[1] != ten {
		t.Fatalf("exported %v, want [%s %s]", exported, nine, ten)
	}
	n, err := b.store.CountLog(ctx, postgres.LogRange{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)})
	if err != nil || n != 2 {
		t.Fatalf("count %d, %v; want 2", n, err)
	}
}

package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// storedKeys returns the events' keys as the table holds them, in version order.
func storedKeys(t *testing.T, b *storeBundle, deliveryID string) []string {
	t.Helper()
	rows, err := b.schema.Pool.Query(context.Background(), `SELECT idempotency_key FROM events WHERE delivery_id = $1 ORDER BY version`, deliveryID)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}

// TestEventKeysAreStoredWithoutTheirDeliveryID: the table keeps a key from its "/" on, and
// every way the events are read gives the key back whole.
func TestEventKeysAreStoredWithoutTheirDeliveryID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d, events := acceptedEvents(t)
	queued, err := d.Queue(time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	batcher := postgres.NewAppendBatcher(b.store, 1, 8)
	t.Cleanup(batcher.Close)
	if err := b.store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	if err := batcher.Append(ctx, queued, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{domain.KeyAccepted(d.ID()), domain.KeyQueued(d.ID(), 1)}
	stored := storedKeys(t, b, d.ID())
	if len(stored) != 2 || stored[0] != "/accepted" || stored[1] != "/queued/1" {
		t.Fatalf("stored keys %q, want [/accepted /queued/1]", stored)
	}
	loaded, err := b.store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	byBatch, err := batcher.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	var logged []projections.LoggedEvent
	if err := b.store.ExportLog(ctx, postgres.LogRange{}, func(e projections.LoggedEvent) error {
		logged = append(logged, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The log gives a transaction once no older one runs (in any schema of the cluster): wait.
	var read []projections.LoggedEvent
	for deadline := time.Now().Add(10 * time.Second); len(read) < len(want); time.Sleep(20 * time.Millisecond) {
		if read, err = b.store.ReadLog(ctx, projections.LogPosition{}, 10); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log gives %d events, want %d", len(read), len(want))
		}
	}
	for i, k := range want {
		for name, got := range map[string]string{"Load": loaded[i].Key, "the batcher's Load": byBatch[i].Key,
			"ExportLog": logged[i].Key, "ReadLog": read[i].Key} {
			if got != k {
				t.Errorf("%s gives key %q of version %d, want %q", name, got, i+1, k)
			}
		}
	}
	// The short form still refuses a repeat, alone and in a batch.
	if err := b.store.Append(ctx, queued, nil); !errors.Is(err, commands.ErrDuplicate) {
		t.Fatalf("repeated append: %v, want ErrDuplicate", err)
	}
	if err := batcher.Append(ctx, queued, nil); !errors.Is(err, commands.ErrDuplicate) {
		t.Fatalf("repeated batched append: %v, want ErrDuplicate", err)
	}
	if n, err := b.store.AppendEach(ctx, queued); err != nil || n != 0 {
		t.Fatalf("AppendEach of a recorded event wrote %d (%v), want 0", n, err)
	}
}

// TestAKeyOfAnotherFormIsKeptWhole: a key that does not begin with its delivery's id is stored as
// it is, and one that begins with "/" is refused, since it could not be told from a short one.
func TestAKeyOfAnotherFormIsKeptWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, events := acceptedEvents(t)
	id := events[0].DeliveryID
	other := events[0]
	other.Key = "import-42/accepted"
	if err := b.store.Append(ctx, []domain.Event{other}, nil); err != nil {
		t.Fatal(err)
	}
	if got := storedKeys(t, b, id); len(got) != 1 || got[0] != "import-42/accepted" {
		t.Fatalf("stored %q, want the key whole", got)
	}
	loaded, err := b.store.Load(ctx, id)
	if err != nil || loaded[0].Key != "import-42/accepted" {
		t.Fatalf("loaded %v (%v), want the key whole", loaded, err)
	}
	_, events = acceptedEvents(t)
	events[0].Key = "/accepted"
	if err := b.store.Append(ctx, events, nil); !errors.Is(err, postgres.ErrAmbiguousKey) {
		t.Fatalf("a key beginning with / appended: %v, want ErrAmbiguousKey", err)
	}
	if _, err := b.store.AppendEach(ctx, events); !errors.Is(err, postgres.ErrAmbiguousKey) {
		t.Fatalf("AppendEach of a key beginning with /: %v, want ErrAmbiguousKey", err)
	}
}

// TestMigratingShortKeys: migration 0024 shortens the keys recorded before it and leaves short
// ones alone; down, every key gets its id back.
func TestMigratingShortKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	below := pgtest.MigrationVersion(t, "short_event_keys") - 1
	_, first := acceptedEvents(t)
	if err := b.store.Append(ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, below, nil); err != nil {
		t.Fatal(err)
	}
	id := first[0].DeliveryID
	if got := storedKeys(t, b, id); len(got) != 1 || got[0] != id+"/accepted" {
		t.Fatalf("below 0024 the key is %q, want it whole", got)
	}
	// A key as a ledger before 0024 wrote it, and one already short.
	_, old := acceptedEvents(t)
	oldID := old[0].DeliveryID
	if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
		VALUES ($1, 'acme', 1, $2, $3, $4, now()), ($1, 'acme', 2, 'delivery.queued', '/queued/1', '{}', now())`,
		oldID, string(old[0].Type), old[0].Key, string(old[0].Data)); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, -1, nil); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string][]string{id: {"/accepted"}, oldID: {"/accepted", "/queued/1"}} {
		if got := storedKeys(t, b, id); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("after 0024 %s's keys are %q, want %q", id, got, want)
		}
	}
	if err := b.store.Append(ctx, old[:1], nil); !errors.Is(err, commands.ErrDuplicate) {
		t.Fatalf("an event recorded before 0024 appended again: %v, want ErrDuplicate", err)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, below, nil); err != nil {
		t.Fatal(err)
	}
	if got := storedKeys(t, b, oldID); len(got) != 2 || got[1] != oldID+"/queued/1" {
		t.Fatalf("down from 0024 the keys are %q, want them whole", got)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, -1, nil); err != nil {
		t.Fatal(err)
	}
}

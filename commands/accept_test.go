package commands_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/commands"
)

// TestDeliveryIDIsTimeOrdered: delivery ids are version 7 UUIDs whose time is the accept time,
// so the indexes that start with them grow at their right edge; the rest comes from the
// notification and the recipient, so two recipients accepted in the same millisecond differ.
func TestDeliveryIDIsTimeOrdered(t *testing.T) {
	at := time.Date(2026, 11, 30, 3, 4, 5, 678_900_000, time.UTC)
	n := commands.NotificationID("acme", "key-1")
	hook := commands.Recipient{Channel: "webhook", Recipient: "https://example.com/hook"}
	mail := commands.Recipient{Channel: "email", Recipient: "a@example.com"}

	id := uuid.MustParse(commands.DeliveryID(n, hook, at))
	if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
		t.Fatalf("id %s: version %d variant %s, want 7 and RFC 4122", id, id.Version(), id.Variant())
	}
	if sec, nsec := id.Time().UnixTime(); time.Unix(sec, nsec).UnixMilli() != at.UnixMilli() {
		t.Fatalf("id %s carries time %s, want %s", id, time.Unix(sec, nsec).UTC(), at)
	}
	if again := commands.DeliveryID(n, hook, at); again != id.String() {
		t.Fatalf("same inputs gave %s and %s", id, again)
	}
	if other := commands.DeliveryID(n, mail, at); other == id.String() {
		t.Fatalf("two recipients share id %s", other)
	}
	if other := commands.DeliveryID(commands.NotificationID("acme", "key-2"), hook, at); other == id.String() {
		t.Fatalf("two notifications share id %s", other)
	}
	later := commands.DeliveryID(n, hook, at.Add(time.Millisecond))
	if earlier := commands.DeliveryID(commands.NotificationID("zzz", "key-9"), hook, at); !(earlier < later) {
		t.Fatalf("id %s of an earlier accept does not sort before %s", earlier, later)
	}
}

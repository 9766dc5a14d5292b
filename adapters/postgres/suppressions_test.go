package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// deadLetterOf takes a fresh delivery to recipient through an attempt to a permanent outcome
// whose answer suppresses or not, and appends its whole stream.
func deadLetterOf(t *testing.T, b *storeBundle, recipient, key string, suppress bool) *domain.Delivery {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	d, events, err := domain.Accept(domain.AcceptSpec{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Channel: "webhook", Recipient: recipient, RecipientKey: key,
		Payload: json.RawMessage(`{"a":1}`), Priority: domain.PriorityNormal, MaxAttempts: 3,
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	queued, _ := d.Queue(now)
	started, _ := d.StartAttempt("webhook", now)
	dead, err := d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomePermanent, Provider: "webhook", StatusCode: 410,
		ProviderCode: "410", Suppress: suppress}, domain.RetryPolicy{MaxAttempts: 3}, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	all := append(append(append(events, queued...), started...), dead...)
	if err := b.store.Append(ctx, all, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDeadLetterThatSuppressesAddsItsRecipientWithItsEvidence: the entry is written with the
// dead letter, keyed by the recipient key of the accepted event, naming the event; a dead letter
// whose answer does not suppress adds nothing; a second suppressing one adds nothing more.
func TestDeadLetterThatSuppressesAddsItsRecipientWithItsEvidence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	store := postgres.NewSuppressionStore(b.schema.Pool)

	deadLetterOf(t, b, "https://example.com/soft", "", false)
	d := deadLetterOf(t, b, "HTTPS://Example.com/gone#x", "https://example.com/gone", true)
	deadLetterOf(t, b, "https://example.com/gone", "", true) // the same key: no second entry

	entries, _, err := store.ListSuppressions(ctx, "acme", commands.SuppressionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("entries: %+v, want one", entries)
	}
	e := entries[0]
	want := domain.SuppressionEvidence{DeliveryID: d.ID(), EventVersion: 4, Provider: "webhook", ProviderCode: "410"}
	if e.Recipient != "https://example.com/gone" || e.Channel != "webhook" || e.Source != domain.SuppressionByProvider || e.Evidence != want {
		t.Fatalf("entry %+v, want the recipient key with evidence %+v", e, want)
	}
	var events int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM recipient_events WHERE stream_id = $1 AND type = 'suppression.added'`, e.ID).Scan(&events); err != nil || events != 1 {
		t.Fatalf("the entry's stream has %d added events (%v), want 1", events, err)
	}
	blocks, err := store.Blocks(ctx, "acme", "", []commands.RecipientRef{
		{Channel: "webhook", Recipient: "https://example.com/soft"}, {Channel: "webhook", Recipient: "https://example.com/gone"},
		{Channel: "email", Recipient: "https://example.com/gone"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if blocks[0].Blocks() || !blocks[1].Blocks() || blocks[1].Suppression.ID != e.ID || blocks[2].Blocks() {
		t.Fatalf("blocks %+v: want only the suppressed recipient on its own channel", blocks)
	}
	other, err := store.Blocks(ctx, "other-tenant", "", []commands.RecipientRef{{Channel: "webhook", Recipient: "https://example.com/gone"}})
	if err != nil || other[0].Blocks() {
		t.Fatalf("another tenant's probe: %+v, %v; want nothing", other, err)
	}
}

// TestSuppressionAddRemoveAndAddAgain: a manual add is idempotent on the active entry; a
// removal ends it (twice: the same answer), stops it suppressing, and a new add is a new entry.
func TestSuppressionAddRemoveAndAddAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	store := postgres.NewSuppressionStore(b.schema.Pool)
	now := time.Now().UTC().Truncate(time.Microsecond)
	in := domain.Suppression{Tenant: "acme", Channel: "email", Recipient: "a@example.com", Source: domain.SuppressionManual,
		Reason: "asked by phone", Evidence: domain.SuppressionEvidence{Actor: "bob"}, CreatedAt: now}
	first, created, err := store.AddSuppression(ctx, in)
	if err != nil || !created {
		t.Fatalf("add: %+v %v %v", first, created, err)
	}
	again, created, err := store.AddSuppression(ctx, in)
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("second add: %+v created=%v %v; want the first entry", again, created, err)
	}
	removed, err := store.RemoveSuppression(ctx, "acme", first.ID, "carol", "was a mistake", now.Add(time.Second))
	if err != nil || removed.RemovedAt == nil || removed.RemovedBy != "carol" || removed.RemovedReason != "was a mistake" {
		t.Fatalf("remove: %+v %v", removed, err)
	}
	if twice, err := store.RemoveSuppression(ctx, "acme", first.ID, "dave", "again", now.Add(2*time.Second)); err != nil || twice.RemovedBy != "carol" {
		t.Fatalf("second remove: %+v %v; want the first removal", twice, err)
	}
	if _, err := store.RemoveSuppression(ctx, "other", first.ID, "x", "", now); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("another tenant's remove: %v, want not found", err)
	}
	blocks, err := store.Blocks(ctx, "acme", "", []commands.RecipientRef{{Channel: "email", Recipient: "a@example.com"}})
	if err != nil || blocks[0].Blocks() {
		t.Fatalf("after removal: %+v %v; want nothing", blocks, err)
	}
	third, created, err := store.AddSuppression(ctx, in)
	if err != nil || !created || third.ID == first.ID {
		t.Fatalf("add after removal: %+v %v %v; want a new entry", third, created, err)
	}
	active, _, err := store.ListSuppressions(ctx, "acme", commands.SuppressionFilter{})
	all, _, err2 := store.ListSuppressions(ctx, "acme", commands.SuppressionFilter{IncludeRemoved: true})
	if err != nil || err2 != nil || len(active) != 1 || len(all) != 2 {
		t.Fatalf("lists: active %d, all %d (%v %v); want 1 and 2", len(active), len(all), err, err2)
	}
	var types []string
	rows, _ := b.schema.Pool.Query(ctx, `SELECT type FROM recipient_events WHERE stream_id = $1 ORDER BY version`, first.ID)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		types = append(types, s)
	}
	if fmt.Sprint(types) != "[suppression.added suppression.removed]" {
		t.Fatalf("the first entry's stream: %v", types)
	}
}

// TestSuppressionPagesCoverTheListOnce: pages by cursor list every entry once, newest first,
// and a forged cursor is refused naming it.
func TestSuppressionPagesCoverTheListOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	store := postgres.NewSuppressionStore(b.schema.Pool)
	base := time.Now().UTC().Truncate(time.Microsecond)
	const n = 25
	for i := range n {
		if _, _, err := store.AddSuppression(ctx, domain.Suppression{Tenant: "acme", Channel: "sms", Recipient: fmt.Sprintf("+1500555%04d", i),
			Source: domain.SuppressionImport, CreatedAt: base.Add(time.Duration(i%5) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	cursor := ""
	var last time.Time
	for pages := 0; pages < 10; pages++ {
		page, next, err := store.ListSuppressions(ctx, "acme", commands.SuppressionFilter{Limit: 7, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if seen[e.ID] {
				t.Fatalf("%s listed twice", e.ID)
			}
			if !last.IsZero() && e.CreatedAt.After(last) {
				t.Fatalf("not newest first: %s after %s", e.CreatedAt, last)
			}
			seen[e.ID], last = true, e.CreatedAt
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != n {
		t.Fatalf("pages listed %d entries, want %d", len(seen), n)
	}
	var field *commands.InvalidField
	if _, _, err := store.ListSuppressions(ctx, "acme", commands.SuppressionFilter{Cursor: "bm9wZQ"}); !errors.As(err, &field) || field.Field != "cursor" {
		t.Fatalf("forged cursor: %v, want a refusal naming cursor", err)
	}
}

// TestPreferencesAreEventsAndProbeOnlyTheirCategory: an opt-out is recorded once (setting it
// again records nothing), blocks only its category, and opting back in is another event.
func TestPreferencesAreEventsAndProbeOnlyTheirCategory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	store := postgres.NewSuppressionStore(b.schema.Pool)
	now := time.Now().UTC().Truncate(time.Microsecond)
	p := domain.Preference{Channel: "email", Recipient: "a@example.com", Category: "marketing", OptedOut: true, Source: domain.PreferenceByAPI, UpdatedAt: now}
	for range 2 {
		got, err := store.SetPreference(ctx, "acme", p)
		if err != nil || !got.OptedOut || got.Category != "marketing" {
			t.Fatalf("set: %+v %v", got, err)
		}
	}
	ref := []commands.RecipientRef{{Channel: "email", Recipient: "a@example.com"}}
	for category, want := range map[string]bool{"marketing": true, "account": false, "": false} {
		blocks, err := store.Blocks(ctx, "acme", category, ref)
		if err != nil || blocks[0].Blocks() != want || (want && blocks[0].OptedOut != "marketing") {
			t.Fatalf("probe of category %q: %+v %v, want blocked=%v", category, blocks, err, want)
		}
	}
	p.OptedOut = false
	if _, err := store.SetPreference(ctx, "acme", p); err != nil {
		t.Fatal(err)
	}
	if blocks, _ := store.Blocks(ctx, "acme", "marketing", ref); blocks[0].Blocks() {
		t.Fatalf("after opting back in: %+v", blocks)
	}
	var events int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM recipient_events WHERE type = 'preference.set'`).Scan(&events); err != nil || events != 2 {
		t.Fatalf("%d preference events (%v), want 2: the repeat records nothing", events, err)
	}
	list, err := store.Preferences(ctx, "acme", "email", "a@example.com")
	if err != nil || len(list) != 1 || list[0].OptedOut {
		t.Fatalf("preferences: %+v %v", list, err)
	}
}

// TestLoadProbingReadsTheStreamAndTheProbeAtOnce: the stream as Load gives it, with the block of
// the recipient given (none, then its entry), and not found for an unknown id.
func TestLoadProbingReadsTheStreamAndTheProbeAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	store := postgres.NewSuppressionStore(b.schema.Pool)
	d, events := acceptedEvents(t)
	if err := b.store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	ref := commands.RecipientRef{Channel: "webhook", Recipient: d.Recipient()}
	got, block, err := b.store.LoadProbing(ctx, d.ID(), "acme", "", ref)
	if err != nil || len(got) != 1 || got[0].Type != domain.EventAccepted || block.Blocks() {
		t.Fatalf("before the suppression: %d events, %+v, %v", len(got), block, err)
	}
	entry, _, err := store.AddSuppression(ctx, domain.Suppression{Tenant: "acme", Channel: "webhook", Recipient: d.Recipient(),
		Source: domain.SuppressionManual, CreatedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, block, err = b.store.LoadProbing(ctx, d.ID(), "acme", "", ref); err != nil || block.Suppression == nil || block.Suppression.ID != entry.ID {
		t.Fatalf("after the suppression: %+v, %v; want entry %s", block, err, entry.ID)
	}
	if _, _, err := b.store.LoadProbing(ctx, uuid.Must(uuid.NewV7()).String(), "acme", "", ref); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("unknown id: %v, want not found", err)
	}
}

// TestBlocksBatcherAnswersEachProbeItsOwn: concurrent probes of several tenants and categories,
// shared in statements, each get the blocks of their own recipients.
func TestBlocksBatcherAnswersEachProbeItsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	store := postgres.NewSuppressionStore(b.schema.Pool)
	batcher := postgres.NewBlocksBatcher(store, 2)
	defer batcher.Close()
	now := time.Now().UTC()
	for _, tenant := range []string{"t0", "t1"} {
		if _, _, err := store.AddSuppression(ctx, domain.Suppression{Tenant: tenant, Channel: "sms", Recipient: "+15005550000" + tenant[1:],
			Source: domain.SuppressionManual, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.SetPreference(ctx, "t0", domain.Preference{Channel: "sms", Recipient: "+150055500009", Category: "news",
		OptedOut: true, Source: domain.PreferenceByAPI, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	refs := []commands.RecipientRef{{Channel: "sms", Recipient: "+150055500000"}, {Channel: "sms", Recipient: "+150055500001"},
		{Channel: "sms", Recipient: "+150055500009"}}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Go(func() {
			tenant, category := []string{"t0", "t1"}[i%2], []string{"", "news"}[i/2%2]
			blocks, err := batcher.Blocks(ctx, tenant, category, refs)
			if err != nil {
				errs <- err
				return
			}
			want := []bool{tenant == "t0", tenant == "t1", tenant == "t0" && category == "news"}
			for k := range refs {
				if blocks[k].Blocks() != want[k] {
					errs <- fmt.Errorf("probe %d (%s, %q): recipient %d blocked=%v, want %v", i, tenant, category, k, blocks[k].Blocks(), want[k])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

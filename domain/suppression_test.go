package domain

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// TestSuppressOnlyBeforeAnAttemptIsUnderWay: a delivery is suppressed from accepted, scheduled
// or queued, naming its entry and evidence; once an attempt is under way (processing) the table
// refuses it, and nothing suppresses with an empty block.
func TestSuppressOnlyBeforeAnAttemptIsUnderWay(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	entry := &Suppression{ID: "s-1", Source: SuppressionByProvider, Reason: "the provider answered 410",
		Evidence: SuppressionEvidence{DeliveryID: "d-0", EventVersion: 4, Provider: "webhook", ProviderCode: "410"}}
	fresh := func() *Delivery {
		d, _, err := Accept(AcceptSpec{ID: "d-1", Tenant: "acme", Channel: "webhook", Recipient: "https://h/p",
			Payload: json.RawMessage(`{}`), Priority: PriorityNormal, MaxAttempts: 3, Category: "marketing"}, now)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if _, err := fresh().Suppress(Block{}, now); err == nil {
		t.Fatal("an empty block suppressed")
	}
	accepted := fresh()
	events, err := accepted.Suppress(Block{Suppression: entry}, now)
	if err != nil || accepted.State() != StateSuppressed || !accepted.State().Terminal() {
		t.Fatalf("from accepted: %v, state %s", err, accepted.State())
	}
	var data Suppressed
	_ = json.Unmarshal(events[0].Data, &data)
	if data.By != SuppressedByList || data.SuppressionID != "s-1" || data.Evidence == nil || data.Evidence.ProviderCode != "410" || data.From != StateAccepted {
		t.Fatalf("event data %+v", data)
	}
	scheduled := fresh()
	if _, err := scheduled.Schedule(now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	if _, err := scheduled.Suppress(Block{OptedOut: "marketing"}, now); err != nil || scheduled.Suppression().Category != "marketing" {
		t.Fatalf("from scheduled: %v %+v", err, scheduled.Suppression())
	}
	queued := fresh()
	_, _ = queued.Queue(now)
	if _, err := queued.Suppress(Block{Suppression: entry}, now); err != nil || queued.Suppression().Attempt != 1 || queued.Suppression().From != StateQueued {
		t.Fatalf("from queued: %v %+v", err, queued.Suppression())
	}
	processing := fresh()
	_, _ = processing.Queue(now)
	_, _ = processing.StartAttempt("webhook", now)
	var refused *TransitionError
	if _, err := processing.Suppress(Block{Suppression: entry}, now); !errors.As(err, &refused) {
		t.Fatalf("from processing: %v, want a transition error", err)
	}
	if processing.Category() != "marketing" || processing.RecipientKey() != "https://h/p" {
		t.Fatalf("category %q, key %q", processing.Category(), processing.RecipientKey())
	}
}

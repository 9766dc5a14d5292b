package commands_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestStaleKnownIsDecidedAgainOnTheNewHistory holds decide's conflict loop to its promise: a
// command handed a delivery as it was (RecordOutcome's Known) while another writer moved it
// meets a conflict on its append (here the attempt's closing key, taken by the unknown), reads
// the stream again and decides on what is there.
// Here the worker that made the call reports delivered with the delivery it saw at the start,
// after a redelivered copy of its message marked the attempt unknown: the outcome must become
// the unknown's resolution, not a second close of the attempt nor an error.
func TestStaleKnownIsDecidedAgainOnTheNewHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newOperatorFixture(t)
	d := acceptedDelivery(t, f.store)
	if dec := f.startAttempt(t, d, 1, false); dec != commands.StartProceed {
		t.Fatalf("start: %s", dec)
	}
	stream, err := f.store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	known, err := domain.Rehydrate(stream)
	if err != nil {
		t.Fatal(err)
	}
	if dec := f.startAttempt(t, d, 1, true); dec != commands.StartRecordedUnknown {
		t.Fatalf("redelivered start: %s, want %s", dec, commands.StartRecordedUnknown)
	}

	state, err := f.record.Handle(ctx, commands.RecordOutcome{DeliveryID: d.ID(), Attempt: 1, Known: known,
		Outcome: domain.Outcome{Kind: domain.OutcomeDelivered, Provider: "webhook", StatusCode: 200}})
	if err != nil || state != domain.StateDelivered {
		t.Fatalf("outcome with a stale known: %s %v, want delivered", state, err)
	}
	types := eventTypes(t, f.store, d.ID())
	want := []domain.EventType{domain.EventAccepted, domain.EventQueued, domain.EventAttemptStarted,
		domain.EventOutcomeUnknown, domain.EventReconciledDelivered}
	if !slices.Equal(types, want) {
		t.Fatalf("history = %v, want %v", types, want)
	}
	stream, err = f.store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	var res domain.Resolution
	if err := json.Unmarshal(stream[len(stream)-1].Data, &res); err != nil || res.Actor != "worker" {
		t.Errorf("resolution data = %s (%v), want the worker as its actor", stream[len(stream)-1].Data, err)
	}
}

// TestNewChannelsRefusesEveryProblemAtOnce: the registry refuses a badly formed or repeated
// name, a channel without a provider or a check, and an empty set, naming each problem.
func TestNewChannelsRefusesEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	check := func(string, json.RawMessage) error { return nil }
	if _, err := commands.NewChannels(); err == nil || !strings.Contains(err.Error(), "no channels") {
		t.Errorf("no channels: %v, want a refusal", err)
	}
	_, err := commands.NewChannels(
		commands.Channel{Name: "Web Hook", Check: check},
		commands.Channel{Name: "sms", Check: check},
		commands.Channel{Name: "sms", Check: check},
		commands.Channel{Name: "email"},
	)
	if err == nil {
		t.Fatal("NewChannels accepted bad channels")
	}
	for _, want := range []string{`channel name "Web Hook"`, `channel "sms" is registered twice`,
		`channel "sms" has no provider`, `channel "email" has no provider`, `channel "email" has no recipient check`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
}

// TestChannelsNormalize: the registry applies the named channel's Normalize, and gives the
// recipient as it is for a channel without one or a channel it does not serve.
func TestChannelsNormalize(t *testing.T) {
	t.Parallel()
	check := func(string, json.RawMessage) error { return nil }
	channels, err := commands.NewChannels(
		commands.Channel{Name: "chat", Providers: []commands.Sender{&countingSender{}}, Check: check, Normalize: strings.ToLower},
		commands.Channel{Name: "plain", Providers: []commands.Sender{&countingSender{}}, Check: check},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ channel, recipient, want string }{
		{"chat", "@News", "@news"},
		{"plain", "@News", "@News"},
		{"pigeon", "@News", "@News"},
	} {
		if got := channels.Normalize(tt.channel, tt.recipient); got != tt.want {
			t.Errorf("Normalize(%q, %q) = %q, want %q", tt.channel, tt.recipient, got, tt.want)
		}
	}
}

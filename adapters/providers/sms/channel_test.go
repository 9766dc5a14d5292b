package sms

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestCheckRecipient: E.164 only, and every refusal names the recipient field.
func TestCheckRecipient(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"+14155550100", "+4930123456", "+12345678", "+123456789012345"} {
		if err := Check(ok, json.RawMessage(`{"text":"hi"}`)); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []struct{ recipient, reasonHas string }{
		{"", "required"},
		{"14155550100", "E.164"},
		{"004930123456", "E.164"},
		{"+0123456789", "does not start with 0"},
		{"+1 415 555 0100", "digits only"},
		{"+1-415-555-0100", "digits only"},
		{"+1234567", "8 to 15 digits"},
		{"+1234567890123456", "8 to 15 digits"},
		{"+14155550100\n", "digits only"},
		{"+١٢٣٤٥٦٧٨٩", "digits only"}, // Arabic-Indic digits are not ASCII digits
	} {
		err := Check(bad.recipient, json.RawMessage(`{"text":"hi"}`))
		var invalid *commands.InvalidField
		if !errors.As(err, &invalid) || invalid.Field != "recipient" {
			t.Errorf("Check(%q) = %v, want an InvalidField on recipient", bad.recipient, err)
			continue
		}
		if !strings.Contains(invalid.Reason, bad.reasonHas) {
			t.Errorf("Check(%q) reason = %q, want it to say %q", bad.recipient, invalid.Reason, bad.reasonHas)
		}
		if !errors.Is(err, domain.ErrInvalidDelivery) {
			t.Errorf("Check(%q) = %v, want it to be an invalid delivery", bad.recipient, err)
		}
	}
}

// TestCheckPayload: a text is required, a non-empty string within Twilio's 1600 characters
// (counted as UTF-16 code units); every refusal names its field.
func TestCheckPayload(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", MaxTextLength)
	emoji := strings.Repeat("😀", MaxTextLength/2)
	for _, ok := range []string{
		`{"text":"Your code is 123456"}`,
		`{"text":"line one\nline two","order":42}`,
		`{"text":"` + long + `"}`,
		`{"text":"` + emoji + `"}`,
	} {
		if err := Check("+14155550100", json.RawMessage(ok)); err != nil {
			t.Errorf("Check(%.40s) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []struct{ payload, field, reasonHas string }{
		{`not json`, "payload", "JSON object"},
		{`["text"]`, "payload", "JSON object"},
		{`null`, "payload", "JSON object"},
		{`{}`, "payload.text", "required"},
		{`{"Text":"hi"}`, "payload.text", "required"},
		{`{"text":null}`, "payload.text", "required"},
		{`{"text":42}`, "payload.text", "string"},
		{`{"text":""}`, "payload.text", "empty"},
		{`{"text":" \n\t"}`, "payload.text", "empty"},
		{`{"text":"` + long + `a"}`, "payload.text", "at most 1600"},
		{`{"text":"` + emoji + `😀"}`, "payload.text", "1602 characters"},
	} {
		err := Check("+14155550100", json.RawMessage(bad.payload))
		var invalid *commands.InvalidField
		if !errors.As(err, &invalid) || invalid.Field != bad.field {
			t.Errorf("Check(%.40s) = %v, want an InvalidField on %s", bad.payload, err, bad.field)
			continue
		}
		if !strings.Contains(invalid.Reason, bad.reasonHas) {
			t.Errorf("Check(%.40s) reason = %q, want it to say %q", bad.payload, invalid.Reason, bad.reasonHas)
		}
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	text, err := Text(json.RawMessage(`{"text":"Order 42 \u00e9 shipped","subject":"ignored"}`))
	if err != nil || text != "Order 42 é shipped" {
		t.Errorf("Text = %q, %v; want the text member", text, err)
	}
}

func TestDestination(t *testing.T) {
	t.Parallel()
	if got := Destination("+14155550100"); got != "+14155550100" {
		t.Errorf("Destination = %q, want the number", got)
	}
}

// stubSender is a provider of the channel for the registry tests.
type stubSender struct{ name string }

func (s *stubSender) Provider() string   { return s.name }
func (s *stubSender) Deduplicates() bool { return false }
func (s *stubSender) Send(context.Context, commands.WorkMessage) domain.Outcome {
	return domain.Outcome{Kind: domain.OutcomeAccepted, Provider: s.name}
}

// TestChannel: the providers in failover order, the checks and limits of the channel, and a nil
// provider refused by the registry rather than called.
func TestChannel(t *testing.T) {
	t.Parallel()
	first, second := &stubSender{"twilio"}, &stubSender{"twilio-backup"}
	ch := Channel(first, second)
	if ch.Name != Name || len(ch.Providers) != 2 || ch.Providers[0] != first || ch.Providers[1] != second {
		t.Fatalf("Channel = %+v, want sms with the providers in order", ch)
	}
	if ch.ProviderLimit != (commands.Limit{Concurrency: 16}) {
		t.Errorf("ProviderLimit = %+v, want concurrency 16", ch.ProviderLimit)
	}
	if ch.DestinationLimit != (commands.Limit{Rate: 1, Burst: 3}) {
		t.Errorf("DestinationLimit = %+v, want 1 a second with a burst of 3", ch.DestinationLimit)
	}
	if ch.Check("+14155550100", json.RawMessage(`{"text":"hi"}`)) != nil || ch.Check("nope", json.RawMessage(`{"text":"hi"}`)) == nil {
		t.Error("the channel's Check is not sms.Check")
	}
	if ch.Destination("+14155550100") != "+14155550100" {
		t.Error("the channel's Destination is not the number")
	}
	if _, err := commands.NewChannels(ch); err != nil {
		t.Errorf("NewChannels(sms) = %v, want it registered", err)
	}

	var missing *stubSender
	withNil := Channel(first, missing, nil)
	if withNil.Providers[1] != nil || withNil.Providers[2] != nil {
		t.Errorf("Providers = %#v, want the nil pointer and the nil interface kept as nil", withNil.Providers)
	}
	if _, err := commands.NewChannels(withNil); err == nil || !strings.Contains(err.Error(), "provider 2 is nil") {
		t.Errorf("NewChannels(with nil providers) = %v, want provider 2 refused as nil", err)
	}
}

// TestNormalize: CheckNumber takes E.164 only, one spelling per number, so a number's normal
// form is the number as given; the spellings a normalisation would have to fold (spaces,
// dashes, dots, brackets, a national form) are the ones CheckNumber refuses, which is what makes
// the identity exact.
func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"+14155550100", "+4930123456", "+12345678", "+123456789012345"} {
		if got := Normalize(n); got != n {
			t.Errorf("Normalize(%q) = %q, want it as given", n, got)
		}
	}
	for _, n := range []string{"+1 415 555 0100", "+1-415-555-0100", "+1.415.555.0100", "+1 (415) 5550100", "(415) 555-0100", "04155550100"} {
		if CheckNumber(n) == nil {
			t.Errorf("CheckNumber(%q) accepts it: Normalize would have to fold it into its E.164 form", n)
		}
	}
	if got := Channel().Normalize("+14155550100"); got != "+14155550100" {
		t.Errorf("the channel's Normalize gives %q, want +14155550100", got)
	}
}

package email

import (
	"encoding/json"
	"errors"
	"net/mail"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestCheck: every refusal is an InvalidField naming its field; the valid forms pass.
func TestCheck(t *testing.T) {
	t.Parallel()
	const valid = `{"subject":"Shipped","text":"Order 42."}`
	for _, tc := range []struct{ recipient, payload string }{
		{"ada@example.org", valid},
		{"Ada Lovelace <ada@example.org>", valid},
		{`"Lovelace, Ada" <ada@example.org>`, valid},
		{"<ada@example.org>", valid},
		{"ada@example.org", `{"subject":"Shipped","html":"<p>Order 42.</p>"}`},
		{"ada@example.org", `{"subject":"Shipped","text":"","html":"<p>Order 42.</p>"}`},
		{"ada@example.org", `{"subject":"Shipped","text":"Order 42.","html":"<p>Order 42.</p>","order":42,"tags":["a"]}`},
		{strings.Repeat("a", MaxLocalPart) + "@example.org", valid},
		{"ada@" + strings.Repeat("d", MaxDomain), valid},
		{"ada@example.org", `{"subject":"` + strings.Repeat("s", MaxSubject) + `","text":"Order 42."}`},
		{"ada@example.org", `{"subject":"` + strings.Repeat("é", MaxSubject/2) + `","text":"Order 42."}`},
	} {
		if err := Check(tc.recipient, json.RawMessage(tc.payload)); err != nil {
			t.Errorf("Check(%q, %s) = %v, want accepted", tc.recipient, tc.payload, err)
		}
	}
	for _, tc := range []struct{ recipient, payload, field string }{
		{"", valid, "recipient"},
		{"not an address", valid, "recipient"},
		{"ada@", valid, "recipient"},
		{"@example.org", valid, "recipient"},
		{"ada@example.org, bob@example.org", valid, "recipient"},
		{"ada@example.org\r\nBcc: eve@example.org", valid, "recipient"},
		{"Ada <ada@example.org> trailing", valid, "recipient"},
		{"https://example.org/hook", valid, "recipient"},
		{"ada@example.org", `[]`, "payload"},
		{"ada@example.org", `{"text":"Order 42."}`, "payload.subject"},
		{"ada@example.org", `{"subject":"","text":"Order 42."}`, "payload.subject"},
		{"ada@example.org", `{"subject":"   ","text":"Order 42."}`, "payload.subject"},
		{"ada@example.org", `{"subject":"Shipped\r\nBcc: eve@example.org","text":"Order 42."}`, "payload.subject"},
		{"ada@example.org", `{"subject":42,"text":"Order 42."}`, "payload.subject"},
		{"ada@example.org", `{"subject":null,"text":"Order 42."}`, "payload.subject"},
		{"ada@example.org", `{"subject":"Shipped"}`, "payload.text"},
		{"ada@example.org", `{"subject":"Shipped","text":"","html":""}`, "payload.text"},
		{"ada@example.org", `{"subject":"Shipped","text":{"body":"x"}}`, "payload.text"},
		{"ada@example.org", `{"subject":"Shipped","text":"Order 42.","html":["<p>"]}`, "payload.html"},
		// Issue 23, row 9: RFC 5321's 64 octets of a local part, RFC 5322's 998 of a line.
		{strings.Repeat("a", 300) + "@example.org", valid, "recipient"},
		{strings.Repeat("a", MaxLocalPart+1) + "@example.org", valid, "recipient"},
		{"Ada <" + strings.Repeat("a", MaxLocalPart+1) + "@example.org>", valid, "recipient"},
		{"ada@" + strings.Repeat("d", MaxDomain+1), valid, "recipient"},
		{"ada@example.org", `{"subject":"` + strings.Repeat("s", 10000) + `","text":"Order 42."}`, "payload.subject"},
		{"ada@example.org", `{"subject":"` + strings.Repeat("s", MaxSubject+1) + `","text":"Order 42."}`, "payload.subject"},
		{"ada@example.org", `{"subject":"` + strings.Repeat("é", MaxSubject/2) + `s","text":"Order 42."}`, "payload.subject"},
	} {
		err := Check(tc.recipient, json.RawMessage(tc.payload))
		var field *commands.InvalidField
		if !errors.As(err, &field) || field.Field != tc.field || field.Reason == "" {
			t.Errorf("Check(%q, %s) = %v, want an InvalidField naming %s", tc.recipient, tc.payload, err, tc.field)
			continue
		}
		if !errors.Is(err, domain.ErrInvalidDelivery) {
			t.Errorf("Check(%q, %s) = %v, want a domain.ErrInvalidDelivery", tc.recipient, tc.payload, err)
		}
	}
	err := Check("ada@example.org", json.RawMessage(`{"subject":"Shipped"}`))
	if err == nil || err.Error() != "payload.text: text or html is required" {
		t.Errorf("missing bodies: %v, want payload.text: text or html is required", err)
	}
}

func TestDestination(t *testing.T) {
	t.Parallel()
	for recipient, want := range map[string]string{
		"ada@example.org":                     "example.org",
		"Ada Lovelace <Ada@Mail.Example.ORG>": "mail.example.org",
		`"a@b" <ada@example.org>`:             "example.org",
		"broken <ada@Example.org":             "example.org",
		"no domain":                           "",
	} {
		if got := Destination(recipient); got != want {
			t.Errorf("Destination(%q) = %q, want %q", recipient, got, want)
		}
	}
}

// TestChannel: the registry gets the channel's name, its providers in order, its check, the
// recipient domain as destination and the provider limit.
func TestChannel(t *testing.T) {
	t.Parallel()
	primary := newSender(t, "127.0.0.1:2525", Config{Provider: "smtp-primary"})
	backup := newSender(t, "127.0.0.1:2526", Config{Provider: "smtp-backup"})
	ch := Channel(primary, backup)
	if ch.Name != "email" {
		t.Errorf("Name = %q, want email", ch.Name)
	}
	if len(ch.Providers) != 2 || ch.Providers[0].Provider() != "smtp-primary" || ch.Providers[1].Provider() != "smtp-backup" {
		t.Fatalf("Providers = %v, want smtp-primary then smtp-backup", ch.Providers)
	}
	if got := ch.Destination("Ada <ada@Example.org>"); got != "example.org" {
		t.Errorf("Destination = %q, want example.org", got)
	}
	if got, want := ch.ProviderLimit, (commands.Limit{Concurrency: 16}); got != want {
		t.Errorf("ProviderLimit = %+v, want %+v", got, want)
	}
	if ch.DestinationLimit != (commands.Limit{}) {
		t.Errorf("DestinationLimit = %+v, want zero (the per-host rule applies)", ch.DestinationLimit)
	}
	var field *commands.InvalidField
	if err := ch.Check("nobody", json.RawMessage(`{}`)); !errors.As(err, &field) || field.Field != "recipient" {
		t.Errorf("Check of a bad recipient = %v, want an InvalidField naming recipient", err)
	}
	if _, err := commands.NewChannels(ch); err != nil {
		t.Errorf("the registry refuses the channel: %v", err)
	}
	if _, err := commands.NewChannels(Channel()); err == nil {
		t.Error("the registry takes an email channel without providers")
	}
}

// TestNormalize: a recipient's normal form is its address alone, lower-cased whole, whatever
// display name, comment or angle brackets it came with; what Check refuses comes back
// unchanged. A normal form is itself a recipient the channel takes, and its own normal form.
func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"a@example.com", "a@example.com"},
		{"Ann <a@example.com>", "a@example.com"},
		{"Ann <A@Example.COM>", "a@example.com"},
		{"<a@example.com>", "a@example.com"},
		{`"Lovelace, Ada" <Ada@Example.org>`, "ada@example.org"},
		{"ada@example.org (Ada)", "ada@example.org"},
		{"=?utf-8?q?Ad=C3=A9le?= <Adele@Example.org>", "adele@example.org"},
		{"first.last+tag@Sub.Example.org", "first.last+tag@sub.example.org"},
		{`"ann"@Example.org`, "ann@example.org"},
		{`Ann <"Ann Lee"@Example.org>`, `"ann lee"@example.org`},
		{`"a\"b"@example.org`, `"a\"b"@example.org`},
		{"Ädele <Ädele@Exämple.org>", "ädele@exämple.org"},
		// Refused by Check: returned as they are.
		{"not an address", "not an address"},
		{"A@Example.com, b@example.com", "A@Example.com, b@example.com"},
		{"A@Example.com\r\nBcc: x@example.com", "A@Example.com\r\nBcc: x@example.com"},
		{"", ""},
	} {
		got := Normalize(tt.in)
		if got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
			continue
		}
		if _, err := parseRecipient(tt.in); err != nil {
			continue
		}
		if _, err := parseRecipient(got); err != nil {
			t.Errorf("normal form %q of %q is refused: %v", got, tt.in, err)
		}
		if again := Normalize(got); again != got {
			t.Errorf("Normalize(%q) = %q: a normal form must be its own", got, again)
		}
	}
	// Lower case is longer in UTF-8 for a few letters (Ⱥ is 2 octets, ⱥ 3): the normal form is a
	// key, and may then be over the local part's limit.
	long := strings.Repeat("a", 62) + "Ⱥ@example.org"
	if got, want := Normalize(long), strings.Repeat("a", 62)+"ⱥ@example.org"; got != want {
		t.Errorf("Normalize(%q) = %q, want %q", long, got, want)
	}
	if got := Channel().Normalize("Ann <A@Example.COM>"); got != "a@example.com" {
		t.Errorf("the channel's Normalize gives %q, want a@example.com", got)
	}
}

// FuzzNormalize: the normal form of any recipient the channel takes is a recipient it takes, its
// own normal form, and the same address but for case.
func FuzzNormalize(f *testing.F) {
	for _, seed := range []string{"Ann <A@Example.COM>", `"Ann Lee"@example.org`, `"ann"@example.org`, "a@example.com (Ann)",
		"=?utf-8?q?Ad=C3=A9le?= <Adele@Example.org>", `"a\"b"@example.org`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Normalize(in)
		addr, err := parseRecipient(in)
		if err != nil {
			if out != in {
				t.Fatalf("Normalize(%q) = %q, want a refused recipient as it is", in, out)
			}
			return
		}
		if again := Normalize(out); again != out {
			t.Fatalf("Normalize(%q) = %q, want its own normal form", out, again)
		}
		bare := strings.TrimSuffix(strings.TrimPrefix((&mail.Address{Address: addr.Address}).String(), "<"), ">")
		if !strings.EqualFold(bare, out) {
			t.Fatalf("Normalize(%q) = %q, want %q but for case", in, out, bare)
		}
		normal, err := parseRecipient(out)
		switch {
		case err != nil && len(out) == len(bare):
			t.Fatalf("normal form %q of %q is refused: %v", out, in, err)
		case err == nil && (normal.Name != "" || !strings.EqualFold(addr.Address, normal.Address)):
			t.Fatalf("Normalize(%q) = %q: reads as %+v, want the address %q but for case, without a name", in, out, normal, addr.Address)
		}
	})
}

package webhook

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/deliveryledger/ledger/commands"
)

func TestValidateURL(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"https://example.com/hook", "http://example.com", "HTTPS://EXAMPLE.COM/x?y=1", "https://127.0.0.1:8443/h", "https://[::1]/h",
		"https://example.com:1/h", "https://example.com:65535/h", "https://example.com:/h"} {
		if err := ValidateURL(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/relative/path", "example.com/hook", "ftp://example.com/f", "mailto:a@example.com",
		"https:///nohost", "https://:443/h", "http://exa mple.com/", "javascript:alert(1)",
		"https://example.com:0/h", "https://example.com:99999/h", "https://example.com:65536/h",
		"https://user:secret@example.com/h", "https://user@example.com/h", "https://:secret@example.com/h"} {
		if err := ValidateURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestChannel: the channel the registry gets names itself and its provider with Name, checks
// recipients with ValidateURL (naming the recipient field), limits per host, and gives its
// provider the default concurrency cap.
func TestChannel(t *testing.T) {
	t.Parallel()
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ch := Channel(s)
	if ch.Name != Name || len(ch.Providers) != 1 || ch.Providers[0].Provider() != Name {
		t.Fatalf("channel %q with providers %v, want %q with its one sender", ch.Name, ch.Providers, Name)
	}
	if got, want := ch.ProviderLimit, (commands.Limit{Concurrency: 256}); got != want {
		t.Errorf("provider limit = %+v, want %+v", got, want)
	}
	if got := ch.Destination("https://Example.com:443/hook"); got != "example.com" {
		t.Errorf("destination = %q, want example.com", got)
	}
	if err := ch.Check("https://example.com/hook", json.RawMessage(`{}`)); err != nil {
		t.Errorf("valid recipient refused: %v", err)
	}
	var field *commands.InvalidField
	if err := ch.Check("ftp://example.com/f", json.RawMessage(`{}`)); !errors.As(err, &field) || field.Field != "recipient" {
		t.Errorf("invalid recipient: %v, want an InvalidField naming recipient", err)
	}
	if _, err := commands.NewChannels(ch); err != nil {
		t.Errorf("the registry refuses the channel: %v", err)
	}
}

package telegram

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// text is a payload with that text and nothing else.
func text(s string) json.RawMessage {
	b, err := json.Marshal(map[string]string{"text": s})
	if err != nil {
		panic(err)
	}
	return b
}

func TestCheckAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		recipient string
		payload   json.RawMessage
	}{
		{"private chat id", "42", text("hello")},
		{"group chat id is negative", "-42", text("hello")},
		{"supergroup or channel id", "-1001234567890", text("hello")},
		{"largest int64", "9223372036854775807", text("hello")},
		{"smallest int64", "-9223372036854775808", text("hello")},
		{"username of 5 characters", "@abcde", text("hello")},
		{"username of 32 characters", "@" + strings.Repeat("a", 32), text("hello")},
		{"username with digits, underscores and capitals", "@Ledger_News_2", text("hello")},
		{"4096 code points, more bytes", "42", text(strings.Repeat("é", MaxTextLength))},
		{"4096 emoji (8192 UTF-16 units)", "42", text(strings.Repeat("🚚", MaxTextLength))},
		{"parse_mode HTML", "42", json.RawMessage(`{"text":"<b>shipped</b>","parse_mode":"HTML"}`)},
		{"parse_mode MarkdownV2", "42", json.RawMessage(`{"text":"*shipped*","parse_mode":"MarkdownV2"}`)},
		{"parse_mode null reads as absent", "42", json.RawMessage(`{"text":"hi","parse_mode":null}`)},
		{"other members are ignored", "42", json.RawMessage(`{"text":"hi","order":42,"subject":{"x":1}}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := Check(tt.recipient, tt.payload); err != nil {
				t.Errorf("Check(%q, %s) = %v, want nil", tt.recipient, tt.payload, err)
			}
		})
	}
}

func TestCheckRefusesNamingTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		recipient string
		payload   json.RawMessage
		field     string
	}{
		{"empty recipient", "", text("hi"), "recipient"},
		{"not a number or username", "alice", text("hi"), "recipient"},
		{"chat id 0", "0", text("hi"), "recipient"},
		{"plus sign", "+42", text("hi"), "recipient"},
		{"leading zero", "042", text("hi"), "recipient"},
		{"negative zero", "-0", text("hi"), "recipient"},
		{"spaces around", " 42", text("hi"), "recipient"},
		{"beyond int64", "9223372036854775808", text("hi"), "recipient"},
		{"below int64", "-9223372036854775809", text("hi"), "recipient"},
		{"a fraction", "42.5", text("hi"), "recipient"},
		{"bare @", "@", text("hi"), "recipient"},
		{"username of 4 characters", "@abcd", text("hi"), "recipient"},
		{"username of 33 characters", "@" + strings.Repeat("a", 33), text("hi"), "recipient"},
		{"username starting with a digit", "@1abcde", text("hi"), "recipient"},
		{"username starting with an underscore", "@_abcde", text("hi"), "recipient"},
		{"username with a hyphen", "@abc-de", text("hi"), "recipient"},
		{"username with a non-ASCII letter", "@abcdé", text("hi"), "recipient"},
		{"a t.me link", "https://t.me/ledger_news", text("hi"), "recipient"},
		{"payload not an object", "42", json.RawMessage(`"hi"`), "payload"},
		{"payload null", "42", json.RawMessage(`null`), "payload"},
		{"text missing", "42", json.RawMessage(`{"message":"hi"}`), "payload.text"},
		{"text matched by exact name only", "42", json.RawMessage(`{"Text":"hi"}`), "payload.text"},
		{"text null", "42", json.RawMessage(`{"text":null}`), "payload.text"},
		{"text empty", "42", text(""), "payload.text"},
		{"text only white space", "42", text(" \n\t "), "payload.text"},
		{"text a number", "42", json.RawMessage(`{"text":42}`), "payload.text"},
		{"text 4097 code points", "42", text(strings.Repeat("é", MaxTextLength+1)), "payload.text"},
		{"legacy Markdown", "42", json.RawMessage(`{"text":"hi","parse_mode":"Markdown"}`), "payload.parse_mode"},
		{"parse_mode in the wrong case", "42", json.RawMessage(`{"text":"hi","parse_mode":"html"}`), "payload.parse_mode"},
		{"parse_mode empty", "42", json.RawMessage(`{"text":"hi","parse_mode":""}`), "payload.parse_mode"},
		{"parse_mode not a string", "42", json.RawMessage(`{"text":"hi","parse_mode":1}`), "payload.parse_mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Check(tt.recipient, tt.payload)
			var field *commands.InvalidField
			if !errors.As(err, &field) {
				t.Fatalf("Check(%q, %s) = %v, want an *InvalidField naming %s", tt.recipient, tt.payload, err, tt.field)
			}
			if field.Field != tt.field {
				t.Errorf("Field = %q (%v), want %q", field.Field, err, tt.field)
			}
			if field.Reason == "" {
				t.Error("Reason is empty, want what is wrong")
			}
			if !errors.Is(err, domain.ErrInvalidDelivery) {
				t.Errorf("%v is not a domain.ErrInvalidDelivery", err)
			}
		})
	}
}

func TestDestination(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"42":             "42",
		"-1001234567890": "-1001234567890",
		// Usernames are case-insensitive: one chat, one limit.
		"@Ledger_News": "@ledger_news",
		"@ledger_news": "@ledger_news",
		// What Check refuses keys on itself, unchanged.
		"+42": "+42",
	}
	for recipient, want := range tests {
		if got := Destination(recipient); got != want {
			t.Errorf("Destination(%q) = %q, want %q", recipient, got, want)
		}
	}
}

// TestChannel: the channel the registry gets names itself with Name, lists its senders in the
// order given, checks with Check, keys the per-chat limit on the normalised chat, and carries
// Telegram's published limits.
func TestChannel(t *testing.T) {
	t.Parallel()
	primary := newSender(t, Config{Provider: "telegram", Token: testToken})
	backup := newSender(t, Config{Provider: "telegram-backup", Token: otherToken})

	ch := Channel(primary, backup)

	if ch.Name != "telegram" || Name != "telegram" {
		t.Errorf("Name = %q, want telegram", ch.Name)
	}
	if len(ch.Providers) != 2 || ch.Providers[0] != commands.Sender(primary) || ch.Providers[1] != commands.Sender(backup) {
		t.Fatalf("Providers = %v, want [primary backup] in that order", ch.Providers)
	}
	if got, want := ch.ProviderLimit, (commands.Limit{Rate: 30, Burst: 30}); got != want {
		t.Errorf("ProviderLimit = %+v, want %+v", got, want)
	}
	if got, want := ch.DestinationLimit, (commands.Limit{Rate: 1, Burst: 1}); got != want {
		t.Errorf("DestinationLimit = %+v, want %+v", got, want)
	}
	if got := ch.Destination("@Ledger_News"); got != "@ledger_news" {
		t.Errorf("Destination(@Ledger_News) = %q, want @ledger_news", got)
	}
	if err := ch.Check("-1001234567890", text("hi")); err != nil {
		t.Errorf("Check refuses a valid recipient: %v", err)
	}
	var field *commands.InvalidField
	if err := ch.Check("@no", text("hi")); !errors.As(err, &field) || field.Field != "recipient" {
		t.Errorf("Check(@no) = %v, want an InvalidField naming recipient", err)
	}
	if _, err := commands.NewChannels(ch); err != nil {
		t.Errorf("the registry refuses the channel: %v", err)
	}
}

// TestChannelWithoutUsableSenders: a nil sender or none at all reaches the registry as a
// problem it reports, not as a provider that panics at the first attempt.
func TestChannelWithoutUsableSenders(t *testing.T) {
	t.Parallel()
	s := newSender(t, Config{Provider: "telegram", Token: testToken})
	if ch := Channel(s, nil); ch.Providers[1] != nil {
		t.Errorf("Providers[1] = %#v, want a nil commands.Sender", ch.Providers[1])
	}
	if _, err := commands.NewChannels(Channel(s, nil)); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("NewChannels(Channel(s, nil)) = %v, want the nil provider refused", err)
	}
	if _, err := commands.NewChannels(Channel()); err == nil || !strings.Contains(err.Error(), "no provider") {
		t.Errorf("NewChannels(Channel()) = %v, want a channel without providers refused", err)
	}
}

// TestNormalize: a username's normal form is lower case (Telegram's usernames are
// case-insensitive); a chat id, group and channel ids included, is kept exactly; what Check
// refuses comes back unchanged. A normal form is itself a recipient the channel takes, and its
// own normal form.
func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"@chan_name", "@chan_name"},
		{"@CHAN_NAME", "@chan_name"},
		{"@Chan_Name", "@chan_name"},
		{"123456789", "123456789"},
		{"-1001234567890", "-1001234567890"},
		{"-42", "-42"},
		// Refused by Check: returned as they are.
		{"+123456789", "+123456789"},
		{"0123", "0123"},
		{"@ab", "@ab"},
		{"@CHAN NAME", "@CHAN NAME"},
		{"", ""},
	} {
		got := Normalize(tt.in)
		if got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
			continue
		}
		if _, err := parseChat(tt.in); err != nil {
			continue
		}
		if _, err := parseChat(got); err != nil {
			t.Errorf("normal form %q of %q is refused: %v", got, tt.in, err)
		}
		if again := Normalize(got); again != got {
			t.Errorf("Normalize(%q) = %q: a normal form must be its own", got, again)
		}
	}
	if got := Channel().Normalize("@CHAN_NAME"); got != "@chan_name" {
		t.Errorf("the channel's Normalize gives %q, want @chan_name", got)
	}
}

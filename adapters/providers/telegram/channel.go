package telegram

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/deliveryledger/ledger/commands"
)

// Name is the Telegram channel's name: in requests, the history, metrics and queue names. It is
// the one place the name is written.
const Name = "telegram"

// Telegram's published limits, from the Bot FAQ ("My bot is hitting limits, how do I avoid
// this?", https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this):
// "the API will not allow more than 30 messages per second or so" to many chats, and "avoid
// sending more than one message per second" inside one chat, with short bursts tolerated.
// Keeping under them is cheaper than collecting 429s: each one costs an attempt and a wait.
// The FAQ's third limit, 20 messages a minute to one group, is not modelled (a chat id does not
// say whether it is a group); a group that exceeds it answers 429 with retry_after, which the
// retry honours.
const (
	// ProviderRate is the messages a second one bot sends across all chats.
	ProviderRate = 30
	// ChatRate is the messages a second one bot sends to one chat.
	ChatRate = 1
)

// Limits of text messages (Bot API, sendMessage).
const (
	// MaxTextLength is the longest text, in characters (Unicode code points). Telegram counts
	// it after entity parsing, so with a parse_mode the check at acceptance is conservative:
	// markup counts too.
	MaxTextLength = 4096
)

// Parse modes Check accepts: the two current ones. Telegram's legacy "Markdown" is left out: its
// own documentation keeps it only for backward compatibility.
const (
	// ParseModeHTML: the text carries Telegram's subset of HTML tags.
	ParseModeHTML = "HTML"
	// ParseModeMarkdownV2: the text is Telegram's MarkdownV2, with its reserved characters
	// escaped by the caller.
	ParseModeMarkdownV2 = "MarkdownV2"
)

// Channel describes the Telegram channel for the registry: senders are its providers in
// failover order (one per bot), limited by Telegram's published per-bot and per-chat limits. A
// nil sender stays visible as nil, so that the registry refuses it instead of calling it.
func Channel(senders ...commands.Sender) commands.Channel {
	providers := make([]commands.Sender, len(senders))
	for i, s := range senders {
		if t, ok := s.(*Sender); !ok || t != nil {
			// A nil *Sender in a commands.Sender is not a nil interface: NewChannels would
			// accept it and the first attempt would panic.
			providers[i] = s
		}
	}
	return commands.Channel{
		Name:             Name,
		Providers:        providers,
		Check:            Check,
		Destination:      Destination,
		Normalize:        Normalize,
		ProviderLimit:    commands.Limit{Rate: ProviderRate, Burst: ProviderRate},
		DestinationLimit: commands.Limit{Rate: ChatRate, Burst: ChatRate},
	}
}

// Check is the channel's acceptance check: the recipient is a chat Telegram can address, and
// the payload has a text Telegram would take. What no bot could ever send is refused at the
// door rather than dead-lettered after an attempt. Members other than text and parse_mode are
// ignored. A refusal is a *commands.InvalidField naming recipient, payload, payload.text or
// payload.parse_mode.
func Check(recipient string, payload json.RawMessage) error {
	if _, err := parseChat(recipient); err != nil {
		return &commands.InvalidField{Field: "recipient", Reason: err.Error()}
	}
	m, err := readPayload(payload)
	if err != nil {
		return err
	}
	// Line breaks and tabs are a message's text; Telegram takes the other control characters
	// but no client shows them, so the chat would read something other than was accepted: a text
	// with ESC or BEL is a caller's mistake (or an attempt at a terminal escape), said at once.
	for i, r := range m.text {
		if (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || (r >= 0x7f && r <= 0x9f) {
			return &commands.InvalidField{Field: "payload.text", Reason: fmt.Sprintf(
				"holds the control character U+%04X at byte %d: a Telegram message carries text, line breaks and tabs, not control characters", r, i)}
		}
	}
	return nil
}

// Destination names the chat a recipient's calls are limited under: a chat id in canonical
// form, or @username in lower case, because Telegram usernames are case-insensitive and
// @News and @news are one chat with one limit. A recipient Check refuses is returned as it is.
func Destination(recipient string) string {
	c, err := parseChat(recipient)
	if err != nil {
		return recipient
	}
	return c.key()
}

// Normalize is a recipient's normal form on the channel: @username in lower case (Telegram
// usernames are case-insensitive: @News and @news are one chat), a chat id exactly as given
// (Check takes only its canonical decimal form, so "-1001234567890" has one spelling already). A
// recipient Check refuses is returned as it is. It is the chat's key, as Destination's.
func Normalize(recipient string) string {
	c, err := parseChat(recipient)
	if err != nil {
		return recipient
	}
	return c.key()
}

// chat is a recipient: a chat id, or a public username (id is then 0: Telegram has no chat 0).
type chat struct {
	id       int64
	username string // without the @
}

// username is a public chat's username as Telegram allows it (5 to 32 characters of letters,
// digits and underscores, starting with a letter).
var username = regexp.MustCompile(`^@[A-Za-z][A-Za-z0-9_]{4,31}$`)

// parseChat reads a recipient. Chat ids are taken in canonical decimal form only (no sign on
// positive ids, no leading zeros): the recipient is shown in every answer and keys the per-chat
// limit, so one chat must have one spelling.
func parseChat(recipient string) (chat, error) {
	if strings.HasPrefix(recipient, "@") {
		if !username.MatchString(recipient) {
			return chat{}, errors.New("a username must be @ and 5 to 32 letters, digits or underscores, starting with a letter")
		}
		return chat{username: recipient[1:]}, nil
	}
	id, err := strconv.ParseInt(recipient, 10, 64)
	if err != nil {
		var numErr *strconv.NumError
		if errors.As(err, &numErr) && errors.Is(numErr.Err, strconv.ErrRange) {
			return chat{}, errors.New("chat id is out of range (a 64-bit signed integer)")
		}
		return chat{}, errors.New("want a chat id (an integer, negative for groups and channels) or @username")
	}
	if id == 0 {
		return chat{}, errors.New("chat id 0 names no chat")
	}
	if strconv.FormatInt(id, 10) != recipient {
		return chat{}, errors.New("write the chat id in canonical form: no plus sign, no leading zeros")
	}
	return chat{id: id}, nil
}

// key is the chat's one spelling (see Destination).
func (c chat) key() string {
	if c.username != "" {
		return "@" + strings.ToLower(c.username)
	}
	return strconv.FormatInt(c.id, 10)
}

// chatID is the chat as the Bot API's chat_id takes it: an integer, or "@username".
func (c chat) chatID() any {
	if c.username != "" {
		return "@" + c.username
	}
	return c.id
}

// String is the chat as it was given, for the provider operation id.
func (c chat) String() string {
	if c.username != "" {
		return "@" + c.username
	}
	return strconv.FormatInt(c.id, 10)
}

// message is what the channel reads from a notification's payload.
type message struct {
	text      string
	parseMode string
}

// readPayload reads and checks the payload members the channel uses. Check and Send both call
// it, so a payload is read the same way at acceptance and at every attempt. Members are matched
// by their exact name (encoding/json would also take "Text" or "TEXT" for a struct field).
func readPayload(payload json.RawMessage) (message, *commands.InvalidField) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(payload, &members); err != nil || members == nil {
		return message{}, &commands.InvalidField{Field: "payload", Reason: "must be a JSON object with a text member"}
	}
	var m message
	raw, ok := members["text"]
	if !ok || isNull(raw) {
		return message{}, &commands.InvalidField{Field: "payload.text", Reason: "is required: the message's text"}
	}
	if err := json.Unmarshal(raw, &m.text); err != nil {
		return message{}, &commands.InvalidField{Field: "payload.text", Reason: "must be a string"}
	}
	switch n := utf8.RuneCountInString(m.text); {
	case strings.TrimSpace(m.text) == "":
		// Telegram trims the text and refuses what is left empty ("message text is empty").
		return message{}, &commands.InvalidField{Field: "payload.text", Reason: "must not be empty or only white space"}
	case n > MaxTextLength:
		return message{}, &commands.InvalidField{Field: "payload.text",
			Reason: "has " + strconv.Itoa(n) + " characters, Telegram takes at most " + strconv.Itoa(MaxTextLength)}
	}
	if raw, ok := members["parse_mode"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &m.parseMode); err != nil || (m.parseMode != ParseModeHTML && m.parseMode != ParseModeMarkdownV2) {
			return message{}, &commands.InvalidField{Field: "payload.parse_mode",
				Reason: "must be " + ParseModeHTML + " or " + ParseModeMarkdownV2 + " (or absent for plain text)"}
		}
	}
	return m, nil
}

// isNull reports whether a member is JSON null, which reads as absent: encoding/json would turn
// it into "" without an error.
func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// Package sms is the SMS channel: what every SMS provider of the ledger shares (the recipient's
// form, the payload's text and its limit, the per-number limit), and the channel that puts the
// providers of several types (adapters/providers/twilio, and any other gateway) behind one name, in
// failover order.
package sms

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/deliveryledger/ledger/commands"
)

// Name is the SMS channel's name: in requests, the history, metrics and queue names. It is the
// one place the name is written.
const Name = "sms"

// MaxTextLength is the longest text, in UTF-16 code units: Twilio's limit on a message body
// ("can be up to 1,600 characters", error 21617 beyond it), the tightest of the gateways the
// channel serves. Characters outside the Basic Multilingual Plane (most emoji) count twice, as
// they do in the UTF-16 strings gateways count in, so that a text accepted here is never refused
// by the provider as too long.
const MaxTextLength = 1600

// Limits of the channel's providers and destinations.
const (
	// ProviderConcurrency is the most calls in flight to one provider from one process. SMS APIs
	// limit concurrent requests per account (Twilio answers 429, error 20429, past its limit);
	// sixteen keeps a worker pool busy without drawing those.
	ProviderConcurrency = 16
	// NumberRate and NumberBurst limit the messages a second to one number. A phone is a person:
	// a burst of texts is noise to them, and carriers filter senders that flood one number
	// (Twilio error 30007, "message filtered"), which would then fail every later message too.
	// A burst of three lets a short sequence through (a code and its follow-up).
	NumberRate  = 1
	NumberBurst = 3
)

// Channel describes the SMS channel for the registry: providers are its senders in failover
// order, of any provider type (a Twilio account first, another gateway behind it). A nil
// provider, or a nil pointer in a commands.Sender, stays visible as nil, so that the registry
// refuses it instead of calling it.
func Channel(providers ...commands.Sender) commands.Channel {
	list := make([]commands.Sender, len(providers))
	for i, p := range providers {
		if isNil(p) {
			continue
		}
		list[i] = p
	}
	return commands.Channel{
		Name:             Name,
		Providers:        list,
		Check:            Check,
		Destination:      Destination,
		Normalize:        Normalize,
		ProviderLimit:    commands.Limit{Concurrency: ProviderConcurrency},
		DestinationLimit: commands.Limit{Rate: NumberRate, Burst: NumberBurst},
	}
}

// isNil reports whether p is nil or a nil pointer: a nil *twilio.Sender in a commands.Sender is
// not a nil interface, and commands.NewChannels would accept it, to panic at the first attempt.
func isNil(p commands.Sender) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// e164 is a phone number in E.164 form: a plus sign, then the country code and the number, 8 to
// 15 digits in all, the first not 0 (no country code starts with 0).
var e164 = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)

// Check is the channel's acceptance check: the recipient is a number in E.164 form and the
// payload has a text every provider of the channel takes. What no provider could ever send is
// refused at the door rather than dead-lettered after an attempt. Members other than text are
// ignored. A refusal is a *commands.InvalidField naming recipient, payload or payload.text.
//
// A text's line breaks and tabs are text (gateways pass them on, GSM 03.38 has LF and CR); the
// other control characters are not: no SMS alphabet can carry ESC or BEL to a phone as what they
// are (GSM's 0x1B is its own escape to the extension table), so such a text would reach the
// person as something else than was accepted, if at all.
func Check(recipient string, payload json.RawMessage) error {
	if err := CheckNumber(recipient); err != nil {
		return &commands.InvalidField{Field: "recipient", Reason: err.Error()}
	}
	text, err := Text(payload)
	if err != nil {
		return err
	}
	for i, r := range text {
		if (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || (r >= 0x7f && r <= 0x9f) {
			return &commands.InvalidField{Field: "payload.text", Reason: fmt.Sprintf(
				"holds the control character U+%04X at byte %d: an SMS carries text, line breaks and tabs, not control characters", r, i)}
		}
	}
	return nil
}

// numberError is why a recipient is not a number the channel sends to.
type numberError string

func (e numberError) Error() string { return string(e) }

// CheckNumber checks that number is in E.164 form (+ then 8 to 15 digits, the first not 0).
// Spaces, dashes, brackets and national forms (0301234567) are refused rather than rewritten: the
// recipient is shown in every answer and keys the per-number limit, so a number has one spelling.
func CheckNumber(number string) error {
	if e164.MatchString(number) {
		return nil
	}
	switch {
	case number == "":
		return numberError("is required: a phone number in E.164 form, such as +14155550100")
	case !strings.HasPrefix(number, "+"):
		return numberError("want a phone number in E.164 form: + and the country code, such as +14155550100")
	case strings.HasPrefix(number, "+0"):
		return numberError("a country code does not start with 0")
	case strings.Trim(number[1:], "0123456789") != "":
		return numberError("want + and digits only (no spaces, dashes or brackets), such as +14155550100")
	}
	return numberError("want + and 8 to 15 digits (E.164), got " + strconv.Itoa(len(number)-1))
}

// Destination names what a recipient's calls are limited under: the number itself (E.164 gives
// a number one spelling).
func Destination(recipient string) string { return recipient }

// Normalize is a recipient's normal form on the channel: the number as given. CheckNumber
// takes E.164 only (+ and digits, no spaces, dashes, dots or brackets, no national form), which
// is already one spelling per number, so there is nothing to rewrite; a spelling it refuses
// never reaches a delivery.
func Normalize(recipient string) string { return recipient }

// Text reads the message text from a notification's payload: its text member, a non-empty
// string of at most MaxTextLength UTF-16 code units. Check and every provider's Send call it, so
// a payload is read the same way at acceptance and at every attempt. A refusal is a
// *commands.InvalidField naming payload or payload.text. Members are matched by their exact
// name (encoding/json would also take "Text" or "TEXT" for a struct field).
func Text(payload json.RawMessage) (string, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(payload, &members); err != nil || members == nil {
		return "", &commands.InvalidField{Field: "payload", Reason: "must be a JSON object with a text member"}
	}
	raw, ok := members["text"]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", &commands.InvalidField{Field: "payload.text", Reason: "is required: the message's text"}
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return "", &commands.InvalidField{Field: "payload.text", Reason: "must be a string"}
	}
	if strings.TrimSpace(text) == "" {
		return "", &commands.InvalidField{Field: "payload.text", Reason: "must not be empty or only white space"}
	}
	if n := utf16Length(text); n > MaxTextLength {
		return "", &commands.InvalidField{Field: "payload.text", Reason: "has " + strconv.Itoa(n) +
			" characters (UTF-16 code units: emoji count twice); Twilio, the tightest of the channel's providers, takes at most " +
			strconv.Itoa(MaxTextLength)}
	}
	return text, nil
}

// utf16Length counts text as UTF-16 does: two units for a character beyond U+FFFF.
func utf16Length(text string) int {
	n := 0
	for _, r := range text {
		n++
		if r > 0xFFFF {
			n++
		}
	}
	return n
}

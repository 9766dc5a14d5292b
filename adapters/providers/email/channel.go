package email

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"strings"

	"github.com/deliveryledger/ledger/commands"
)

// Name is the email channel's name: in requests, the history, metrics and queue names. It is
// the one place the name is written.
const Name = "email"

// DefaultConcurrency caps the SMTP sessions one process has open to one provider. An SMTP
// attempt holds its connection for several round trips (greeting, EHLO, STARTTLS, AUTH, MAIL,
// RCPT, DATA, the server's scan of the message) and providers limit concurrent connections per
// client, commonly to 10-20, answering 421 or refusing to connect beyond that. 16 stays within
// those limits; the rest of the channel's worker slots (128 by default) wait for a session or
// defer their message rather than draw 421s. An operator whose provider allows more raises it.
const DefaultConcurrency = 16

// Channel describes the email channel for the registry: the senders are its providers in
// failover order; a recipient is one address, the payload carries subject and text or html;
// calls are limited per recipient domain.
//
// DestinationLimit stays zero: a recipient domain is a host, and the process-wide per-host
// rule already applies to it; a channel-specific limit would only stack a second one.
func Channel(senders ...commands.Sender) commands.Channel {
	return commands.Channel{
		Name:          Name,
		Providers:     senders,
		Check:         Check,
		Destination:   Destination,
		Normalize:     Normalize,
		ProviderLimit: commands.Limit{Concurrency: DefaultConcurrency},
	}
}

// Limits of RFC 5321 (section 4.5.3.1) and RFC 5322 (section 2.1.1) that the channel holds
// messages to at acceptance, where the caller can still be told, rather than have a server
// refuse (or a client mangle) them at the attempt.
const (
	// MaxLocalPart is the longest local part (before the @) of a recipient, in octets.
	MaxLocalPart = 64
	// MaxDomain is the longest domain of a recipient, in octets.
	MaxDomain = 255
	// MaxSubject is the longest subject, in octets of UTF-8: the length of one header line. On
	// the wire it is folded, and encoded (RFC 2047) where a run of it without spaces is too long
	// for a line, into lines of at most 78 characters; a longer subject is no subject a mail
	// client would show whole.
	MaxSubject = 998
)

// Check is the channel's acceptance check. The recipient is one address, "a@example.com" or
// "Name <a@example.com>", with a local part of at most MaxLocalPart octets and a domain of at
// most MaxDomain, refused as "recipient" otherwise. The payload is a JSON object whose
// "subject" (a non-empty string on one line, at most MaxSubject octets) and "text" and/or
// "html" (strings, at least one not empty) make the message; other members are ignored, so
// that a notification may carry data for other channels. A refusal names the member
// ("payload.subject").
func Check(recipient string, payload json.RawMessage) error {
	if _, err := parseRecipient(recipient); err != nil {
		return &commands.InvalidField{Field: "recipient", Reason: err.Error()}
	}
	_, err := parseContent(payload)
	return err
}

// Destination is what the per-destination limits key on: the recipient's domain, lowercase,
// since receiving servers throttle per sending client and domain, not per mailbox. A recipient
// that does not parse (Check refuses it at acceptance) gives its text after the last "@".
func Destination(recipient string) string {
	if addr, err := parseRecipient(recipient); err == nil {
		return domainOf(addr.Address)
	}
	at := strings.LastIndexByte(recipient, '@')
	if at < 0 {
		return ""
	}
	return strings.ToLower(strings.TrimRight(recipient[at+1:], "> \t"))
}

// Normalize is a recipient's normal form on the channel: its address alone (the addr-spec, no
// display name or comment), lower-cased whole, so that "Ann <A@Example.COM>" and
// "a@example.com" are one recipient. RFC 5321 lets a server treat local parts as
// case-sensitive, but no mailbox provider in use does, and two spellings of one mailbox counted
// as two recipients would send it twice (and miss its suppression); folding the local part too
// is the safe side. A local part is quoted only when it must be (`"ann"@x` is `ann@x`,
// `"Ann Lee"@x` is `"ann lee"@x`), so the normal form reads as the same address again (it is
// a key, not sent to: a few letters are longer in lower case in UTF-8, which can carry a local
// part at the limit over it). A recipient that does not parse (Check refuses it) is returned as
// it is.
func Normalize(recipient string) string {
	addr, err := parseRecipient(recipient)
	if err != nil {
		return recipient
	}
	// Without a name, String is the addr-spec in angle brackets, its local part quoted only if
	// it is no dot-atom.
	bare := (&mail.Address{Address: addr.Address}).String()
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(bare, "<"), ">"))
}

// parseRecipient parses a recipient as one address.
func parseRecipient(recipient string) (*mail.Address, error) {
	if strings.ContainsAny(recipient, "\r\n") {
		// A line break would let the value break out of the To header or the RCPT command.
		return nil, errors.New("must not contain CR or LF")
	}
	if strings.TrimSpace(recipient) == "" {
		return nil, errors.New("must be an email address, a@example.com or Name <a@example.com>")
	}
	addr, err := mail.ParseAddress(recipient)
	if err != nil {
		return nil, fmt.Errorf("must be one email address, a@example.com or Name <a@example.com>: %v", err)
	}
	at := strings.LastIndexByte(addr.Address, '@')
	switch domain := addr.Address[at+1:]; {
	case domain == "":
		return nil, errors.New("the address has no domain")
	case at > MaxLocalPart:
		return nil, fmt.Errorf("the local part (before the @) is %d octets, longer than the %d of RFC 5321", at, MaxLocalPart)
	case len(domain) > MaxDomain:
		return nil, fmt.Errorf("the domain is %d octets, longer than the %d of RFC 5321", len(domain), MaxDomain)
	}
	return addr, nil
}

// domainOf returns the domain of a bare address, lowercase (domains are case-insensitive;
// local parts are not, so only the domain is folded).
func domainOf(address string) string {
	at := strings.LastIndexByte(address, '@')
	if at < 0 {
		return ""
	}
	return strings.ToLower(address[at+1:])
}

// content is what a message is made of, read from the payload.
type content struct {
	subject, text, html string
}

// parseContent reads and checks the members of the payload the channel uses. Its refusals are
// *commands.InvalidField naming the member.
func parseContent(payload json.RawMessage) (content, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(payload, &members); err != nil || members == nil {
		return content{}, &commands.InvalidField{Field: "payload", Reason: "must be a JSON object"}
	}
	var c content
	subject, ok, err := stringMember(members, "subject")
	switch {
	case err != nil:
		return content{}, err
	case !ok:
		return content{}, &commands.InvalidField{Field: "payload.subject", Reason: "is required"}
	case strings.TrimSpace(subject) == "":
		return content{}, &commands.InvalidField{Field: "payload.subject", Reason: "must not be empty"}
	case strings.ContainsAny(subject, "\r\n"):
		return content{}, &commands.InvalidField{Field: "payload.subject", Reason: "must not contain CR or LF (it is one header line)"}
	case len(subject) > MaxSubject:
		return content{}, &commands.InvalidField{Field: "payload.subject",
			Reason: fmt.Sprintf("is %d octets of UTF-8, longer than the %d of one header line (RFC 5322)", len(subject), MaxSubject)}
	}
	c.subject = subject
	if c.text, _, err = stringMember(members, "text"); err != nil {
		return content{}, err
	}
	if c.html, _, err = stringMember(members, "html"); err != nil {
		return content{}, err
	}
	if c.text == "" && c.html == "" {
		return content{}, &commands.InvalidField{Field: "payload.text", Reason: "text or html is required"}
	}
	return c, nil
}

// stringMember reads payload member name as a string; ok is false when it is absent. Any
// other JSON value, null included, is refused naming the member: a caller who sent one meant
// something we would not send.
func stringMember(members map[string]json.RawMessage, name string) (value string, ok bool, err error) {
	raw, ok := members[name]
	if !ok {
		return "", false, nil
	}
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) || json.Unmarshal(raw, &value) != nil {
		return "", true, &commands.InvalidField{Field: "payload." + name, Reason: "must be a string"}
	}
	return value, true, nil
}

package email

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wneessen/go-mail"

	"github.com/deliveryledger/ledger/commands"
)

// userAgent identifies the ledger in the User-Agent and X-Mailer headers, instead of go-mail's
// default, so that a receiver's postmaster can tell where a message came from.
const userAgent = "deliveryledger-email/1"

// message builds the attempt's message. Every refusal is about the work message itself (its
// snapshot cannot get better on retry), so the caller makes it a permanent outcome.
func (s *Sender) message(msg commands.WorkMessage, now time.Time) (*mail.Msg, error) {
	to, err := parseRecipient(msg.Recipient)
	if err != nil {
		return nil, fmt.Errorf("recipient %q: %v", msg.Recipient, err)
	}
	c, err := parseContent(msg.Payload)
	if err != nil {
		return nil, fmt.Errorf("payload: %v", err)
	}
	if !validIDLeft(msg.DeliveryID) {
		return nil, fmt.Errorf("delivery id %q cannot be the left part of a Message-ID", msg.DeliveryID)
	}
	m := mail.NewMsg(mail.WithNoDefaultUserAgent())
	if err := m.From(s.cfg.From); err != nil {
		return nil, fmt.Errorf("from %q: %v", s.cfg.From, err)
	}
	m.ToMailAddress(to)
	m.Subject(subjectHeader(c.subject))
	m.SetDateWithValue(now)
	// The Message-ID is the delivery's, not the attempt's: every attempt of a delivery sends
	// the same one, so a receiver that got the message from an attempt whose outcome we could
	// not know drops the repeat (RFC 5322 section 3.6.4 makes it the message's identity).
	m.SetMessageIDWithValue(msg.DeliveryID + "@" + s.domain)
	m.SetUserAgent(userAgent)
	if s.cfg.Unsubscribe != nil {
		if link, ok := s.cfg.Unsubscribe(msg); ok {
			// RFC 8058: the link in List-Unsubscribe (RFC 2369's angle brackets) and the POST
			// body a mail client sends to it, which tells a one-click unsubscribe from a visit.
			m.SetGenHeader(mail.HeaderListUnsubscribe, "<"+link+">")
			m.SetGenHeader(mail.HeaderListUnsubscribePost, "List-Unsubscribe=One-Click")
		}
	}
	switch {
	case c.text != "" && c.html != "":
		// multipart/alternative, plain text first: RFC 2046 section 5.1.4 orders the parts
		// from the plainest to the richest, and readers show the last one they can render.
		m.SetBodyString(mail.TypeTextPlain, c.text)
		m.AddAlternativeString(mail.TypeTextHTML, c.html)
	case c.html != "":
		m.SetBodyString(mail.TypeTextHTML, c.html)
	default:
		m.SetBodyString(mail.TypeTextPlain, c.text)
	}
	return m, nil
}

// validIDLeft reports whether id can be the id-left of a Message-ID (RFC 5322 dot-atom-text):
// delivery ids are UUIDs, but a bad one must not break the header.
func validIDLeft(id string) bool {
	if id == "" || id[0] == '.' || id[len(id)-1] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '-', b == '_':
		case b == '.':
			if id[i-1] == '.' {
				return false
			}
		default:
			return false
		}
	}
	return true
}

const (
	// foldableWord is the longest run without a space that go-mail's folding (at spaces, into
	// lines of 76 characters) puts on a line of its own, "Subject: " included.
	foldableWord = 64
	// encodedChunk is how many octets of the subject one encoded-word carries: base64 makes 60
	// characters of them, 72 with "=?UTF-8?B?" and "?=", within the 75 of RFC 2047 section 2.
	encodedChunk = 45
)

// subjectHeader is the subject as the Subject header carries it. go-mail encodes a subject
// that is not ASCII (into encoded-words it can fold between) and folds one that is at its
// spaces, but it cannot fold a run without spaces longer than a line: such a subject is
// encoded here instead, as encoded-words of encodedChunk octets each, whole characters only,
// which go-mail then folds between. Readers join adjacent encoded-words without the space
// between them (RFC 2047 section 6.2), so the subject reads as it was given.
func subjectHeader(subject string) string {
	long := false
	for word := range strings.SplitSeq(subject, " ") {
		long = long || len(word) > foldableWord
	}
	if !long {
		return subject
	}
	var words []string
	for subject != "" {
		n := min(len(subject), encodedChunk)
		for n < len(subject) && n > 1 && !utf8.RuneStart(subject[n]) {
			n-- // a character is not split between two encoded-words
		}
		words = append(words, "=?UTF-8?B?"+base64.StdEncoding.EncodeToString([]byte(subject[:n]))+"?=")
		subject = subject[n:]
	}
	return strings.Join(words, " ")
}

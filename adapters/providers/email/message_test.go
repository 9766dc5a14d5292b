package email

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestSubjectOnTheWireKeepsToTheLineLimits (issue 23, row 9): whatever subject is accepted (the
// longest run without a space, many short words, text that is not ASCII, a run of it longer
// than a line), the message the SMTP server reads has no header line over RFC 5322's 998
// octets, no Subject line over its recommended 78, and the subject reads back as it was given.
func TestSubjectOnTheWireKeepsToTheLineLimits(t *testing.T) {
	t.Parallel()
	fake, err := smtpfake.Start(smtpfake.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	host, port, err := net.SplitHostPort(fake.Addr())
	if err != nil {
		t.Fatal(err)
	}
	portNumber, _ := strconv.Atoi(port)
	s, err := New(Config{Provider: "smtp", Host: host, Port: portNumber, From: "Ledger <noreply@example.com>", TLS: TLSNone, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	subjects := []string{
		strings.Repeat("s", MaxSubject),
		strings.TrimSpace(strings.Repeat("word ", MaxSubject/5)),
		strings.Repeat("é", MaxSubject/2),
		"Your order " + strings.Repeat("42", 100) + " shipped — " + strings.Repeat("ü", 40) + "x" + strings.Repeat("€", 30),
		"Your order shipped",
	}
	for i, subject := range subjects {
		payload, _ := json.Marshal(map[string]string{"subject": subject, "text": "Order 42."})
		msg := commands.WorkMessage{DeliveryID: "0190c6a4-7b1e-7cde-9f00-1a2b3c4d5e6f", Tenant: "acme", Channel: Name,
			Recipient: "ada@example.org", Payload: payload, Attempt: 1, MaxAttempts: 1}
		if o := s.Send(t.Context(), msg); o.Kind != domain.OutcomeDelivered {
			t.Fatalf("subject %d: %s (%s)", i, o.Kind, o.Err)
		}
		got := fake.Messages()[i]
		head, _, _ := bytes.Cut(got.Data, []byte("\r\n\r\n"))
		inSubject := false
		for _, line := range strings.Split(string(head), "\r\n") {
			if len(line) > 998 {
				t.Errorf("subject %d: a header line of %d octets: %.80q…", i, len(line), line)
			}
			if !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
				inSubject = strings.HasPrefix(line, "Subject:")
			}
			if inSubject && len(line) > 78 {
				t.Errorf("subject %d: a Subject line of %d characters: %q", i, len(line), line)
			}
		}
		if back := got.Subject(); back != subject {
			t.Errorf("subject %d reads back as %q, want %q", i, back, subject)
		}
	}
	if got := fake.Messages()[len(subjects)-1].Header().Get("Subject"); got != "Your order shipped" {
		t.Errorf("a short subject went as %q, want it as it is", got)
	}
}

// TestUnsubscribeHeadersOnlyWhenTheLinkIsGiven: a message whose link the wiring gives carries
// List-Unsubscribe with it in angle brackets and List-Unsubscribe-Post: List-Unsubscribe=One-Click
// (RFC 8058); one it gives none for (no category, a required one) carries neither.
func TestUnsubscribeHeadersOnlyWhenTheLinkIsGiven(t *testing.T) {
	t.Parallel()
	fake, err := smtpfake.Start(smtpfake.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	host, port, err := net.SplitHostPort(fake.Addr())
	if err != nil {
		t.Fatal(err)
	}
	portNumber, _ := strconv.Atoi(port)
	link := "https://ledger.example/u/" + strings.Repeat("A", 120) + "." + strings.Repeat("b", 43)
	s, err := New(Config{Provider: "smtp", Host: host, Port: portNumber, From: "Ledger <noreply@example.com>", TLS: TLSNone,
		Timeout: 10 * time.Second, Unsubscribe: func(m commands.WorkMessage) (string, bool) {
			return link, m.Category == "marketing"
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i, category := range []string{"marketing", "account", ""} {
		msg := commands.WorkMessage{DeliveryID: "0190c6a4-7b1e-7cde-9f00-1a2b3c4d5e6" + strconv.Itoa(i), Tenant: "acme", Channel: Name,
			Recipient: "ada@example.org", Payload: json.RawMessage(`{"subject":"News","text":"Hello."}`), Attempt: 1, MaxAttempts: 1,
			Category: category}
		if o := s.Send(t.Context(), msg); o.Kind != domain.OutcomeDelivered {
			t.Fatalf("category %q: %s (%s)", category, o.Kind, o.Err)
		}
		h := fake.Messages()[i].Header()
		unsub, post := h.Get("List-Unsubscribe"), h.Get("List-Unsubscribe-Post")
		if category == "marketing" {
			if unsub != "<"+link+">" || post != "List-Unsubscribe=One-Click" {
				t.Errorf("category %q: List-Unsubscribe %q, List-Unsubscribe-Post %q; want <%s> and List-Unsubscribe=One-Click", category, unsub, post, link)
			}
			continue
		}
		if unsub != "" || post != "" {
			t.Errorf("category %q: List-Unsubscribe %q, List-Unsubscribe-Post %q; want neither", category, unsub, post)
		}
	}
}

package email

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// fixedNow is the wall clock of the test senders, so that the Date header is predictable.
var fixedNow = time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)

// testFrom is the sender address of the test senders.
const testFrom = "Ledger <noreply@example.com>"

// startFake starts a fake SMTP server on a free loopback port, closed when the test ends.
func startFake(t *testing.T, cfg smtpfake.Config) *smtpfake.Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	srv, err := smtpfake.Start(cfg)
	if err != nil {
		t.Fatalf("start the fake: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close the fake: %v", err)
		}
	})
	return srv
}

// newSender builds a Sender for addr ("127.0.0.1:port") with the fixed clock; cfg's zero
// fields get test values (provider smtp, tls none, a generous timeout).
func newSender(t *testing.T, addr string, cfg Config) *Sender {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = host
	if cfg.Port, err = strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	if cfg.Provider == "" {
		cfg.Provider = "smtp"
	}
	if cfg.From == "" {
		cfg.From = testFrom
	}
	if cfg.TLS == "" {
		cfg.TLS = TLSNone
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.now = func() time.Time { return fixedNow }
	return s
}

// work is a work message for recipient with payload.
func work(id, recipient, payload string) commands.WorkMessage {
	return commands.WorkMessage{
		DeliveryID:  id,
		Tenant:      "acme",
		Channel:     Name,
		Recipient:   recipient,
		Payload:     json.RawMessage(payload),
		Attempt:     1,
		MaxAttempts: 10,
	}
}

const (
	deliveryA = "0190c6a4-7b1e-7cde-9f00-1a2b3c4d5e6f"
	deliveryB = "0190c6a4-7b1e-7cde-9f00-0a0b0c0d0e0f"
	textOnly  = `{"subject":"Your order shipped","text":"Order 42 is on its way."}`
)

// wantOutcome checks an outcome's kind, class, code and provider code, and that it names the
// provider.
func wantOutcome(t *testing.T, o domain.Outcome, kind domain.OutcomeKind, code int, providerCode string) {
	t.Helper()
	t.Logf("outcome: %+v", o)
	if o.Kind != kind {
		t.Fatalf("Kind = %s (%q), want %s", o.Kind, o.Err, kind)
	}
	if kind != domain.OutcomeDelivered && string(o.Class) != string(kind) {
		t.Errorf("Class = %s, want %s", o.Class, kind)
	}
	if o.StatusCode != code || o.ProviderCode != providerCode {
		t.Errorf("StatusCode, ProviderCode = %d, %q; want %d, %q", o.StatusCode, o.ProviderCode, code, providerCode)
	}
	if o.Provider != "smtp" {
		t.Errorf("Provider = %q, want smtp", o.Provider)
	}
	if o.Latency <= 0 {
		t.Errorf("Latency = %s, want > 0", o.Latency)
	}
}

// onlyMessage returns the one message the fake read, failing the test if there are not
// exactly one.
func onlyMessage(t *testing.T, srv *smtpfake.Server) smtpfake.Message {
	t.Helper()
	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("the fake read %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

func TestSenderContract(t *testing.T) {
	t.Parallel()
	s := newSender(t, "127.0.0.1:25", Config{Provider: "ses-eu"})
	if got := s.Provider(); got != "ses-eu" {
		t.Errorf("Provider() = %q, want ses-eu", got)
	}
	if s.Deduplicates() {
		t.Error("Deduplicates() = true, want false: SMTP servers queue repeats")
	}
}

// TestSendDelivered: the envelope and the headers are as specified, both bodies travel as
// multipart/alternative, and the 250's text is the provider operation id.
func TestSendDelivered(t *testing.T) {
	t.Parallel()
	fake := startFake(t, smtpfake.Config{})
	s := newSender(t, fake.Addr(), Config{})
	msg := work(deliveryA, "Ada Lovelace <ada@Example.org>",
		`{"subject":"Your order shipped — 42","text":"Plain body.","html":"<p>HTML body.</p>","order":42}`)

	o := s.Send(t.Context(), msg)
	wantOutcome(t, o, domain.OutcomeDelivered, 250, "250 2.0.0")
	if o.Err != "" {
		t.Errorf("Err = %q, want none", o.Err)
	}

	got := onlyMessage(t, fake)
	if want := "2.0.0 " + strings.TrimPrefix(got.Reply, "250 2.0.0 "); o.ProviderOperationID != want || got.QueueID == "" ||
		!strings.HasSuffix(o.ProviderOperationID, "queued as "+got.QueueID) {
		t.Errorf("ProviderOperationID = %q, want the fake's reply text %q naming queue id %q", o.ProviderOperationID, want, got.QueueID)
	}
	if got.From != "noreply@example.com" || len(got.To) != 1 || got.To[0] != "ada@Example.org" {
		t.Errorf("envelope = %s -> %v, want noreply@example.com -> [ada@Example.org]", got.From, got.To)
	}
	h := got.Header()
	from, err := mail.ParseAddress(h.Get("From"))
	if err != nil || from.Address != "noreply@example.com" || from.Name != "Ledger" {
		t.Errorf("From = %q (%v), want Ledger <noreply@example.com>", h.Get("From"), err)
	}
	to, err := mail.ParseAddress(h.Get("To"))
	if err != nil || to.Address != "ada@Example.org" || to.Name != "Ada Lovelace" {
		t.Errorf("To = %q (%v), want Ada Lovelace <ada@Example.org>", h.Get("To"), err)
	}
	if subject := got.Subject(); subject != "Your order shipped — 42" {
		t.Errorf("Subject = %q", subject)
	}
	if date, err := h.Date(); err != nil || !date.Equal(fixedNow) {
		t.Errorf("Date = %q (%v), want %s", h.Get("Date"), err, fixedNow)
	}
	if id := got.MessageID(); id != "<"+deliveryA+"@example.com>" {
		t.Errorf("Message-ID = %q, want <%s@example.com>", id, deliveryA)
	}

	mediaType, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || mediaType != "multipart/alternative" {
		t.Fatalf("Content-Type = %q (%v), want multipart/alternative", h.Get("Content-Type"), err)
	}
	parsed, err := got.Parsed()
	if err != nil {
		t.Fatal(err)
	}
	parts := multipart.NewReader(parsed.Body, params["boundary"])
	for i, want := range []struct{ mediaType, body string }{{"text/plain", "Plain body."}, {"text/html", "<p>HTML body.</p>"}} {
		part, err := parts.NextPart()
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		mt, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
		body, _ := io.ReadAll(part) // multipart undoes quoted-printable
		if mt != want.mediaType || strings.TrimSpace(string(body)) != want.body {
			t.Errorf("part %d = %s %q, want %s %q", i+1, mt, body, want.mediaType, want.body)
		}
	}
	if _, err := parts.NextPart(); err != io.EOF {
		t.Errorf("a third part, or a broken multipart: %v", err)
	}
}

// TestSendSingleBody: only text is text/plain, only html is text/html, without multipart.
func TestSendSingleBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, payload, mediaType, body string }{
		{"text", textOnly, "text/plain", "Order 42 is on its way."},
		{"html", `{"subject":"Shipped","html":"<b>Order 42</b>","text":""}`, "text/html", "<b>Order 42</b>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := startFake(t, smtpfake.Config{})
			o := newSender(t, fake.Addr(), Config{}).Send(t.Context(), work(deliveryA, "ada@example.org", tc.payload))
			wantOutcome(t, o, domain.OutcomeDelivered, 250, "250 2.0.0")
			parsed, err := onlyMessage(t, fake).Parsed()
			if err != nil {
				t.Fatal(err)
			}
			mt, _, err := mime.ParseMediaType(parsed.Header.Get("Content-Type"))
			if err != nil || mt != tc.mediaType {
				t.Errorf("Content-Type = %q, want %s", parsed.Header.Get("Content-Type"), tc.mediaType)
			}
			body, _ := io.ReadAll(parsed.Body)
			if !strings.Contains(string(body), tc.body) {
				t.Errorf("body = %q, want %q in it", body, tc.body)
			}
		})
	}
}

// TestMessageIDIsTheDeliverys: a retry of a delivery sends the same Message-ID (receivers
// dedupe on it), another delivery another one.
func TestMessageIDIsTheDeliverys(t *testing.T) {
	t.Parallel()
	fake := startFake(t, smtpfake.Config{})
	s := newSender(t, fake.Addr(), Config{})
	first, retry, other := work(deliveryA, "ada@example.org", textOnly), work(deliveryA, "ada@example.org", textOnly), work(deliveryB, "ada@example.org", textOnly)
	retry.Attempt = 2
	for _, m := range []commands.WorkMessage{first, retry, other} {
		if o := s.Send(t.Context(), m); o.Kind != domain.OutcomeDelivered {
			t.Fatalf("send: %s (%s)", o.Kind, o.Err)
		}
	}
	msgs := fake.Messages()
	if len(msgs) != 3 {
		t.Fatalf("the fake read %d messages, want 3", len(msgs))
	}
	a, b, c := msgs[0].MessageID(), msgs[1].MessageID(), msgs[2].MessageID()
	if a == "" || a != b {
		t.Errorf("Message-IDs of two attempts of one delivery: %q and %q, want the same", a, b)
	}
	if c == a || c != "<"+deliveryB+"@example.com>" {
		t.Errorf("Message-ID of another delivery = %q, want <%s@example.com>", c, deliveryB)
	}
}

// TestTransientThenDelivered: a 451 at RCPT is transient with its codes; once the server stops
// failing, the retry is delivered.
func TestTransientThenDelivered(t *testing.T) {
	t.Parallel()
	fake := startFake(t, smtpfake.Config{Behaviour: smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 451, EnhancedCode: "4.7.1", Text: "Greylisted, try again later", Times: 1}})
	s := newSender(t, fake.Addr(), Config{})
	msg := work(deliveryA, "ada@example.org", textOnly)

	o := s.Send(t.Context(), msg)
	wantOutcome(t, o, domain.OutcomeTransient, 451, "451 4.7.1")
	if !strings.Contains(o.Err, "RCPT TO") || !strings.Contains(o.Err, "451 4.7.1 Greylisted, try again later") {
		t.Errorf("Err = %q, want the stage and the server's reply", o.Err)
	}
	if n := len(fake.Messages()); n != 0 {
		t.Errorf("the fake read %d messages after a refused RCPT, want 0", n)
	}

	msg.Attempt = 2
	o = s.Send(t.Context(), msg)
	wantOutcome(t, o, domain.OutcomeDelivered, 250, "250 2.0.0")
	onlyMessage(t, fake)
}

// TestRepliesByStage: a reply decides by its class at every stage the fake can answer.
func TestRepliesByStage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		behaviour    string
		kind         domain.OutcomeKind
		code         int
		providerCode string
		stage        string
		messages     int // the fake read the message whole
	}{
		{"fail=mail:421:4.3.2", domain.OutcomeTransient, 421, "421 4.3.2", "MAIL FROM", 0},
		{"fail=mail:553:5.1.8", domain.OutcomePermanent, 553, "553 5.1.8", "MAIL FROM", 0},
		{"fail=rcpt:550:5.1.1", domain.OutcomePermanent, 550, "550 5.1.1", "RCPT TO", 0},
		{"fail=data:451:4.3.0", domain.OutcomeTransient, 451, "451 4.3.0", "DATA", 0},
		{"fail=data:554", domain.OutcomePermanent, 554, "554 5.0.0", "DATA", 0},
		{"fail=data-end:452:4.3.1", domain.OutcomeTransient, 452, "452 4.3.1", "end of data", 1},
		{"fail=data-end:554:5.7.1", domain.OutcomePermanent, 554, "554 5.7.1", "end of data", 1},
	} {
		t.Run(tc.behaviour, func(t *testing.T) {
			t.Parallel()
			b, err := smtpfake.ParseBehaviour(tc.behaviour)
			if err != nil {
				t.Fatal(err)
			}
			fake := startFake(t, smtpfake.Config{Behaviour: b})
			o := newSender(t, fake.Addr(), Config{}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
			wantOutcome(t, o, tc.kind, tc.code, tc.providerCode)
			if !strings.HasPrefix(o.Err, tc.stage+" at ") || !strings.Contains(o.Err, tc.providerCode+" smtpfake fails") {
				t.Errorf("Err = %q, want the stage %q and the server's reply", o.Err, tc.stage)
			}
			if got := len(fake.Messages()); got != tc.messages {
				t.Errorf("the fake read %d messages, want %d", got, tc.messages)
			}
		})
	}
}

// TestSuppressingReplies: a 5xx to RCPT TO or at the end of data whose enhanced code says the
// mailbox does not exist or is closed (5.1.1, 5.1.2, 5.1.3, 5.1.6, 5.1.10, 5.2.1) is permanent
// and suppresses the recipient; its near misses are refusals of the message, the sender or the
// moment, and suppress nothing: a 550 without an enhanced code (also when its text mentions
// one), policy (5.7.1), mailbox full (5.2.2), a 4xx with a mailbox code (451 4.1.1), the same
// code at MAIL FROM (about the sender).
func TestSuppressingReplies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		behaviour smtpfake.Behaviour
		kind      domain.OutcomeKind
		suppress  bool
	}{
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 550, EnhancedCode: "5.1.1", Text: "User unknown"}, domain.OutcomePermanent, true},
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 550, EnhancedCode: "5.1.2", Text: "Domain not found"}, domain.OutcomePermanent, true},
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 553, EnhancedCode: "5.1.3", Text: "Bad address syntax"}, domain.OutcomePermanent, true},
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 551, EnhancedCode: "5.1.6", Text: "Mailbox moved"}, domain.OutcomePermanent, true},
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 556, EnhancedCode: "5.1.10", Text: "Recipient address has null MX"}, domain.OutcomePermanent, true},
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 550, EnhancedCode: "5.2.1", Text: "Mailbox disabled"}, domain.OutcomePermanent, true},
		{smtpfake.Behaviour{FailAt: smtpfake.StageDataEnd, Code: 550, EnhancedCode: "5.1.1", Text: "User unknown"}, domain.OutcomePermanent, true},
		{smtpfake.Behaviour{FailAt: smtpfake.StageDataEnd, Code: 550, EnhancedCode: "5.2.1", Text: "Mailbox disabled"}, domain.OutcomePermanent, true},

		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 550, EnhancedCode: smtpfake.NoEnhancedCode, Text: "User unknown"}, domain.OutcomePermanent, false},
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 550, EnhancedCode: smtpfake.NoEnhancedCode, Text: "User unknown (see 5.1.1)"}, domain.OutcomePermanent, false},
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 550, EnhancedCode: "5.7.1", Text: "Relaying denied"}, domain.OutcomePermanent, false},
		{smtpfake.Behaviour{FailAt: smtpfake.StageDataEnd, Code: 554, EnhancedCode: "5.7.1", Text: "Message rejected as spam"}, domain.OutcomePermanent, false},
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 552, EnhancedCode: "5.2.2", Text: "Mailbox full"}, domain.OutcomePermanent, false},
		{smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 451, EnhancedCode: "4.1.1", Text: "Recipient lookup failed, try later"}, domain.OutcomeTransient, false},
		{smtpfake.Behaviour{FailAt: smtpfake.StageDataEnd, Code: 450, EnhancedCode: "4.2.1", Text: "Mailbox busy"}, domain.OutcomeTransient, false},
		{smtpfake.Behaviour{FailAt: smtpfake.StageMail, Code: 550, EnhancedCode: "5.1.1", Text: "Sender unknown"}, domain.OutcomePermanent, false},
	} {
		t.Run(tc.behaviour.String()+" "+tc.behaviour.Text, func(t *testing.T) {
			t.Parallel()
			fake := startFake(t, smtpfake.Config{Behaviour: tc.behaviour})
			o := newSender(t, fake.Addr(), Config{}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
			t.Logf("outcome: %+v", o)
			if o.Kind != tc.kind || o.Suppress != tc.suppress {
				t.Errorf("%s (%s): %s Suppress=%t, want %s Suppress=%t", tc.behaviour, o.ProviderCode, o.Kind, o.Suppress, tc.kind, tc.suppress)
			}
		})
	}
}

// TestUnknownWhenDroppedAfterData: the server read the whole message and vanished before its
// reply: it may have queued it.
func TestUnknownWhenDroppedAfterData(t *testing.T) {
	t.Parallel()
	fake := startFake(t, smtpfake.Config{Behaviour: smtpfake.Behaviour{DropAfterData: true}})
	o := newSender(t, fake.Addr(), Config{}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
	wantOutcome(t, o, domain.OutcomeUnknown, 0, "")
	if !strings.Contains(o.Err, "the whole message was sent") || !strings.Contains(o.Err, "may have queued it") {
		t.Errorf("Err = %q, want it to say the message was sent and may be queued", o.Err)
	}
	if m := onlyMessage(t, fake); m.Reply != "" || m.MessageID() != "<"+deliveryA+"@example.com>" {
		t.Errorf("the fake's message: reply %q, Message-ID %q; want no reply and the delivery's id", m.Reply, m.MessageID())
	}
}

// TestTransientWhenResetWhileWriting: the connection is reset while the body is being
// written: the server cannot have queued an incomplete message. The body is far larger than
// what the sockets can buffer, so the reset meets the sender mid-write.
func TestTransientWhenResetWhileWriting(t *testing.T) {
	t.Parallel()
	fake := startFake(t, smtpfake.Config{Behaviour: smtpfake.Behaviour{DropDuringData: true}})
	body := strings.Repeat("Order 42 is on its way; this line pads the message to megabytes.\n", 32<<10) // 2 MiB
	payload, _ := json.Marshal(map[string]string{"subject": "Big", "text": body})
	o := newSender(t, fake.Addr(), Config{}).Send(t.Context(), work(deliveryA, "ada@example.org", string(payload)))
	wantOutcome(t, o, domain.OutcomeTransient, 0, "")
	if !strings.Contains(o.Err, "cannot queue an incomplete message") {
		t.Errorf("Err = %q, want it to say the message did not get out whole", o.Err)
	}
	if n := len(fake.Messages()); n != 0 {
		t.Errorf("the fake read %d messages whole, want 0", n)
	}
}

// TestStartTLS: tls: starttls refuses a server that does not offer it, delivers over TLS with
// the fake's roots, and fails transiently on a certificate it cannot trust.
func TestStartTLS(t *testing.T) {
	t.Parallel()
	t.Run("not offered", func(t *testing.T) {
		t.Parallel()
		fake := startFake(t, smtpfake.Config{})
		o := newSender(t, fake.Addr(), Config{TLS: TLSStartTLS}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
		wantOutcome(t, o, domain.OutcomeTransient, 0, "")
		if !strings.Contains(o.Err, "server does not offer STARTTLS, which tls: starttls requires") {
			t.Errorf("Err = %q, want it to say why", o.Err)
		}
		if n := len(fake.Messages()); n != 0 {
			t.Errorf("the fake read %d messages in clear, want 0", n)
		}
	})
	t.Run("offered", func(t *testing.T) {
		t.Parallel()
		fake := startFake(t, smtpfake.Config{StartTLS: true})
		o := newSender(t, fake.Addr(), Config{TLS: TLSStartTLS, RootCAs: fake.CertPool()}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
		wantOutcome(t, o, domain.OutcomeDelivered, 250, "250 2.0.0")
		if m := onlyMessage(t, fake); !m.TLS {
			t.Error("the message came in clear, want over TLS")
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		t.Parallel()
		fake := startFake(t, smtpfake.Config{StartTLS: true})
		o := newSender(t, fake.Addr(), Config{TLS: TLSStartTLS, RootCAs: x509.NewCertPool()}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
		wantOutcome(t, o, domain.OutcomeTransient, 0, "")
		if !strings.Contains(o.Err, "TLS handshake") {
			t.Errorf("Err = %q, want it to name the TLS handshake", o.Err)
		}
		if n := len(fake.Messages()); n != 0 {
			t.Errorf("the fake read %d messages, want 0", n)
		}
	})
	t.Run("fail=data inside TLS is answered at end of data", func(t *testing.T) {
		t.Parallel()
		fake := startFake(t, smtpfake.Config{StartTLS: true, Behaviour: smtpfake.Behaviour{FailAt: smtpfake.StageData, Code: 451}})
		o := newSender(t, fake.Addr(), Config{TLS: TLSStartTLS, RootCAs: fake.CertPool()}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
		wantOutcome(t, o, domain.OutcomeTransient, 451, "451 4.0.0")
	})
}

// TestImplicitTLS: tls: implicit speaks TLS from the first byte.
func TestImplicitTLS(t *testing.T) {
	t.Parallel()
	fake := startFake(t, smtpfake.Config{ImplicitTLS: true})
	o := newSender(t, fake.Addr(), Config{TLS: TLSImplicit, RootCAs: fake.CertPool()}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
	wantOutcome(t, o, domain.OutcomeDelivered, 250, "250 2.0.0")
	if m := onlyMessage(t, fake); !m.TLS {
		t.Error("the message came in clear, want over TLS")
	}

	o = newSender(t, fake.Addr(), Config{TLS: TLSImplicit, RootCAs: x509.NewCertPool()}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
	wantOutcome(t, o, domain.OutcomeTransient, 0, "")
	if !strings.Contains(o.Err, "TLS handshake") {
		t.Errorf("Err = %q, want it to name the TLS handshake", o.Err)
	}
}

// TestAuth: the right password delivers; a wrong one is a permanent 535 whose text carries no
// password in any form; a server that requires AUTH refuses a sender without it.
func TestAuth(t *testing.T) {
	t.Parallel()
	const user, password, wrong = "ledger", "correct-horse-battery", "wrong-pony-staple"
	fake := startFake(t, smtpfake.Config{StartTLS: true, RequireAuth: true, Username: user, Password: password})
	send := func(cfg Config) domain.Outcome {
		cfg.TLS, cfg.RootCAs = TLSStartTLS, fake.CertPool()
		return newSender(t, fake.Addr(), cfg).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
	}

	o := send(Config{Username: user, Password: password})
	wantOutcome(t, o, domain.OutcomeDelivered, 250, "250 2.0.0")
	if m := onlyMessage(t, fake); m.Auth != user {
		t.Errorf("the fake's message was sent as %q, want %q", m.Auth, user)
	}

	o = send(Config{Username: user, Password: wrong})
	wantOutcome(t, o, domain.OutcomePermanent, 535, "535 5.7.8")
	if !strings.HasPrefix(o.Err, "AUTH at ") {
		t.Errorf("Err = %q, want it to name AUTH", o.Err)
	}
	for _, secret := range []string{password, wrong, base64.StdEncoding.EncodeToString([]byte("\x00" + user + "\x00" + wrong))} {
		if strings.Contains(fmt.Sprintf("%+v", o), secret) {
			t.Errorf("the outcome carries a secret: %+v", o)
		}
	}

	o = send(Config{})
	wantOutcome(t, o, domain.OutcomePermanent, 530, "530 5.7.0")
	if n := len(fake.Messages()); n != 1 {
		t.Errorf("the fake read %d messages, want only the authenticated one", n)
	}
}

// TestTimeoutAfterData: the end-of-data reply comes after the attempt's timeout: the body was
// sent, so the outcome is unknown.
func TestTimeoutAfterData(t *testing.T) {
	t.Parallel()
	fake := startFake(t, smtpfake.Config{Behaviour: smtpfake.Behaviour{Delay: time.Minute}})
	const timeout = 300 * time.Millisecond
	start := time.Now()
	o := newSender(t, fake.Addr(), Config{Timeout: timeout}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
	wantOutcome(t, o, domain.OutcomeUnknown, 0, "")
	if !strings.Contains(o.Err, "the whole message was sent") || !strings.Contains(o.Err, "ran out") {
		t.Errorf("Err = %q, want it to say the message was sent and the time ran out", o.Err)
	}
	if elapsed := time.Since(start); elapsed > 20*timeout {
		t.Errorf("Send took %s with a %s timeout", elapsed, timeout)
	}
	onlyMessage(t, fake)
}

// TestCancelAfterData: the attempt's context ends while the sender waits for the end-of-data
// reply: unknown, and said so.
func TestCancelAfterData(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	fake := startFake(t, smtpfake.Config{Behaviour: smtpfake.Behaviour{Delay: time.Minute}, Out: onLine("delaying", cancel)})
	o := newSender(t, fake.Addr(), Config{}).Send(ctx, work(deliveryA, "ada@example.org", textOnly))
	wantOutcome(t, o, domain.OutcomeUnknown, 0, "")
	if !strings.Contains(o.Err, "cancelled") {
		t.Errorf("Err = %q, want it to say the attempt was cancelled", o.Err)
	}
}

// TestTimeoutAtGreeting: a server that accepts and never greets: nothing was sent, transient.
func TestTimeoutAtGreeting(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, silent
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	o := newSender(t, l.Addr().String(), Config{Timeout: 200 * time.Millisecond}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
	wantOutcome(t, o, domain.OutcomeTransient, 0, "")
	if !strings.HasPrefix(o.Err, "greeting at ") || !strings.Contains(o.Err, "ran out") {
		t.Errorf("Err = %q, want the greeting stage and the timeout", o.Err)
	}
}

// TestDialRefused: nothing listens: transient.
func TestDialRefused(t *testing.T) {
	t.Parallel()
	o := newSender(t, closedAddr(t), Config{}).Send(t.Context(), work(deliveryA, "ada@example.org", textOnly))
	wantOutcome(t, o, domain.OutcomeTransient, 0, "")
	if !strings.HasPrefix(o.Err, "connect to 127.0.0.1:") {
		t.Errorf("Err = %q, want it to name the connection", o.Err)
	}
}

// TestSendRefusesWhatCannotBeSent: a work message no server could take fails permanently
// before any network call (the address is closed, so a dial would be a transient outcome).
func TestSendRefusesWhatCannotBeSent(t *testing.T) {
	t.Parallel()
	s := newSender(t, closedAddr(t), Config{})
	for _, msg := range []commands.WorkMessage{
		work(deliveryA, "not an address", textOnly),
		work(deliveryA, "ada@example.org", `{"text":"no subject"}`),
		work(deliveryA, "ada@example.org", `[1,2]`),
		work("bad id with spaces", "ada@example.org", textOnly),
	} {
		o := s.Send(t.Context(), msg)
		if o.Kind != domain.OutcomePermanent || o.Class != domain.ClassPermanent || o.Err == "" {
			t.Errorf("%s %s %s: %s %s (%q), want permanent with a reason", msg.DeliveryID, msg.Recipient, msg.Payload, o.Kind, o.Class, o.Err)
		}
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// onLine is a writer for the fake's Out that calls f once, on the first line containing s:
// a signal that the fake reached a point, with no sleep.
func onLine(s string, f func()) io.Writer {
	var once sync.Once
	return writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), s) {
			once.Do(f)
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/adapters/providers/telegram/telegramfake"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

const (
	// testToken is the bot token of the test senders and fakes; otherToken is a second bot's.
	// Every outcome of these tests is checked for both (see send).
	testToken  = "123456789:AAHsecretPartOfTheTestToken_0123456"
	otherToken = "987654321:AAHanotherBotsSecretPart-abcdefgh"
	// testTimeout is short so that the hang test is quick; the fake answers well within it.
	testTimeout = 300 * time.Millisecond
)

// newSender builds a Sender, closing its idle connections when the test ends.
func newSender(t *testing.T, cfg Config) *Sender {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// lines is a fake's Out: safe for the fake's concurrent writes and the test's reads.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// senderBundle is what a sender test works with: a fake Bot API on loopback, what it printed,
// and a sender configured against it.
type senderBundle struct {
	fake   *telegramfake.Server
	out    *lines
	sender *Sender
}

// setup starts a fake that accepts testToken and a sender of provider "telegram" that uses
// token (testToken unless one is given).
func setup(t *testing.T, token ...string) *senderBundle {
	t.Helper()
	out := &lines{}
	fake, err := telegramfake.Start(telegramfake.Config{Addr: "127.0.0.1:0", Token: testToken, Out: out})
	if err != nil {
		t.Fatalf("start the fake: %v", err)
	}
	t.Cleanup(func() {
		fake.Close()
		for _, tok := range []string{testToken, otherToken} {
			if secret := tok[strings.IndexByte(tok, ':')+1:]; strings.Contains(out.String(), secret) {
				t.Errorf("the fake's output contains a token:\n%s", out)
			}
		}
	})
	cfg := Config{Provider: "telegram", BaseURL: fake.URL(), Token: testToken, Timeout: testTimeout}
	if len(token) > 0 {
		cfg.Token = token[0]
	}
	return &senderBundle{fake: fake, out: out, sender: newSender(t, cfg)}
}

// send runs one attempt and fails the test if any part of its outcome holds a token, in any of
// the spellings a URL or a log could give it.
func send(t *testing.T, s *Sender, msg commands.WorkMessage) domain.Outcome {
	t.Helper()
	out := s.Send(t.Context(), msg)
	all := fmt.Sprintf("%+v %#v", out, out)
	for _, tok := range []string{testToken, otherToken} {
		// The first characters of the secret alone catch a token cut in half.
		secret := tok[strings.IndexByte(tok, ':')+1:]
		for _, spelling := range append(tokenSpellings(tok), secret[:8]) {
			if strings.Contains(all, spelling) {
				t.Errorf("the outcome holds a bot token: %s", all)
			}
		}
	}
	if !printableOnly(out.Err) {
		t.Errorf("Err = %q, want printable text on one line", out.Err)
	}
	return out
}

// printableOnly reports whether s has no control characters, line separators or bidi controls.
func printableOnly(s string) bool { return provider.Printable(s) == strings.TrimSpace(s) }

// workMessage is an attempt to send payload to recipient.
func workMessage(recipient string, payload string) commands.WorkMessage {
	return commands.WorkMessage{
		DeliveryID:  "0b6a4f57-6f4e-4a62-9e4c-7d0c0f3f8a11",
		Tenant:      "acme",
		Channel:     Name,
		Recipient:   recipient,
		Payload:     json.RawMessage(payload),
		Attempt:     1,
		MaxAttempts: 10,
	}
}

func TestSenderContract(t *testing.T) {
	t.Parallel()
	s := newSender(t, Config{Provider: "telegram-eu", Token: testToken})
	if got := s.Provider(); got != "telegram-eu" {
		t.Errorf("Provider() = %q, want the configured telegram-eu", got)
	}
	if s.Deduplicates() {
		t.Error("Deduplicates() = true, want false: sendMessage takes no idempotency key")
	}
	for _, printed := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %s", s, s, s)} {
		if strings.Contains(printed, "secretPart") {
			t.Errorf("printing the Sender shows its token: %s", printed)
		}
	}
}

// TestSendDelivers: an ok answer is a delivery whose operation id pairs the chat and the
// message id, and the Bot API got chat_id as an integer for an id and as a string for a
// username, the text, and parse_mode only when the payload has one.
func TestSendDelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sends := []struct {
		recipient string
		payload   string
		wantOpID  string
		wantChat  any
		wantMode  string
	}{
		{"42", `{"text":"<b>Order 42</b> has shipped","parse_mode":"HTML","order":42}`, "42:1", int64(42), "HTML"},
		{"-1001234567890", `{"text":"Order *43* has shipped","parse_mode":"MarkdownV2"}`, "-1001234567890:2", int64(-1001234567890), "MarkdownV2"},
		{"@Ledger_News", `{"text":"plain text, no parse_mode"}`, "@Ledger_News:3", "@Ledger_News", ""},
	}
	for _, tt := range sends {
		out := send(t, b.sender, workMessage(tt.recipient, tt.payload))
		if out.Kind != domain.OutcomeDelivered {
			t.Fatalf("%s: Kind = %s (%s), want delivered", tt.recipient, out.Kind, out.Err)
		}
		if out.ProviderOperationID != tt.wantOpID {
			t.Errorf("%s: ProviderOperationID = %q, want %q", tt.recipient, out.ProviderOperationID, tt.wantOpID)
		}
		if out.Provider != "telegram" || out.StatusCode != http.StatusOK || out.Err != "" || out.Class != "" || out.ProviderCode != "" {
			t.Errorf("%s: outcome %+v, want provider telegram, HTTP 200, no error, class or code", tt.recipient, out)
		}
		if out.Latency <= 0 {
			t.Errorf("%s: Latency = %s, want > 0", tt.recipient, out.Latency)
		}
	}
	got := b.fake.Messages()
	if len(got) != len(sends) {
		t.Fatalf("the fake sent %d messages, want %d: %+v", len(got), len(sends), got)
	}
	for i, tt := range sends {
		var payload struct{ Text string }
		if err := json.Unmarshal([]byte(tt.payload), &payload); err != nil {
			t.Fatal(err)
		}
		want := telegramfake.Message{ChatID: tt.wantChat, Text: payload.Text, ParseMode: tt.wantMode, MessageID: int64(i + 1)}
		if got[i] != want {
			t.Errorf("message %d = %#v, want %#v", i+1, got[i], want)
		}
	}
}

// TestSendClassifiesBotAPIErrors: each error the Bot API answers with, from the fake that
// speaks it, becomes the outcome the classification table gives, with Telegram's description
// and error_code recorded.
func TestSendClassifiesBotAPIErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		behaviour  telegramfake.Behaviour
		token      string
		recipient  string
		wantKind   domain.OutcomeKind
		wantClass  domain.ErrorClass
		wantStatus int
		wantRetry  time.Duration
		wantErrHas string
	}{
		{
			name:      "429 is transient with retry_after",
			behaviour: telegramfake.Behaviour{TooManyRequests: 1, RetryAfter: 2}, recipient: "42",
			wantKind: domain.OutcomeTransient, wantClass: domain.ClassTransient, wantStatus: 429,
			wantRetry: 2 * time.Second, wantErrHas: "Too Many Requests: retry after 2",
		},
		{
			name:      "400 chat not found is permanent",
			behaviour: telegramfake.Behaviour{ChatNotFound: []string{"-100123"}}, recipient: "-100123",
			wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent, wantStatus: 400,
			wantErrHas: "Bad Request: chat not found",
		},
		{
			name:      "403 blocked is permanent",
			behaviour: telegramfake.Behaviour{Blocked: []string{"42"}}, recipient: "42",
			wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent, wantStatus: 403,
			wantErrHas: "Forbidden: bot was blocked by the user",
		},
		{
			name:      "500 is transient",
			behaviour: telegramfake.Behaviour{ServerErrors: 1}, recipient: "42",
			wantKind: domain.OutcomeTransient, wantClass: domain.ClassTransient, wantStatus: 500,
			wantErrHas: "Internal Server Error",
		},
		{
			name:  "401 for a wrong token is permanent",
			token: otherToken, recipient: "42",
			wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent, wantStatus: 401,
			wantErrHas: "Unauthorized",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b *senderBundle
			if tt.token != "" {
				b = setup(t, tt.token)
			} else {
				b = setup(t)
			}
			b.fake.SetBehaviour(tt.behaviour)

			out := send(t, b.sender, workMessage(tt.recipient, `{"text":"Order 42 has shipped"}`))

			if out.Kind != tt.wantKind || out.Class != tt.wantClass {
				t.Fatalf("outcome = %s/%s (%s), want %s/%s", out.Kind, out.Class, out.Err, tt.wantKind, tt.wantClass)
			}
			if out.StatusCode != tt.wantStatus {
				t.Errorf("StatusCode = %d, want %d", out.StatusCode, tt.wantStatus)
			}
			if want := fmt.Sprint(tt.wantStatus); out.ProviderCode != want {
				t.Errorf("ProviderCode = %q, want Telegram's error_code %q", out.ProviderCode, want)
			}
			if out.RetryAfter != tt.wantRetry {
				t.Errorf("RetryAfter = %s, want %s", out.RetryAfter, tt.wantRetry)
			}
			if !strings.Contains(out.Err, tt.wantErrHas) {
				t.Errorf("Err = %q, want Telegram's description %q", out.Err, tt.wantErrHas)
			}
			if out.ProviderOperationID != "" {
				t.Errorf("ProviderOperationID = %q, want none without a message", out.ProviderOperationID)
			}
			if out.Provider != "telegram" || out.Latency <= 0 {
				t.Errorf("Provider = %q, Latency = %s; want telegram and > 0", out.Provider, out.Latency)
			}
			if n := len(b.fake.Messages()); n != 0 {
				t.Errorf("the fake sent %d messages, want 0", n)
			}
		})
	}
}

// TestSuppressingRefusals: every 403 (blocked, deactivated, kicked) and a 400 that says the chat
// or user is not found are permanent and suppress the chat; the near misses suppress nothing:
// another 400 (the message), 401 and 404 (the token), 429 and 500 (the moment).
func TestSuppressingRefusals(t *testing.T) {
	t.Parallel()
	refusal := func(code int, description string) telegramfake.Behaviour {
		return telegramfake.Behaviour{Refusals: []telegramfake.Refusal{{Chat: "42", Code: code, Description: description}}}
	}
	for _, tt := range []struct {
		name      string
		behaviour telegramfake.Behaviour
		token     string
		kind      domain.OutcomeKind
		suppress  bool
	}{
		{"403 blocked", telegramfake.Behaviour{Blocked: []string{"42"}}, "", domain.OutcomePermanent, true},
		{"403 deactivated", refusal(403, "Forbidden: user is deactivated"), "", domain.OutcomePermanent, true},
		{"403 kicked", refusal(403, "Forbidden: bot was kicked from the group chat"), "", domain.OutcomePermanent, true},
		{"400 chat not found", telegramfake.Behaviour{ChatNotFound: []string{"42"}}, "", domain.OutcomePermanent, true},
		{"400 user not found", refusal(400, "Bad Request: user not found"), "", domain.OutcomePermanent, true},

		{"400 message is too long", refusal(400, "Bad Request: message is too long"), "", domain.OutcomePermanent, false},
		{"400 can't parse entities", refusal(400, "Bad Request: can't parse entities: unsupported start tag"), "", domain.OutcomePermanent, false},
		{"404 not found", refusal(404, "Not Found"), "", domain.OutcomePermanent, false},
		{"401 wrong token", telegramfake.Behaviour{}, otherToken, domain.OutcomePermanent, false},
		{"429 flood control", telegramfake.Behaviour{TooManyRequests: 1, RetryAfter: 1}, "", domain.OutcomeTransient, false},
		{"500", telegramfake.Behaviour{ServerErrors: 1}, "", domain.OutcomeTransient, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if tt.token != "" {
				b = setup(t, tt.token)
			}
			b.fake.SetBehaviour(tt.behaviour)
			out := send(t, b.sender, workMessage("42", `{"text":"Order 42 has shipped"}`))
			if out.Kind != tt.kind || out.Suppress != tt.suppress {
				t.Errorf("%s Suppress=%t (%s), want %s Suppress=%t", out.Kind, out.Suppress, out.Err, tt.kind, tt.suppress)
			}
		})
	}
}

// TestSendAfterFloodControlDelivers: the 429 covered one call; the retry goes through.
func TestSendAfterFloodControlDelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(telegramfake.Behaviour{TooManyRequests: 1, RetryAfter: 2})
	msg := workMessage("42", `{"text":"hi"}`)
	if out := send(t, b.sender, msg); out.Kind != domain.OutcomeTransient {
		t.Fatalf("first attempt: Kind = %s (%s), want transient", out.Kind, out.Err)
	}
	if out := send(t, b.sender, msg); out.Kind != domain.OutcomeDelivered || out.ProviderOperationID != "42:1" {
		t.Errorf("second attempt: %s %q (%s), want delivered as 42:1", out.Kind, out.ProviderOperationID, out.Err)
	}
}

// TestSendHangAfterReadIsUnknown: Telegram read the whole request and then nothing came back
// before the timeout: it may have sent the message.
func TestSendHangAfterReadIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(telegramfake.Behaviour{HangAfterRead: true})

	out := send(t, b.sender, workMessage("42", `{"text":"hi"}`))

	if out.Kind != domain.OutcomeUnknown || out.Class != domain.ClassUnknown {
		t.Fatalf("outcome = %s/%s (%s), want unknown", out.Kind, out.Class, out.Err)
	}
	if !strings.Contains(out.Err, "may have sent") || !strings.Contains(out.Err, "request written") {
		t.Errorf("Err = %q, want it to say the request was written and Telegram may have sent it", out.Err)
	}
	if out.StatusCode != 0 || out.RetryAfter != 0 || out.ProviderOperationID != "" {
		t.Errorf("outcome %+v, want no status, retry-after or operation id without an answer", out)
	}
	if out.Latency < testTimeout {
		t.Errorf("Latency = %s, want at least the timeout %s", out.Latency, testTimeout)
	}
	eventually(t, func() bool { return strings.Contains(b.out.String(), "hanging") },
		"the fake says it read the message and hung")
}

// TestSendNothingListeningIsTransient: the dial is refused, so nothing was written. The error
// net/http returns repeats the URL, token included; the outcome must not.
func TestSendNothingListeningIsTransient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	s := newSender(t, Config{Provider: "telegram", BaseURL: "http://" + addr, Token: testToken, Timeout: testTimeout})

	out := send(t, s, workMessage("42", `{"text":"hi"}`))

	if out.Kind != domain.OutcomeTransient || out.Class != domain.ClassTransient {
		t.Errorf("outcome = %s/%s (%s), want transient", out.Kind, out.Class, out.Err)
	}
	if out.StatusCode != 0 {
		t.Errorf("StatusCode = %d, want 0 without an answer", out.StatusCode)
	}
	if !strings.Contains(out.Err, addr) || strings.Contains(out.Err, "/bot") {
		t.Errorf("Err = %q, want it to name the host %s and not the URL", out.Err, addr)
	}
}

// TestSendCanceledBeforeWriteIsTransient: an attempt whose context is done before the call
// never reaches Telegram.
func TestSendCanceledBeforeWriteIsTransient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	out := b.sender.Send(ctx, workMessage("42", `{"text":"hi"}`))

	if out.Kind != domain.OutcomeTransient {
		t.Errorf("Kind = %s (%s), want transient", out.Kind, out.Err)
	}
	if strings.Contains(out.Err, "secretPart") {
		t.Errorf("Err = %q holds the token", out.Err)
	}
	if n := len(b.fake.Messages()); n != 0 {
		t.Errorf("the fake sent %d messages, want 0", n)
	}
}

// TestSendRefusesUnsendableWithoutNetwork: what Check would refuse is permanent at send time
// (the work message is a snapshot: it cannot get better), and no call is made.
func TestSendRefusesUnsendableWithoutNetwork(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
	s := newSender(t, Config{Provider: "telegram", BaseURL: srv.URL, Token: testToken, Timeout: testTimeout})
	tests := []struct{ recipient, payload, wantErrHas string }{
		{"not-a-chat", `{"text":"hi"}`, "recipient"},
		{"@abc", `{"text":"hi"}`, "recipient"},
		{"42", `{"subject":"no text"}`, "payload.text"},
		{"42", `{"text":"hi","parse_mode":"Markdown"}`, "payload.parse_mode"},
		{"42", `{"text":`, "payload"},
	}
	for _, tt := range tests {
		out := send(t, s, workMessage(tt.recipient, tt.payload))
		if out.Kind != domain.OutcomePermanent || out.Class != domain.ClassPermanent {
			t.Errorf("%s %s: outcome = %s/%s (%s), want permanent", tt.recipient, tt.payload, out.Kind, out.Class, out.Err)
		}
		if !strings.Contains(out.Err, tt.wantErrHas) {
			t.Errorf("%s %s: Err = %q, want it to name %s", tt.recipient, tt.payload, out.Err, tt.wantErrHas)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the server got %d calls, want 0", n)
	}
}

// newServer starts a loopback server that answers as a broken Bot API, a proxy or anything
// else the fake does not model; it is closed when the test ends.
func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// answering is a handler that answers every call with status, headers and body.
func answering(status int, header map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// TestSendUnprovenAnswerIsUnknown: a 2xx says Telegram took the request; unless the answer
// proves the message was sent (ok:true and a message_id), it may or may not have been, and a
// retry could send it twice.
func TestSendUnprovenAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	huge := `{"ok":true,"result":{"text":"` + strings.Repeat("x", maxResponseRead) + `","message_id":7}}`
	tests := []struct {
		name    string
		status  int
		body    string
		whyHas  string
		codeWas string
	}{
		{"not JSON", 200, "<html>hello</html>", "not the Bot API's JSON", ""},
		{"empty body", 200, "", "not the Bot API's JSON", ""},
		{"ok missing", 200, `{"result":{"message_id":7}}`, "ok:true", ""},
		{"ok false on a 200", 200, `{"ok":false,"error_code":400,"description":"Bad Request: odd"}`, "Bad Request: odd", "400"},
		{"no result", 200, `{"ok":true}`, "message_id", ""},
		{"no message_id", 200, `{"ok":true,"result":{"chat":{"id":42}}}`, "message_id", ""},
		{"message_id not a number", 200, `{"ok":true,"result":{"message_id":"7"}}`, "not the Bot API's JSON", ""},
		{"202 without a body", 202, "", "not the Bot API's JSON", ""},
		{"longer than what is read", 200, huge, "longer than", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, answering(tt.status, nil, tt.body))
			s := newSender(t, Config{Provider: "telegram", BaseURL: srv.URL, Token: testToken, Timeout: testTimeout})

			out := send(t, s, workMessage("42", `{"text":"hi"}`))

			if out.Kind != domain.OutcomeUnknown || out.Class != domain.ClassUnknown {
				t.Fatalf("outcome = %s/%s (%s), want unknown", out.Kind, out.Class, out.Err)
			}
			if out.StatusCode != tt.status {
				t.Errorf("StatusCode = %d, want %d", out.StatusCode, tt.status)
			}
			if !strings.Contains(out.Err, tt.whyHas) || !strings.Contains(out.Err, "may have been sent") {
				t.Errorf("Err = %q, want why (%q) and that the message may have been sent", out.Err, tt.whyHas)
			}
			if out.ProviderCode != tt.codeWas {
				t.Errorf("ProviderCode = %q, want %q", out.ProviderCode, tt.codeWas)
			}
			if len(out.Err) > 2*maxDescription {
				t.Errorf("Err has %d bytes, want it bounded", len(out.Err))
			}
		})
	}
}

// TestSendResetWhileReadingTheAnswerIsUnknown: the status said 200 but the body was cut off.
func TestSendResetWhileReadingTheAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"ok":true,"res`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	s := newSender(t, Config{Provider: "telegram", BaseURL: srv.URL, Token: testToken, Timeout: testTimeout})

	out := send(t, s, workMessage("42", `{"text":"hi"}`))

	if out.Kind != domain.OutcomeUnknown || !strings.Contains(out.Err, "reading the answer failed") {
		t.Errorf("outcome = %s (%s), want unknown because the answer could not be read", out.Kind, out.Err)
	}
}

// TestSendRecordsAnswersSafely: what a peer answers reaches the history bounded, on one
// printable line, without the token even when the peer echoes it; a wait is taken from a
// Retry-After header when the body has none; a redirect is not followed.
func TestSendRecordsAnswersSafely(t *testing.T) {
	t.Parallel()
	secret := testToken[strings.IndexByte(testToken, ':')+1:]
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		wantKind   domain.OutcomeKind
		wantRetry  time.Duration
		wantErrHas []string
	}{
		{
			name: "control characters and separators are replaced", status: 400,
			body:     `{"ok":false,"error_code":400,"description":"Bad Request: line one\r\nline two\u2028three\u202efour\u0000"}`,
			wantKind: domain.OutcomePermanent, wantErrHas: []string{"line one  line two three four"},
		},
		{
			name: "a long description is cut", status: 400,
			body:     `{"ok":false,"error_code":400,"description":"Bad Request: ` + strings.Repeat("é", 4000) + `"}`,
			wantKind: domain.OutcomePermanent, wantErrHas: []string{"Bad Request: éé", "…"},
		},
		{
			name: "a proxy that echoes the request line", status: 502,
			body:     "<html>502 Bad Gateway for POST /bot" + testToken + "/sendMessage and " + secret + "</html>",
			wantKind: domain.OutcomeTransient, wantErrHas: []string{"HTTP 502 Bad Gateway", "/bot[token]/sendMessage"},
		},
		{
			name: "a token across the cut is removed before the cut", status: 500,
			body:     strings.Repeat("x", maxDescription-20) + testToken,
			wantKind: domain.OutcomeTransient, wantErrHas: []string{"xxx[token]"},
		},
		{
			name: "retry_after from the header when the body has none", status: 429,
			header:   map[string]string{"Retry-After": "5"},
			body:     `{"ok":false,"error_code":429,"description":"Too Many Requests"}`,
			wantKind: domain.OutcomeTransient, wantRetry: 5 * time.Second,
		},
		{
			name: "the body's retry_after wins over the header", status: 429,
			header:   map[string]string{"Retry-After": "5"},
			body:     `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3","parameters":{"retry_after":3}}`,
			wantKind: domain.OutcomeTransient, wantRetry: 3 * time.Second,
		},
		{
			name: "an absurd retry_after is capped", status: 429,
			body:     `{"ok":false,"error_code":429,"description":"Too Many Requests","parameters":{"retry_after":99999999999}}`,
			wantKind: domain.OutcomeTransient, wantRetry: MaxRetryAfter,
		},
		{
			name: "a negative retry_after is ignored", status: 429,
			body:     `{"ok":false,"error_code":429,"description":"Too Many Requests","parameters":{"retry_after":-4}}`,
			wantKind: domain.OutcomeTransient,
		},
		{
			name: "a group moved to a supergroup", status: 400,
			body:     `{"ok":false,"error_code":400,"description":"Bad Request: group chat was upgraded to a supergroup chat","parameters":{"migrate_to_chat_id":-1009876543210}}`,
			wantKind: domain.OutcomePermanent, wantErrHas: []string{"upgraded to a supergroup", "now chat -1009876543210"},
		},
		{
			name: "another 4xx is permanent", status: 409,
			body:     `{"ok":false,"error_code":409,"description":"Conflict: something"}`,
			wantKind: domain.OutcomePermanent, wantErrHas: []string{"Conflict: something"},
		},
		{
			name: "a redirect is permanent and not followed", status: 301,
			header:   map[string]string{"Location": "https://elsewhere.example/bot" + testToken + "/sendMessage"},
			wantKind: domain.OutcomePermanent, wantErrHas: []string{"HTTP 301", "redirects are not followed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, answering(tt.status, tt.header, tt.body))
			s := newSender(t, Config{Provider: "telegram", BaseURL: srv.URL, Token: testToken, Timeout: testTimeout})

			out := send(t, s, workMessage("42", `{"text":"hi"}`))

			if out.Kind != tt.wantKind {
				t.Fatalf("Kind = %s (%s), want %s", out.Kind, out.Err, tt.wantKind)
			}
			if out.StatusCode != tt.status {
				t.Errorf("StatusCode = %d, want %d", out.StatusCode, tt.status)
			}
			if out.RetryAfter != tt.wantRetry {
				t.Errorf("RetryAfter = %s, want %s", out.RetryAfter, tt.wantRetry)
			}
			for _, want := range tt.wantErrHas {
				if !strings.Contains(out.Err, want) {
					t.Errorf("Err = %q, want it to contain %q", out.Err, want)
				}
			}
			if len(out.Err) > 2*maxDescription {
				t.Errorf("Err has %d bytes, want it bounded", len(out.Err))
			}
		})
	}
}

// TestRetryAfter: a fractional retry_after is kept, an absurd one capped, and nothing usable
// means no wait of Telegram's.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	num := func(f float64) *apiResponse {
		api := &apiResponse{}
		api.Parameters = &struct {
			RetryAfter      *float64 `json:"retry_after"`
			MigrateToChatID *int64   `json:"migrate_to_chat_id"`
		}{RetryAfter: &f}
		return api
	}
	tests := []struct {
		name   string
		api    *apiResponse
		header string
		want   time.Duration
	}{
		{"seconds", num(2), "", 2 * time.Second},
		{"fraction", num(1.25), "", 1250 * time.Millisecond},
		{"zero", num(0), "7", 0},
		{"header only", &apiResponse{}, " 7 ", 7 * time.Second},
		{"header HTTP-date is not Telegram's", &apiResponse{}, "Wed, 21 Oct 2015 07:28:00 GMT", 0},
		{"header signed", &apiResponse{}, "+7", 0},
		{"nothing", &apiResponse{}, "", 0},
		{"capped", num(1e12), "", MaxRetryAfter},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.api, tt.header); got != tt.want {
			t.Errorf("%s: retryAfter = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

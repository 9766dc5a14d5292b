package app

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/domain"
)

// The email channel end to end: a running ledger (API, relay, worker) sends through an SMTP
// fake on the loopback, and each SMTP failure of issue 14 is seen where an operator sees it, in
// the delivery's state and history, and where the receiver sees it, in what the server was
// asked (smtpfake.Counts). The adapter's own tests (adapters/providers/email) call Send directly; these
// show that the workers, the retry tiers and the history carry each outcome through.

// emailBundle is a ledger whose email channel sends through one SMTP fake.
type emailBundle struct {
	*e2eBundle
	smtp *smtpfake.Server
}

// emailRetry is the email channel's retry block in these tests: short and explicit, so that a
// retry the outcome should not have had would come within the test's time.
const emailRetry = "retry: {schedule: [50ms, 100ms]}"

// setupEmail starts an SMTP fake configured by fake and a ledger whose one channel, email,
// sends through it with the given tls setting and retry block.
func setupEmail(t *testing.T, fake smtpfake.Config, tls, retry string) *emailBundle {
	t.Helper()
	fake.Addr = "127.0.0.1:0"
	srv, err := smtpfake.Start(fake)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	host, port, err := net.SplitHostPort(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	file := fmt.Sprintf(`channels:
  email: {providers: [relay], %s}
providers:
  relay: {type: smtp, host: %s, port: %s, tls: %s, from: "Ledger <noreply@ledger.test>", timeout: 2s}
`, retry, host, port, tls)
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setupE2E(t, "", func(c *Config) { c.ConfigFile = path })
	return &emailBundle{e2eBundle: b, smtp: srv}
}

// sendEmail accepts one email and returns its delivery id.
func (b *emailBundle) sendEmail(t *testing.T, key, to string) string {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/deliveries", key, map[string]any{"channel": "email", "recipient": to,
		"payload": map[string]any{"subject": "Order 7 shipped", "text": "On its way."}})
	var one struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &one); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %d %s", resp.StatusCode, body)
	}
	return one.ID
}

// attemptResults returns the attempt results of a history's events of typ, in order.
func attemptResults(t *testing.T, events []historyEvent, typ domain.EventType) []domain.AttemptResult {
	t.Helper()
	var out []domain.AttemptResult
	for _, e := range eventsOfType(events, typ) {
		var r domain.AttemptResult
		if err := json.Unmarshal(e.Data, &r); err != nil {
			t.Fatalf("%s data %s: %v", e.Type, e.Data, err)
		}
		out = append(out, r)
	}
	return out
}

// TestEmailGreylistedAtRCPTIsRetriedAndDelivered: a 451 4.7.1 at RCPT TO (greylisting, the most
// common transient refusal) on the first attempt is recorded as a transient failure with the
// server's reply code and enhanced code; the next attempt comes through the channel's retry tier
// no earlier than the history said, and is delivered with the server's queue id. The server saw
// two transactions and one message.
func TestEmailGreylistedAtRCPTIsRetriedAndDelivered(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, smtpfake.Config{Behaviour: smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 451,
		EnhancedCode: "4.7.1", Text: "Greylisted, try again later", Times: 1}}, "none", emailRetry)
	id := b.sendEmail(t, "grey-1", "Ann <ann@example.com>")
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)

	h := b.history(t, id)
	want := "accepted,queued,attempt_started,retry_scheduled,queued,attempt_started,delivered"
	if got := strings.Join(types(h), ","); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	retry := attemptResults(t, h, domain.EventRetryScheduled)[0]
	if retry.Attempt != 1 || retry.StatusCode != 451 || retry.ProviderCode != "451 4.7.1" || retry.Class != domain.ClassTransient ||
		retry.Provider != "relay" || !strings.Contains(retry.Error, "RCPT TO") || !strings.Contains(retry.Error, "Greylisted") {
		t.Fatalf("the greylisted attempt was recorded as %+v, want a transient 451 4.7.1 at RCPT TO with the server's text", retry)
	}
	if retry.NextAttemptAt == nil {
		t.Fatal("the retry does not say when the next attempt is due")
	}
	if second := eventsOfType(h, domain.EventAttemptStarted)[1].RecordedAt; second.Before(retry.NextAttemptAt.Add(-10 * time.Millisecond)) {
		t.Fatalf("the second attempt started at %s, before its due time %s", second.Format(time.StampMilli), retry.NextAttemptAt.Format(time.StampMilli))
	}
	done := attemptResults(t, h, domain.EventDelivered)[0]
	if done.Attempt != 2 || done.StatusCode != 250 || !strings.Contains(done.ProviderOperationID, "queued as 00001") {
		t.Fatalf("delivered as %+v, want attempt 2, 250 and the server's queue id", done)
	}
	if got, want := b.smtp.Counts(), (smtpfake.Counts{Sessions: 2, Mail: 2, Rcpt: 2, Data: 1}); got != want {
		t.Errorf("the server was asked %+v, want %+v: one refused transaction, one message", got, want)
	}
	if msgs := b.smtp.Messages(); len(msgs) != 1 || msgs[0].MessageID() != "<"+id+"@ledger.test>" {
		t.Errorf("the server got %d messages (%+v), want the one with the delivery's Message-ID", len(msgs), msgs)
	}
}

// TestEmailUnknownMailboxIsDeadAfterOneAttempt: 550 5.1.1 at RCPT TO (no such mailbox) is
// permanent: the delivery is dead after its first attempt although its channel allows three,
// and the dead letter names the server's codes and words.
func TestEmailUnknownMailboxIsDeadAfterOneAttempt(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, smtpfake.Config{Behaviour: smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 550,
		EnhancedCode: "5.1.1", Text: "<ghost@example.com>: Recipient address rejected: User unknown"}}, "none", emailRetry)
	id := b.sendEmail(t, "ghost-1", "ghost@example.com")
	st := b.waitState(t, id, domain.StateDead, 15*time.Second)

	h := b.history(t, id)
	want := "accepted,queued,attempt_started,dead_lettered"
	if got := strings.Join(types(h), ","); got != want || st.Attempts != 1 {
		t.Fatalf("history %s (%d attempts), want %s", got, st.Attempts, want)
	}
	dead := attemptResults(t, h, domain.EventDeadLettered)[0]
	if dead.StatusCode != 550 || dead.ProviderCode != "550 5.1.1" || dead.Class != domain.ClassPermanent || dead.Exhausted ||
		!strings.Contains(dead.Error, "User unknown") {
		t.Fatalf("dead with %+v, want a permanent 550 5.1.1 with the server's text, not exhausted attempts", dead)
	}
	if got, want := b.smtp.Counts(), (smtpfake.Counts{Sessions: 1, Mail: 1, Rcpt: 1}); got != want {
		t.Errorf("the server was asked %+v, want %+v", got, want)
	}
}

// TestEmailDroppedAfterDataIsUnknownAndNotResent: a server that reads the whole message, final
// "." included, and drops the connection before its reply may have queued it (RFC 5321 4.1.1.4
// gives the client no way to know). The delivery is unknown, and stays so well past its
// channel's retry tiers: the server saw exactly one DATA, the message was not sent twice.
func TestEmailDroppedAfterDataIsUnknownAndNotResent(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, smtpfake.Config{Behaviour: smtpfake.Behaviour{DropAfterData: true}}, "none", emailRetry)
	id := b.sendEmail(t, "drop-1", "ann@example.com")
	b.waitState(t, id, domain.StateUnknown, 15*time.Second)

	// Nothing is to happen: wait several times the channel's whole schedule (150 ms) and see
	// that nothing did. A retry would have come and gone within it.
	time.Sleep(time.Second)
	h := b.history(t, id)
	want := "accepted,queued,attempt_started,outcome_unknown"
	if got := strings.Join(types(h), ","); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	unknown := attemptResults(t, h, domain.EventOutcomeUnknown)[0]
	if unknown.Class != domain.ClassUnknown || unknown.StatusCode != 0 || !strings.Contains(unknown.Error, "the whole message was sent") {
		t.Fatalf("unknown with %+v, want the adapter's reason: the message was sent whole and no reply came", unknown)
	}
	if c := b.smtp.Counts(); c.Data != 1 || c.Mail != 1 {
		t.Errorf("the server was asked %+v, want exactly one transaction and one DATA", c)
	}
	if msgs := b.smtp.Messages(); len(msgs) != 1 || msgs[0].Reply != "" {
		t.Errorf("the server read %d messages (%+v), want the one it dropped", len(msgs), msgs)
	}
}

// TestEmailStartTLSNotOfferedIsRefusedAndSaysWhy: with tls: starttls the adapter will not send
// to a server that does not offer STARTTLS; each attempt is a transient failure whose history
// says so, the delivery is dead once its channel's attempts are spent, and the server never saw
// a transaction: nothing of the message crossed the wire in the clear.
func TestEmailStartTLSNotOfferedIsRefusedAndSaysWhy(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, smtpfake.Config{StartTLS: false}, "starttls", "retry: {schedule: [50ms]}")
	id := b.sendEmail(t, "plain-1", "ann@example.com")
	b.waitState(t, id, domain.StateDead, 15*time.Second)

	h := b.history(t, id)
	want := "accepted,queued,attempt_started,retry_scheduled,queued,attempt_started,dead_lettered"
	if got := strings.Join(types(h), ","); got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	failures := append(attemptResults(t, h, domain.EventRetryScheduled), attemptResults(t, h, domain.EventDeadLettered)...)
	for _, r := range failures {
		if r.Class != domain.ClassTransient || r.StatusCode != 0 || !strings.Contains(r.Error, "does not offer STARTTLS, which tls: starttls requires") {
			t.Fatalf("attempt %d recorded as %+v, want transient, saying the server does not offer STARTTLS", r.Attempt, r)
		}
	}
	if !failures[1].Exhausted {
		t.Errorf("dead with %+v, want exhausted attempts", failures[1])
	}
	if got, want := b.smtp.Counts(), (smtpfake.Counts{Sessions: 2}); got != want {
		t.Errorf("the server was asked %+v, want %+v: two sessions, no MAIL FROM", got, want)
	}
	if n := len(b.smtp.Messages()); n != 0 {
		t.Errorf("the server got %d messages in the clear", n)
	}
}

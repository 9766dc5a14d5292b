package app

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/adapters/providers/telegram/telegramfake"
	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
	"github.com/deliveryledger/ledger/domain"
)

// The providers' hard evidence end to end (issue 25): a running ledger (API, relay, worker)
// sends through each provider's real-protocol fake, and an answer that says the recipient takes
// no more messages ends the delivery dead with a dead letter that says so ("suppresses": true)
// and names the provider's code, the evidence the suppression list reads. A near miss of each
// ends dead as well, without the flag. The adapters' own tests hold every code; these show that
// the workers, the receipts and the history carry the flag through.

// deadLetter waits for the delivery to be dead and returns its dead letter, checking that the
// stored data says "suppresses": true exactly when suppress.
func deadLetter(t *testing.T, b *e2eBundle, id string, suppress bool) domain.AttemptResult {
	t.Helper()
	b.waitState(t, id, domain.StateDead, 20*time.Second)
	dead := eventsOfType(b.history(t, id), domain.EventDeadLettered)
	if len(dead) != 1 {
		t.Fatalf("delivery %s has %d dead letters, want one: %s", id, len(dead), b.historyString(t, id))
	}
	if got := strings.Contains(string(dead[0].Data), `"suppresses":true`); got != suppress {
		t.Errorf("delivery %s's dead letter %s: suppresses is %t, want %t", id, dead[0].Data, got, suppress)
	}
	var r domain.AttemptResult
	if err := json.Unmarshal(dead[0].Data, &r); err != nil {
		t.Fatal(err)
	}
	// The entry the evidence adds, in the dead letter's transaction: it names this event.
	var entries int
	if err := b.schema.Pool.QueryRow(t.Context(), `SELECT count(*) FROM suppressions WHERE source = 'provider'
  AND evidence->>'delivery_id' = $1 AND (evidence->>'event_version')::int = $2 AND evidence->>'provider_code' = $3`,
		id, dead[0].Version, r.ProviderCode).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{true: 1, false: 0}[suppress]; entries != want {
		t.Errorf("delivery %s: %d suppression entries name its dead letter, want %d", id, entries, want)
	}
	if r.Class != domain.ClassPermanent || r.Exhausted {
		t.Errorf("delivery %s's dead letter %+v, want a permanent refusal, not exhausted attempts", id, r)
	}
	return r
}

// wantSuppressedNext sends another delivery to recipient and checks the accept answers it
// suppressed, by the list entry the provider's evidence (delivery evidence) added.
func wantSuppressedNext(t *testing.T, b *e2eBundle, key, channel, recipient string, payload map[string]any, evidence string) {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/deliveries", key, map[string]any{"channel": channel, "recipient": recipient, "payload": payload})
	var d suppressedDelivery
	if err := json.Unmarshal(body, &d); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept after the evidence: %d %s", resp.StatusCode, body)
	}
	if d.State != "suppressed" || d.Suppression == nil || d.Suppression.Source != domain.SuppressionByProvider ||
		d.Suppression.Evidence == nil || d.Suppression.Evidence.DeliveryID != evidence {
		t.Errorf("the next %s delivery to %s: %s, want suppressed by the evidence of %s", channel, recipient, body, evidence)
	}
}

// wantEvidence checks a dead letter's provider code and what decided it ("" for the call's own
// answer, "receipt" for a callback).
func wantEvidence(t *testing.T, what string, r domain.AttemptResult, code, source string) {
	t.Helper()
	if r.ProviderCode != code || r.Source != source || r.Attempt != 1 {
		t.Errorf("%s: dead letter %+v, want attempt 1 with provider_code %q decided by %q", what, r, code, source)
	}
}

// TestWebhookGoneSuppressesEndToEnd: a receiver's 410 Gone suppresses the endpoint; its 404
// does not.
func TestWebhookGoneSuppressesEndToEnd(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	b.sink.script(func(r *http.Request, _ int) (int, http.Header) {
		if r.URL.Path == "/gone" {
			return http.StatusGone, nil
		}
		return http.StatusNotFound, nil
	})
	a := b.notify(t, "gone-1", b.sink.URL+"/gone", b.sink.URL+"/missing")
	wantEvidence(t, "410", deadLetter(t, b, a.Deliveries[0].ID, true), "410", "")
	wantEvidence(t, "404", deadLetter(t, b, a.Deliveries[1].ID, false), "404", "")
	if n := b.sink.count(a.Deliveries[0].ID); n != 1 {
		t.Errorf("the gone endpoint was called %d times, want once", n)
	}
	wantSuppressedNext(t, b, "gone-2", "webhook", b.sink.URL+"/gone", map[string]any{"k": 2}, a.Deliveries[0].ID)
	if total := b.sink.total(); total != 2 {
		t.Errorf("the sink took %d calls, want 2: the suppressed delivery is never sent", total)
	}

	// Its replay is refused while the endpoint is suppressed (it would only end suppressed, for
	// good), and goes through once the entry is removed.
	dead := a.Deliveries[0].ID
	resp, body := b.do(t, "POST", "/v1/deliveries/"+dead+"/replay", "", map[string]any{"reason": "endpoint is back"})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "suppression list") {
		t.Fatalf("replay of a suppressed recipient's dead delivery: %d %s, want 409 naming the suppression list", resp.StatusCode, body)
	}
	var list struct {
		Items []domain.Suppression `json:"items"`
	}
	resp, body = b.do(t, "GET", "/v1/suppressions?channel=webhook&recipient="+url.QueryEscape(b.sink.URL+"/gone"), "", nil)
	if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != 1 || list.Items[0].Evidence.DeliveryID != dead {
		t.Fatalf("the endpoint's entry: %d %s", resp.StatusCode, body)
	}
	b.sink.script(func(*http.Request, int) (int, http.Header) { return http.StatusOK, nil })
	if resp, body := b.do(t, "DELETE", "/v1/suppressions/"+list.Items[0].ID, "", map[string]any{"reason": "endpoint restored"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("remove: %d %s", resp.StatusCode, body)
	}
	if resp, body := b.do(t, "POST", "/v1/deliveries/"+dead+"/replay", "", map[string]any{"reason": "endpoint is back"}); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("replay after the removal: %d %s", resp.StatusCode, body)
	}
	b.waitState(t, dead, domain.StateDelivered, 10*time.Second)
}

// TestEmailNoSuchMailboxSuppressesEndToEnd: 550 5.1.1 at RCPT TO suppresses the address;
// 550 5.7.1 (policy) does not.
func TestEmailNoSuchMailboxSuppressesEndToEnd(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, smtpfake.Config{Behaviour: smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 550,
		EnhancedCode: "5.1.1", Text: "<ghost@example.com>: Recipient address rejected: User unknown"}}, "none", emailRetry)
	ghost := b.sendEmail(t, "ghost-1", "ghost@example.com")
	wantEvidence(t, "550 5.1.1", deadLetter(t, b.e2eBundle, ghost, true), "550 5.1.1", "")
	wantSuppressedNext(t, b.e2eBundle, "ghost-2", "email", "Ghost <GHOST@example.com>", map[string]any{"subject": "s", "text": "t"}, ghost)

	b.smtp.SetBehaviour(smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 550, EnhancedCode: "5.7.1", Text: "Relaying denied"})
	denied := b.sendEmail(t, "denied-1", "ann@example.com")
	wantEvidence(t, "550 5.7.1", deadLetter(t, b.e2eBundle, denied, false), "550 5.7.1", "")
}

// TestTelegramBlockedSuppressesEndToEnd: 403 (the bot was blocked) suppresses the chat; a 400
// about the message ("message is too long") does not.
func TestTelegramBlockedSuppressesEndToEnd(t *testing.T) {
	t.Parallel()
	b, tg := setupTelegram(t)
	tg.SetBehaviour(telegramfake.Behaviour{Blocked: []string{"111"},
		Refusals: []telegramfake.Refusal{{Chat: "222", Code: 400, Description: "Bad Request: message is too long"}}})
	a := b.acceptNotification(t, "blocked-1", map[string]any{
		"payload": map[string]any{"text": "hello"},
		"recipients": []map[string]string{
			{"channel": "telegram", "recipient": "111"},
			{"channel": "telegram", "recipient": "222"},
		},
	})
	wantEvidence(t, "403", deadLetter(t, b, a.Deliveries[0].ID, true), "403", "")
	wantSuppressedNext(t, b, "blocked-2", "telegram", "111", map[string]any{"text": "again"}, a.Deliveries[0].ID)
	wantEvidence(t, "400 message is too long", deadLetter(t, b, a.Deliveries[1].ID, false), "400", "")
}

// TestTwilioStopAndUnknownHandsetSuppressEndToEnd: on create, 21610 (the person replied STOP)
// suppresses the number and 21612 (not reachable from this sender) does not; after an
// acceptance, an undelivered callback with 30005 (unknown handset) suppresses it and one with
// 30004 (blocked) does not.
func TestTwilioStopAndUnknownHandsetSuppressEndToEnd(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [twilio]}", twilioProvider("twilio", ""))
	b.twilio.SetBehaviour(twiliofake.Behaviour{
		Errors: []twiliofake.ErrorRule{{Code: 21610, To: []string{"+15005550010"}}, {Code: 21612, To: []string{"+15005550011"}}},
		Final: []twiliofake.FinalRule{{Status: "undelivered", Code: 30005, To: []string{"+15005550012"}},
			{Status: "undelivered", Code: 30004, To: []string{"+15005550013"}}},
	})
	stop := b.sendSMS(t, "stop-1", "+15005550010", "your code is 1")
	unreachable := b.sendSMS(t, "pair-1", "+15005550011", "your code is 2")
	unknown := b.sendSMS(t, "handset-1", "+15005550012", "your code is 3")
	blocked := b.sendSMS(t, "blocked-1", "+15005550013", "your code is 4")
	wantEvidence(t, "21610", deadLetter(t, b.e2eBundle, stop, true), "21610", "")
	wantEvidence(t, "21612", deadLetter(t, b.e2eBundle, unreachable, false), "21612", "")
	wantEvidence(t, "30005", deadLetter(t, b.e2eBundle, unknown, true), "30005", "receipt")
	wantEvidence(t, "30004", deadLetter(t, b.e2eBundle, blocked, false), "30004", "receipt")
	wantSuppressedNext(t, b.e2eBundle, "stop-2", "sms", "+15005550010", map[string]any{"text": "again"}, stop)
	wantSuppressedNext(t, b.e2eBundle, "handset-2", "sms", "+15005550012", map[string]any{"text": "again"}, unknown)
}

// TestVonageBarredAndAbsentSuppressEndToEnd: status 7 (number barred) suppresses the number and
// status 3 (invalid parameters) does not; after an acceptance, a failed receipt with err-code 3
// (absent subscriber, permanent) suppresses it and one with err-code 6 (anti-spam) does not.
func TestVonageBarredAndAbsentSuppressEndToEnd(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [vonage]}", vonageProvider("vonage", ""))
	b.vonage.SetBehaviour(vonagefake.Behaviour{
		NumberStatus: map[string]string{"+15005550020": "7", "+15005550021": "3"},
		Final: map[string]vonagefake.DLR{"+15005550022": {Status: "failed", ErrCode: "3"},
			"+15005550023": {Status: "rejected", ErrCode: "6"}},
	})
	barred := b.sendSMS(t, "barred-1", "+15005550020", "first")
	invalid := b.sendSMS(t, "invalid-1", "+15005550021", "second")
	absent := b.sendSMS(t, "absent-1", "+15005550022", "third")
	spam := b.sendSMS(t, "spam-1", "+15005550023", "fourth")
	wantEvidence(t, "status 7", deadLetter(t, b.e2eBundle, barred, true), "7", "")
	wantEvidence(t, "status 3", deadLetter(t, b.e2eBundle, invalid, false), "3", "")
	wantEvidence(t, "err-code 3", deadLetter(t, b.e2eBundle, absent, true), "3", "receipt")
	wantEvidence(t, "err-code 6", deadLetter(t, b.e2eBundle, spam, false), "6", "receipt")
	wantSuppressedNext(t, b.e2eBundle, "barred-2", "sms", "+15005550020", map[string]any{"text": "again"}, barred)
	wantSuppressedNext(t, b.e2eBundle, "absent-2", "sms", "+15005550022", map[string]any{"text": "again"}, absent)
}

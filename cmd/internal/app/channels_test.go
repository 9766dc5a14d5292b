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
	"github.com/deliveryledger/ledger/adapters/providers/telegram/telegramfake"
	"github.com/deliveryledger/ledger/domain"
)

// TestFanOutToEveryChannel: one notification to a webhook, an email address and two Telegram
// chats is accepted at once, and each delivery goes its own way against the providers' real
// protocols: the webhook and the email are delivered, the first chat answers 429 with
// retry_after 2 and is delivered on the next attempt at least 2 s later, the second chat does
// not exist and is dead after one attempt. A notification with one recipient its channel refuses
// is refused whole.
func TestFanOutToEveryChannel(t *testing.T) {
	t.Parallel()
	smtp, err := smtpfake.Start(smtpfake.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { smtp.Close() })
	const token = "42:fan-out-token"
	tg, err := telegramfake.Start(telegramfake.Config{Addr: "127.0.0.1:0", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	notFound, err := telegramfake.ParseBehaviour("chat-not-found=-100999")
	if err != nil {
		t.Fatal(err)
	}
	tg.SetBehaviour(notFound)
	// A variable no other test uses (t.Setenv cannot be used in a parallel test).
	if err := os.Setenv("FANOUT_TG_TOKEN", token); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Unsetenv("FANOUT_TG_TOKEN") })
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	host, port, err := net.SplitHostPort(smtp.Addr())
	if err != nil {
		t.Fatal(err)
	}
	file := fmt.Sprintf(`channels:
  webhook:  {providers: [webhook]}
  email:    {providers: [smtp]}
  telegram: {providers: [bot], retry: {base: 100ms, cap: 1s, max_attempts: 4}}
providers:
  webhook: {type: webhook, timeout: 2s}
  smtp:    {type: smtp, host: %s, port: %s, tls: none, from: "Ledger <noreply@ledger.test>", timeout: 5s}
  bot:     {type: telegram, base_url: %s, token_env: FANOUT_TG_TOKEN, timeout: 2s}
`, host, port, tg.URL())
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setupE2E(t, "", func(c *Config) { c.ConfigFile = path })

	refused, body := b.do(t, "POST", "/v1/notifications", "fan-0", map[string]any{
		"payload": map[string]any{"subject": "s", "text": "t"},
		"recipients": []map[string]string{{"channel": "webhook", "recipient": b.sink.URL + "/ok"},
			{"channel": "email", "recipient": "not an address"}},
	})
	if refused.StatusCode != http.StatusBadRequest || !json.Valid(body) || !strings.Contains(string(body), `"field":"recipients[1].recipient"`) {
		t.Fatalf("a notification with a bad email recipient: %d %s, want 400 naming recipients[1].recipient", refused.StatusCode, body)
	}

	acc := b.acceptNotification(t, "fan-1", map[string]any{
		"payload": map[string]any{"subject": "Order 7 shipped", "text": "On its way.", "html": "<p>On its way.</p>", "order": 7},
		"recipients": []map[string]string{
			{"channel": "webhook", "recipient": b.sink.URL + "/orders"},
			{"channel": "email", "recipient": "Ann <ann@example.com>"},
			{"channel": "telegram", "recipient": "123456789"},
			{"channel": "telegram", "recipient": "-100999"},
		},
	})
	hook, mail, first, gone := acc.Deliveries[0].ID, acc.Deliveries[1].ID, acc.Deliveries[2].ID, acc.Deliveries[3].ID
	b.waitState(t, hook, domain.StateDelivered, 15*time.Second)
	b.waitState(t, mail, domain.StateDelivered, 15*time.Second)
	b.waitState(t, first, domain.StateDelivered, 15*time.Second)
	b.waitState(t, gone, domain.StateDead, 15*time.Second)

	// Flood control: the next call is answered 429 with retry_after 2.
	flood, err := telegramfake.ParseBehaviour("429=2:1")
	if err != nil {
		t.Fatal(err)
	}
	tg.SetBehaviour(flood)
	resp, body := b.do(t, "POST", "/v1/deliveries", "fan-2", map[string]any{"channel": "telegram", "recipient": "123456789",
		"payload": map[string]any{"text": "second"}})
	var one struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &one); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %d %s", resp.StatusCode, body)
	}
	chat := one.ID
	b.waitState(t, chat, domain.StateDelivered, 20*time.Second)

	if msgs := smtp.Messages(); len(msgs) != 1 || msgs[0].Subject() != "Order 7 shipped" || msgs[0].MessageID() != "<"+mail+"@ledger.test>" {
		t.Fatalf("the SMTP server got %d messages (%+v)", len(msgs), msgs)
	}
	// The chat's history: 429 recorded with Telegram's code, the next attempt at least 2 s later.
	var results []domain.AttemptResult
	var started []time.Time
	for _, e := range b.history(t, chat) {
		switch domain.EventType(e.Type) {
		case domain.EventAttemptStarted:
			started = append(started, e.RecordedAt)
		case domain.EventRetryScheduled, domain.EventDelivered:
			var r domain.AttemptResult
			if err := json.Unmarshal(e.Data, &r); err != nil {
				t.Fatal(err)
			}
			results = append(results, r)
		}
	}
	if len(results) != 2 || results[0].StatusCode != 429 || results[0].ProviderCode != "429" || results[1].Provider != "bot" ||
		!strings.HasPrefix(results[1].ProviderOperationID, "123456789:") {
		t.Fatalf("chat history results %+v, want a 429 then delivered by bot with chat:message as operation id", results)
	}
	if gap := started[1].Sub(started[0]); gap < 2*time.Second {
		t.Fatalf("the attempt after retry_after 2 came %s later", gap)
	}
	var dead domain.AttemptResult
	for _, e := range b.history(t, gone) {
		if domain.EventType(e.Type) == domain.EventDeadLettered {
			_ = json.Unmarshal(e.Data, &dead)
		}
	}
	if dead.ProviderCode != "400" || !strings.Contains(dead.Error, "chat not found") {
		t.Fatalf("the missing chat died with %+v, want Telegram's 400 and its description", dead)
	}
}

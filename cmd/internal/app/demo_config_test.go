package app

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/adapters/providers/telegram/telegramfake"
	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
	"github.com/deliveryledger/ledger/domain"
)

// TestTheDemoConfigurationDeliversEveryChannel serves docs/ledger.example.yaml, the file `make
// run` serves, against the fakes `ledger sink` runs (each on a port of this test's own, and the
// secret variables renamed to this test's), and sends the README's first notification to a
// webhook, an email address, a Telegram chat and a phone: every delivery ends delivered, the SMS
// by Twilio's signed status callback.
func TestTheDemoConfigurationDeliversEveryChannel(t *testing.T) {
	t.Parallel()
	demo, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "ledger.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The fakes with the credentials the demo file names (make run hands the same to ledger sink).
	const (
		botToken   = "123456:dev-bot-token"
		twilioSID  = "AC0123456789abcdef0123456789abcdef"
		twilioAuth = "demo-test-twilio-auth-token"
		vonageKey  = "devkey01"
		vonageSec  = "demo-test-vonage-secret"
		vonageCB   = "demo-test-vonage-callback-token"
	)
	smtp, err := smtpfake.Start(smtpfake.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { smtp.Close() })
	tg, err := telegramfake.Start(telegramfake.Config{Addr: "127.0.0.1:0", Token: botToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	tw, err := twiliofake.Start(twiliofake.Config{Addr: "127.0.0.1:0", AccountSID: twilioSID, AuthToken: twilioAuth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tw.Close)
	vg, err := vonagefake.Start(vonagefake.Config{Addr: "127.0.0.1:0", APIKey: vonageKey, APISecret: vonageSec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vg.Close)

	smtpHost, smtpPort, err := net.SplitHostPort(smtp.Addr())
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	file := string(demo)
	rewrites := []struct{ from, to string }{
		{"public_url: http://127.0.0.1:8080", "public_url: http://" + addr},
		{"host: 127.0.0.1, port: 2525", "host: " + smtpHost + ", port: " + smtpPort},
		{"base_url: http://127.0.0.1:8082", "base_url: " + tg.URL()},
		{"base_url: http://127.0.0.1:8083", "base_url: " + tw.URL()},
		{"base_url: http://127.0.0.1:8084", "base_url: " + vg.URL()},
	}
	// Variables of this test alone (t.Setenv cannot be used in a parallel test).
	for name, value := range map[string]string{"TELEGRAM_BOT_TOKEN": botToken, "TWILIO_AUTH_TOKEN": twilioAuth,
		"VONAGE_API_SECRET": vonageSec, "VONAGE_CALLBACK_TOKEN": vonageCB} {
		mine := "DEMO_TEST_" + name
		if err := os.Setenv(mine, value); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Unsetenv(mine) })
		rewrites = append(rewrites, struct{ from, to string }{"_env: " + name, "_env: " + mine})
	}
	for _, r := range rewrites {
		if !strings.Contains(file, r.from) {
			t.Fatalf("docs/ledger.example.yaml no longer holds %q: update this test with it", r.from)
		}
		file = strings.ReplaceAll(file, r.from, r.to)
	}
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setupE2E(t, "", func(c *Config) { c.ConfigFile, c.HTTPAddr = path, addr })

	// The README's first notification, with this test's webhook receiver.
	acc := b.acceptNotification(t, "order-43", map[string]any{
		"payload": map[string]any{"subject": "Order 43 shipped", "text": "Your order is on its way.", "order": 43},
		"recipients": []map[string]string{
			{"channel": "webhook", "recipient": b.sink.URL + "/hook"},
			{"channel": "email", "recipient": "Ann <ann@example.com>"},
			{"channel": "telegram", "recipient": "123456789"},
			{"channel": "sms", "recipient": "+15005550006"},
		},
	})
	for i, d := range acc.Deliveries {
		b.waitState(t, d.ID, domain.StateDelivered, 20*time.Second)
		if i == 3 {
			var res domain.AttemptResult
			for _, e := range eventsOfType(b.history(t, d.ID), domain.EventDelivered) {
				_ = json.Unmarshal(e.Data, &res)
			}
			if res.Provider != "twilio" || res.Source != "receipt" {
				t.Fatalf("the SMS was delivered by %q from %q, want Twilio's receipt", res.Source, res.Provider)
			}
		}
	}
	if n := len(smtp.Messages()); n != 1 {
		t.Errorf("the SMTP server got %d messages, want 1", n)
	}
	if n := len(tg.Messages()); n != 1 {
		t.Errorf("the Bot API got %d messages, want 1", n)
	}
	if n, m := len(tw.Messages()), len(vg.Messages()); n != 1 || m != 0 {
		t.Errorf("Twilio got %d messages and Vonage %d, want 1 and 0", n, m)
	}
}

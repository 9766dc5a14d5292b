package telegram_test

import (
	"testing"

	"github.com/deliveryledger/ledger/adapters/providers/provider/providertest"
	"github.com/deliveryledger/ledger/adapters/providers/telegram"
	"github.com/deliveryledger/ledger/adapters/providers/telegram/telegramfake"
	"github.com/deliveryledger/ledger/commands"
)

// conformanceToken is the bot the fake accepts; its secret half is what may never be printed.
const (
	conformanceToken  = "123456789:AAHconformanceSecretPart_0123456"
	conformanceSecret = "AAHconformanceSecretPart_0123456"
)

// TestConformance runs the Sender contract's suite against the Bot API fake, and against the
// suite's peers for what the fake does not do.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Features: providertest.Features{HTTP: true},
		Secrets:  []string{conformanceSecret},
		Arrange: func(t *testing.T, c providertest.Case, peer providertest.Peer) (commands.Sender, commands.WorkMessage) {
			base := peer.URL
			if base == "" {
				fake, err := telegramfake.Start(telegramfake.Config{Addr: "127.0.0.1:0", Token: conformanceToken})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(fake.Close)
				switch c {
				case providertest.RateLimited:
					fake.SetBehaviour(telegramfake.Behaviour{TooManyRequests: telegramfake.EveryCall, RetryAfter: int(providertest.RetryAfter.Seconds())})
				case providertest.ServerError:
					fake.SetBehaviour(telegramfake.Behaviour{ServerErrors: telegramfake.EveryCall})
				case providertest.Permanent:
					fake.SetBehaviour(telegramfake.Behaviour{ChatNotFound: []string{"42"}})
				}
				base = fake.URL()
			}
			s, err := telegram.New(telegram.Config{Provider: "telegram", BaseURL: base, Token: conformanceToken, Timeout: providertest.Timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.CloseIdleConnections)
			return s, commands.WorkMessage{DeliveryID: "d-conformance", Tenant: "t1", Channel: "telegram", Attempt: 1,
				Recipient: "42", Payload: []byte(`{"text":"Order 7 shipped"}`)}
		},
	})
}

package twilio_test

import (
	"net/http"
	"testing"

	"github.com/deliveryledger/ledger/adapters/providers/provider/providertest"
	"github.com/deliveryledger/ledger/adapters/providers/twilio"
	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/commands"
)

// TestConformance runs the Sender contract's suite against the Twilio fake, and against the
// suite's peers for what the fake does not do.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Features: providertest.Features{HTTP: true,
			ServerErrorUnknown: "Twilio may have created the message before its 5xx (codes.go): only a lookup can tell"},
		Secrets: []string{testToken},
		Arrange: func(t *testing.T, c providertest.Case, peer providertest.Peer) (commands.Sender, commands.WorkMessage) {
			base := peer.URL
			if c == providertest.RateLimited {
				// Twilio's own 429 carries no Retry-After; a gateway in front of it may.
				base = providertest.Answering(t, http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}, "Content-Type": {"application/json"}},
					`{"code":20429,"message":"Too Many Requests","status":429}`).URL
			}
			if base == "" {
				fake, err := twiliofake.Start(twiliofake.Config{Addr: "127.0.0.1:0", AccountSID: testAccount, AuthToken: testToken})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(fake.Close)
				switch c {
				case providertest.ServerError:
					fake.SetBehaviour(twiliofake.Behaviour{Errors: []twiliofake.ErrorRule{{Code: 20500}}})
				case providertest.Permanent:
					fake.SetBehaviour(twiliofake.Behaviour{Errors: []twiliofake.ErrorRule{{Code: 21211}}})
				}
				base = fake.URL()
			}
			s, err := twilio.New(twilio.Config{Provider: "twilio", BaseURL: base, AccountSID: testAccount, AuthToken: testToken,
				From: testFrom, Timeout: providertest.Timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.CloseIdleConnections)
			return s, commands.WorkMessage{DeliveryID: "d-conformance", Tenant: "t1", Channel: "sms", Attempt: 1,
				Recipient: recipient, Payload: []byte(`{"text":"Order 7 shipped"}`)}
		},
	})
}

package vonage_test

import (
	"net/http"
	"testing"

	"github.com/deliveryledger/ledger/adapters/providers/provider/providertest"
	"github.com/deliveryledger/ledger/adapters/providers/vonage"
	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
	"github.com/deliveryledger/ledger/commands"
)

// The account of the conformance suite's senders and fakes.
const (
	conformanceKey    = "abcd5678"
	conformanceSecret = "Zq8sEcretConf+Sec"
)

// TestConformance runs the Sender contract's suite against the Vonage fake, and against the
// suite's peers for what the fake does not do. The SMS API reports its own server errors in a
// 200's body (status 5, internal error), which is the suite's server error here.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Features: providertest.Features{HTTP: true},
		Secrets:  []string{conformanceSecret},
		Arrange: func(t *testing.T, c providertest.Case, peer providertest.Peer) (commands.Sender, commands.WorkMessage) {
			base := peer.URL
			if c == providertest.RateLimited {
				// The SMS API throttles with status 1 and no wait; a proxy in front of it may
				// answer 429 with one.
				base = providertest.Answering(t, http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}}, "slow down").URL
			}
			if base == "" {
				fake, err := vonagefake.Start(vonagefake.Config{Addr: "127.0.0.1:0", APIKey: conformanceKey, APISecret: conformanceSecret})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(fake.Close)
				switch c {
				case providertest.ServerError:
					fake.SetBehaviour(vonagefake.Behaviour{Status: "5", StatusCalls: vonagefake.EveryCall})
				case providertest.Permanent:
					fake.SetBehaviour(vonagefake.Behaviour{Status: "7", StatusCalls: vonagefake.EveryCall}) // number barred
				}
				base = fake.URL()
			}
			s, err := vonage.New(vonage.Config{Provider: "vonage", BaseURL: base, APIKey: conformanceKey, APISecret: conformanceSecret,
				From: "Ledger", Timeout: providertest.Timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.CloseIdleConnections)
			return s, commands.WorkMessage{DeliveryID: "d-conformance", Tenant: "t1", Channel: "sms", Attempt: 1,
				Recipient: "+447700900100", Payload: []byte(`{"text":"Order 7 shipped"}`)}
		},
	})
}

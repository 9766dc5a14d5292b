package webhook_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/deliveryledger/ledger/adapters/providers/provider/providertest"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/commands"
)

// TestConformance runs the Sender contract's suite against receivers on the loopback. The
// endpoint is the recipient's, so no failure counts against the provider.
func TestConformance(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("conformance-signing-key-0123456789"))
	secrets, err := webhook.ParseSecrets("t1:whsec_" + key)
	if err != nil {
		t.Fatal(err)
	}
	// A webhook URL often carries a secret of its receiver's in its path or query; a receiver's
	// error page may echo the request line ("Cannot POST /hooks/...").
	const pathToken, queryToken = "p4thT0kenOfTheReceiver", "qu3ryT0kenOfTheReceiver"
	providertest.Run(t, providertest.Harness{
		Features: providertest.Features{HTTP: true, RecipientEndpoint: true, StatusIsProof: true},
		Secrets:  []string{key, pathToken, queryToken},
		Arrange: func(t *testing.T, c providertest.Case, peer providertest.Peer) (commands.Sender, commands.WorkMessage) {
			target := peer.URL
			if target == "" {
				target = receiver(t, c)
			}
			s, err := webhook.New(webhook.Config{Provider: "webhook", Secrets: secrets, Timeout: providertest.Timeout,
				AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.CloseIdleConnections)
			return s, commands.WorkMessage{DeliveryID: "d-conformance", Tenant: "t1", Channel: "webhook", Attempt: 1,
				Recipient: target + "/hooks/" + pathToken + "?token=" + queryToken, Payload: []byte(`{"order":7}`)}
		},
	})
}

// receiver is a webhook receiver that answers as c says.
func receiver(t *testing.T, c providertest.Case) string {
	status := map[providertest.Case]int{providertest.Delivered: http.StatusNoContent, providertest.RateLimited: http.StatusTooManyRequests,
		providertest.ServerError: http.StatusServiceUnavailable, providertest.Permanent: http.StatusGone}[c]
	if status == 0 {
		t.Fatalf("no receiver for case %s", c)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

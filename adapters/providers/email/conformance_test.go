package email_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email"
	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/adapters/providers/provider/providertest"
	"github.com/deliveryledger/ledger/commands"
)

// The account the conformance suite's relays accept.
const (
	conformanceUser     = "ledger"
	conformancePassword = "conformance-smtp-password-0123"
)

// conformanceFakes makes the SMTP fake behave as each case says. SMTP maps the suite's
// protocol cases onto its replies: a server error is 421 at MAIL FROM (refused before a
// recipient, so not sent), a permanent refusal 550 5.1.1 at RCPT TO; the transport cases are
// the fake's own drops and delays after the final ".".
var conformanceFakes = map[providertest.Case]smtpfake.Behaviour{
	providertest.ResetAfterWrite:   {DropAfterData: true},
	providertest.TimeoutAfterWrite: {Delay: 5 * time.Second},
	providertest.CallerCancelled:   {Delay: 5 * time.Second},
	providertest.ServerError:       {FailAt: smtpfake.StageMail, Code: 421, EnhancedCode: "4.3.2", Text: "Service shutting down"},
	providertest.Permanent:         {FailAt: smtpfake.StageRcpt, Code: 550, EnhancedCode: "5.1.1", Text: "User unknown"},
}

// TestConformance runs the Sender contract's suite against the SMTP fake.
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		Features: providertest.Features{
			ServerErrorNotSent: "a 421 at MAIL FROM comes before any recipient: the relay cannot have queued anything",
			NoRetryAfter:       "SMTP replies carry no requested wait",
			NoOversize:         "replies are read by go-mail's textproto, line by line, within the attempt's deadline: there is no body to bound",
			NoEcho:             "no SMTP relay echoes the session; the password's encodings are redacted from replies (sender_test.go)",
		},
		Secrets: []string{conformancePassword},
		Arrange: func(t *testing.T, c providertest.Case, peer providertest.Peer) (commands.Sender, commands.WorkMessage) {
			addr := peer.Addr
			if addr == "" {
				srv, err := smtpfake.Start(smtpfake.Config{Addr: "127.0.0.1:0", Username: conformanceUser, Password: conformancePassword,
					Behaviour: conformanceFakes[c]})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { srv.Close() })
				addr = srv.Addr()
			}
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(port)
			s, err := email.New(email.Config{Provider: "smtp", Host: host, Port: n, TLS: email.TLSNone, Username: conformanceUser,
				Password: conformancePassword, From: "Ledger <noreply@example.com>", Timeout: providertest.Timeout})
			if err != nil {
				t.Fatal(err)
			}
			return s, commands.WorkMessage{DeliveryID: "d-conformance", Tenant: "t1", Channel: "email", Attempt: 1,
				Recipient: "ann@example.com", Payload: []byte(`{"subject":"Order 7","text":"Shipped."}`)}
		},
	})
}

package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/providers/email"
	"github.com/deliveryledger/ledger/adapters/providers/sms"
	"github.com/deliveryledger/ledger/adapters/providers/telegram"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// idleSender stands in for a channel's provider in a registry that only accepts: no test of
// this file starts an attempt.
type idleSender struct{}

func (idleSender) Provider() string   { return "idle" }
func (idleSender) Deduplicates() bool { return false }
func (idleSender) Send(context.Context, commands.WorkMessage) domain.Outcome {
	return domain.Outcome{Kind: domain.OutcomePermanent, Provider: "idle", Err: "idleSender is never sent through"}
}

// withAllChannels serves the four channels as the wiring does: their checks and normal forms
// from a registry of the adapters' own Channel descriptions.
func withAllChannels(t testing.TB) option {
	channels, err := commands.NewChannels(email.Channel(idleSender{}), telegram.Channel(idleSender{}),
		sms.Channel(idleSender{}), webhook.Channel(idleSender{}))
	if err != nil {
		t.Fatal(err)
	}
	return func(cfg *httpapi.Config, _ *httpapi.Deps) {
		cfg.Channels, cfg.Normalize = channels.Checks(), channels.Normalize
	}
}

// TestAcceptRefusesARecipientRepeatedInNormalForm: two spellings of one recipient on a channel
// (issue 25's examples) are one recipient given twice, refused 400 naming the later one, its
// detail naming the earlier and the normal form; nothing is recorded. Two different recipients
// of the same channel are still accepted, each as given.
func TestAcceptRefusesARecipientRepeatedInNormalForm(t *testing.T) {
	t.Parallel()
	b := setup(t, withAllChannels(t))
	const payload = `{"subject":"Shipped","text":"Order 42."}`
	body := func(channel string, recipients ...string) string {
		parts := make([]string, len(recipients))
		for i, r := range recipients {
			rb, _ := json.Marshal(map[string]string{"channel": channel, "recipient": r})
			parts[i] = string(rb)
		}
		return `{"payload":` + payload + `,"recipients":[` + strings.Join(parts, ",") + `]}`
	}
	for i, tt := range []struct {
		channel, first, again, normal, other string
	}{
		{"email", "a@example.com", "Ann <a@example.com>", "a@example.com", "b@example.com"},
		{"email", "Ann <A@Example.COM>", "a@example.com", "a@example.com", "Bob <b@example.com>"},
		{"telegram", "@chan_name", "@CHAN_NAME", "@chan_name", "@other_chan"},
		{"webhook", "http://h.example/p", "HTTP://h.example/p", "http://h.example/p", "http://h.example/P"},
		{"webhook", "http://h.example/p", "http://h.example/p#f", "http://h.example/p", "http://h.example/p?f"},
		{"webhook", "http://h.example/p", "http://h.example/p?", "http://h.example/p", "http://h.example/p/"},
		{"webhook", "https://h.example", "https://H.EXAMPLE:443/", "https://h.example/", "https://h.example:8443/"},
	} {
		t.Run(tt.channel+"/"+tt.again, func(t *testing.T) {
			key := "normal-" + strconv.Itoa(i)
			p := b.post(t, "/v1/notifications", key, body(tt.channel, tt.first, tt.other, tt.again)).
				expectProblem(t, http.StatusBadRequest, "recipients[2]")
			for _, want := range []string{"recipients[0]", strconv.Quote(tt.normal)} {
				if !strings.Contains(p.Detail, want) {
					t.Errorf("detail %q does not name %s", p.Detail, want)
				}
			}

			var got notificationAccepted
			b.post(t, "/v1/notifications", key+"-distinct", body(tt.channel, tt.first, tt.other)).
				expect(t, http.StatusAccepted, &got)
			if len(got.Deliveries) != 2 || got.Deliveries[0].Recipient != tt.first || got.Deliveries[1].Recipient != tt.other {
				t.Fatalf("accepted %+v, want %q and %q as given", got.Deliveries, tt.first, tt.other)
			}
		})
	}
	if n := b.count(t, `SELECT count(*) FROM accept_requests WHERE request_key NOT LIKE '%-distinct'`); n != 0 {
		t.Fatalf("%d refused requests remembered, want 0", n)
	}
}

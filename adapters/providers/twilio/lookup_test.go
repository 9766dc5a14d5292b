package twilio_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// basicAuth is the credentials of a basic-auth header.
func basicAuth(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// lookupQuery asks about msg by what was sent, since since.
func lookupQuery(msg commands.WorkMessage, since time.Time) commands.LookupQuery {
	var payload struct{ Text string }
	_ = json.Unmarshal(msg.Payload, &payload)
	return commands.LookupQuery{DeliveryID: msg.DeliveryID, Recipient: msg.Recipient, Text: payload.Text, Since: since}
}

// accepted sends msg and returns the sid it was accepted under.
func accepted(t *testing.T, b *bundle, msg commands.WorkMessage) string {
	t.Helper()
	out := send(t, b.sender, msg)
	if out.Kind != domain.OutcomeAccepted {
		t.Fatalf("Send: %s (%s), want accepted", out.Kind, out.Err)
	}
	return out.ProviderOperationID
}

// waitStatus looks q up until its receipt has status, and returns that receipt.
func waitStatus(t *testing.T, b *bundle, q commands.LookupQuery, status commands.ReceiptStatus) commands.Receipt {
	t.Helper()
	var r commands.Receipt
	eventually(t, func() bool {
		var err error
		r, err = lookup(t, b.sender, q)
		if err != nil {
			t.Fatalf("Lookup: %v", err)
		}
		return r.Status == status
	}, "the lookup says "+string(status))
	return r
}

// TestLookupBySID: a held message is pending (queued), and delivered once the fake moves it on.
func TestLookupBySID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(twiliofake.Behaviour{Hold: true})
	sid := accepted(t, b, workMessage(recipient, "hi"))
	q := commands.LookupQuery{OperationID: sid, DeliveryID: "d-1"}

	r, err := lookup(t, b.sender, q)
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	want := commands.Receipt{Provider: "twilio", OperationID: sid, DeliveryID: "d-1", Status: commands.ReceiptPending, ProviderStatus: "queued"}
	r.At = time.Time{}
	if r != want {
		t.Errorf("Lookup = %+v, want %+v", r, want)
	}

	b.fake.Release()
	r = waitStatus(t, b, q, commands.ReceiptDelivered)
	if r.ProviderStatus != "delivered" || r.Code != "" || r.At.IsZero() {
		t.Errorf("Lookup = %+v, want Twilio's delivered, no code, and when", r)
	}
}

// TestLookupUndelivered: an undelivered message is failed or retry by its error code.
func TestLookupUndelivered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		final      twiliofake.FinalRule
		wantStatus commands.ReceiptStatus
		wantDetail string
		// wantSuppress: the code is hard evidence against the number (suppressingCarrierCodes).
		wantSuppress bool
	}{
		{twiliofake.FinalRule{Status: "undelivered", Code: 30005}, commands.ReceiptFailed, "unknown destination handset", true},
		{twiliofake.FinalRule{Status: "undelivered", Code: 30006}, commands.ReceiptFailed, "landline", true},
		{twiliofake.FinalRule{Status: "failed", Code: 30005}, commands.ReceiptFailed, "unknown destination handset", true},
		{twiliofake.FinalRule{Status: "undelivered", Code: 30003}, commands.ReceiptRetry, "unreachable destination handset", false},
		{twiliofake.FinalRule{Status: "undelivered", Code: 30004}, commands.ReceiptFailed, "message blocked", false},
		{twiliofake.FinalRule{Status: "undelivered", Code: 30007}, commands.ReceiptFailed, "message filtered", false},
		{twiliofake.FinalRule{Status: "failed", Code: 30001}, commands.ReceiptRetry, "queue overflow", false},
		{twiliofake.FinalRule{Status: "failed", Code: 30999}, commands.ReceiptFailed, "", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %d", tt.final.Status, tt.final.Code), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			tt.final.To = []string{recipient}
			b.fake.SetBehaviour(twiliofake.Behaviour{Final: []twiliofake.FinalRule{tt.final}})
			sid := accepted(t, b, workMessage(recipient, "hi"))

			r := waitStatus(t, b, commands.LookupQuery{OperationID: sid}, tt.wantStatus)

			if r.ProviderStatus != tt.final.Status || r.Code != itoa(tt.final.Code) || !strings.Contains(r.Detail, tt.wantDetail) {
				t.Errorf("Lookup = %+v, want %s with code %d and detail %q", r, tt.final.Status, tt.final.Code, tt.wantDetail)
			}
			if r.Suppress != tt.wantSuppress {
				t.Errorf("Lookup's Suppress = %t, want %t", r.Suppress, tt.wantSuppress)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestLookupUnknownSID: Twilio has no such message: it was never created.
func TestLookupUnknownSID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := lookup(t, b.sender, commands.LookupQuery{OperationID: "SM00000000000000000000000000000000"})
	if err != nil || r.Status != commands.ReceiptNotFound || r.OperationID != "SM00000000000000000000000000000000" {
		t.Errorf("Lookup = %+v, %v; want not found", r, err)
	}
}

// TestLookupListWithoutMatch: no message from this sender to the recipient with this text since
// the attempt began: not found. A message with another text, to another number, or created
// before the attempt is not the one.
func TestLookupListWithoutMatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	accepted(t, b, workMessage(recipient, "an earlier message"))
	accepted(t, b, workMessage("+14155550199", "Your code is 111111"))
	waitStatus(t, b, lookupQuery(workMessage(recipient, "an earlier message"), time.Now().Add(-time.Minute)), commands.ReceiptDelivered)

	r, err := lookup(t, b.sender, lookupQuery(workMessage(recipient, "Your code is 111111"), time.Now().Add(-time.Minute)))
	if err != nil || r.Status != commands.ReceiptNotFound || r.OperationID != "" {
		t.Errorf("Lookup of another text = %+v, %v; want not found", r, err)
	}
	r, err = lookup(t, b.sender, lookupQuery(workMessage(recipient, "an earlier message"), time.Now().Add(time.Minute)))
	if err != nil || r.Status != commands.ReceiptNotFound {
		t.Errorf("Lookup since after the message = %+v, %v; want not found", r, err)
	}
}

// TestLookupListFindsAQueuedMessage: a message still in the sender's queue has no date_sent, and
// Twilio's DateSent filter leaves it out; the lookup finds it all the same.
func TestLookupListFindsAQueuedMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(twiliofake.Behaviour{Hold: true})
	since := time.Now()
	msg := workMessage(recipient, "still queued")
	sid := accepted(t, b, msg)

	r, err := lookup(t, b.sender, lookupQuery(msg, since))
	if err != nil || r.Status != commands.ReceiptPending || r.OperationID != sid {
		t.Errorf("Lookup = %+v, %v; want the queued message %s, pending", r, err, sid)
	}
}

// TestLookupListPages: the lookup follows next_page_uri, and of two doubles takes the first one
// created since the attempt began.
func TestLookupListPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	since := time.Now()
	first := accepted(t, b, workMessage(recipient, "double"))
	accepted(t, b, workMessage(recipient, "double"))
	for i := range 60 { // more than a page of other messages, newer than the doubles
		accepted(t, b, workMessage(recipient, "filler "+itoa(i)))
	}
	eventually(t, func() bool {
		for _, m := range b.fake.Messages() {
			if m.Status != "delivered" {
				return false
			}
		}
		return true
	}, "every message is delivered")

	r, err := lookup(t, b.sender, lookupQuery(workMessage(recipient, "double"), since))
	if err != nil || r.OperationID != first || r.Status != commands.ReceiptDelivered {
		t.Errorf("Lookup = %+v, %v; want the first double %s, delivered", r, err, first)
	}
}

// TestLookupErrors: what is not Twilio's word on the message is an error, to be asked again
// later, never "not found": a 5xx, a 404 that is not Twilio's, wrong credentials, a query
// that cannot be asked.
func TestLookupErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler http.HandlerFunc
		q       commands.LookupQuery
		errHas  string
	}{
		{"500 on fetch", answering(500, nil, `{"code":20500,"message":"An internal server error has occurred","status":500}`),
			commands.LookupQuery{OperationID: "SM0123"}, "HTTP 500"},
		{"a 404 that is not Twilio's", answering(404, nil, "<html>Not Found</html>"),
			commands.LookupQuery{OperationID: "SM0123"}, "HTTP 404"},
		{"401 on list", answering(401, nil, `{"code":20003,"message":"Authenticate","status":401}`),
			commands.LookupQuery{Recipient: recipient, Text: "hi", Since: time.Now()}, "20003"},
		{"a list that is not JSON", answering(200, nil, "<html>"),
			commands.LookupQuery{Recipient: recipient, Text: "hi", Since: time.Now()}, "not Twilio's JSON"},
		{"a next page elsewhere", answering(200, nil, `{"messages":[],"next_page_uri":"https://elsewhere.example/2010-04-01/Accounts/x/Messages.json"}`),
			commands.LookupQuery{Recipient: recipient, Text: "hi", Since: time.Now()}, "not followed"},
		{"a sid that is no id", answering(200, nil, "{}"),
			commands.LookupQuery{OperationID: "../x"}, "not a message sid"},
		{"no text", answering(200, nil, "{}"),
			commands.LookupQuery{Recipient: recipient, Since: time.Now()}, "the text"},
		{"no since", answering(200, nil, "{}"),
			commands.LookupQuery{Recipient: recipient, Text: "hi"}, "since"},
		{"an echo of the credentials", answering(502, nil, "bad gateway for "+basicAuth(testAccount, testToken)),
			commands.LookupQuery{OperationID: "SM0123"}, "[auth token]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := senderFor(t, newServer(t, tt.handler).URL)
			r, err := lookup(t, s, tt.q)
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("Lookup = %+v, %v; want an error saying %q", r, err, tt.errHas)
			}
		})
	}
}

// TestLookupTimeoutIsAnError: Twilio does not answer in time: nothing is known.
func TestLookupTimeoutIsAnError(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	_, err := lookup(t, senderFor(t, srv.URL), commands.LookupQuery{OperationID: "SM0123"})
	if err == nil {
		t.Error("Lookup = nil error, want the timeout")
	}
}

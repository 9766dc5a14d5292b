package app

import (
	"net/http"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
	"github.com/deliveryledger/ledger/domain"
)

// TestVonageReceiptsByGETAreRecorded: a Vonage account whose dashboard sends delivery receipts
// as a GET query (GET /v1/receipts/{provider}) gets them recorded through the real server, as a
// POST form is: the delivery is delivered on its receipt. A Twilio provider, whose callbacks are
// signed forms, answers a GET 405 and records nothing.
func TestVonageReceiptsByGETAreRecorded(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [vonage, twilio]}", vonageProvider("vonage", "")+twilioProvider("twilio", ""))
	b.vonage.SetBehaviour(vonagefake.Behaviour{ReceiptMethod: vonagefake.ReceiptGet, First: "accepted"})
	id := b.sendSMS(t, "get-dlr-1", "+15005550101", "receipt by GET")
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)
	if h := b.history(t, id); count(h, domain.EventProviderAccepted) != 1 || count(h, domain.EventReceiptRecorded) != 2 {
		t.Fatalf("history %v, want the acceptance and two receipts (accepted, delivered)", types(h))
	}
	receipts := b.vonage.Receipts()
	if len(receipts) != 2 {
		t.Fatalf("the fake sent %d receipts, want 2: %+v", len(receipts), receipts)
	}
	for _, r := range receipts {
		if r.Method != vonagefake.ReceiptGet || r.HTTPStatus != http.StatusOK {
			t.Fatalf("receipt %+v, want a GET answered 200", r)
		}
	}

	resp, err := openapitest.Client(t).Get(b.base + "/v1/receipts/twilio?MessageSid=SM0123&MessageStatus=delivered")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
		t.Fatalf("a GET receipt to twilio: %d, Allow %q; want 405, Allow POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

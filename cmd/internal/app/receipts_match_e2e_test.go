package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/providers/twilio"
	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
	"github.com/deliveryledger/ledger/domain"
)

// receiptAnswer is what the ledger answered a provider's callback.
type receiptAnswer struct {
	status     int
	retryAfter string
	body       string
}

// postReceipt posts a provider's callback form to path (signed with signature unless it is
// empty) and returns the whole answer, checked against docs/openapi.yaml.
func (b *smsBundle) postReceipt(t *testing.T, path string, form url.Values, signature string) receiptAnswer {
	t.Helper()
	req, err := http.NewRequest("POST", b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Error(err)
		return receiptAnswer{}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if signature != "" {
		req.Header.Set(twilio.SignatureHeader, signature)
	}
	resp, err := openapitest.Client(t).Do(req)
	if err != nil {
		t.Error(err)
		return receiptAnswer{}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return receiptAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(body)}
}

// acceptedOperation waits for the delivery's provider acceptance and returns the provider's
// message id.
func (b *smsBundle) acceptedOperation(t *testing.T, id string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if accepted := eventsOfType(b.history(t, id), domain.EventProviderAccepted); len(accepted) > 0 {
			var acc domain.ProviderAcceptance
			if err := json.Unmarshal(accepted[len(accepted)-1].Data, &acc); err != nil || acc.ProviderOperationID == "" {
				t.Fatalf("acceptance %s: %v", accepted[len(accepted)-1].Data, err)
			}
			return acc.ProviderOperationID
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("delivery %s has no provider acceptance: %s", id, b.historyString(t, id))
	return ""
}

// TestVonageReceiptIsMatchedByMessageID (issue 23, row 1): a Vonage receipt names its delivery by
// the message id Vonage gave the delivery's attempt; client-ref only cross-checks it. A receipt
// whose messageId no delivery has, or whose client-ref names another delivery (another tenant's
// webhook, or the right delivery spelt as a URN), is answered 200 recorded:false with no delivery
// named and records nothing anywhere, however many junk ids are posted; the true receipt is
// recorded and decides.
func TestVonageReceiptIsMatchedByMessageID(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [vonage]}\n  webhook: {providers: [webhook]}",
		vonageProvider("vonage", ", receipt_timeout: 1h")+"  webhook: {type: webhook}\n")
	b.vonage.SetBehaviour(vonagefake.Behaviour{LoseReceipts: vonagefake.EveryCall})
	sms := b.sendSMS(t, "match-1", "+15005550201", "matched by message id")
	messageID := b.acceptedOperation(t, sms)

	globex := *b.e2eBundle
	globex.key = "globex-key"
	resp, body := globex.do(t, "POST", "/v1/deliveries", "match-webhook", map[string]any{"channel": "webhook",
		"recipient": b.sink.URL + "/hook", "payload": map[string]any{"text": "another tenant's"}})
	var other struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &other); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept the webhook: %d %s", resp.StatusCode, body)
	}
	globex.waitState(t, other.ID, domain.StateDelivered, 15*time.Second)
	webhookBefore, smsBefore := len(globex.history(t, other.ID)), len(b.history(t, sms))

	path := "/v1/receipts/vonage?token=" + testCBToken
	refused := []url.Values{
		// The repro: a messageId no delivery has, client-ref another tenant's webhook delivery.
		{"messageId": {"0A0000000123ABCD"}, "status": {"failed"}, "err-code": {"6"}, "client-ref": {other.ID}},
		// The SMS's own message id, client-ref another delivery.
		{"messageId": {messageID}, "status": {"failed"}, "err-code": {"6"}, "client-ref": {other.ID}},
		// The SMS's own message id, its id spelt another way.
		{"messageId": {messageID}, "status": {"failed"}, "err-code": {"6"}, "client-ref": {"urn:uuid:" + sms}},
	}
	// Junk message ids with the SMS's own id as client-ref grow no history.
	for i := range 12 {
		refused = append(refused, url.Values{"messageId": {fmt.Sprintf("0FFFFFFF%08d", i)}, "status": {"accepted"},
			"err-code": {"0"}, "client-ref": {sms}})
	}
	var wg sync.WaitGroup
	for _, form := range refused {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := b.postReceipt(t, path, form, "")
			var answer map[string]any
			_ = json.Unmarshal([]byte(a.body), &answer)
			if a.status != http.StatusOK || answer["recorded"] != false || answer["delivery_id"] != nil || answer["state"] != nil {
				t.Errorf("receipt %v: %d %s, want 200 recorded:false naming no delivery", form, a.status, a.body)
			}
			if strings.Contains(a.body, "urn:uuid") || strings.Contains(a.body, other.ID) {
				t.Errorf("receipt %v: the answer %s echoes the client-ref", form, a.body)
			}
		}()
	}
	wg.Wait()
	if n := len(globex.history(t, other.ID)); n != webhookBefore {
		t.Errorf("the other tenant's webhook delivery gained %d events: %s", n-webhookBefore, globex.historyString(t, other.ID))
	}
	if n := len(b.history(t, sms)); n != smsBefore {
		t.Errorf("the SMS gained %d events from refused receipts: %s", n-smsBefore, b.historyString(t, sms))
	}

	// The true receipt, with and without client-ref, is recorded and decides.
	a := b.postReceipt(t, path, url.Values{"messageId": {messageID}, "status": {"accepted"}}, "")
	if a.status != http.StatusOK || !strings.Contains(a.body, `"recorded":true`) || !strings.Contains(a.body, sms) {
		t.Fatalf("the true pending receipt: %d %s", a.status, a.body)
	}
	a = b.postReceipt(t, path, url.Values{"messageId": {messageID}, "status": {"delivered"}, "err-code": {"0"}, "client-ref": {sms}}, "")
	if a.status != http.StatusOK || !strings.Contains(a.body, `"recorded":true`) || !strings.Contains(a.body, `"state":"delivered"`) {
		t.Fatalf("the true receipt: %d %s", a.status, a.body)
	}
	if h := b.history(t, sms); count(h, domain.EventReceiptRecorded) != 2 || count(h, domain.EventDelivered) != 1 {
		t.Fatalf("after the true receipts: %v", types(h))
	}
}

// TestConcurrentVonageReceiptsNeverAnswer500 (issue 23, row 2): 200 receipts about one message,
// 20 at a time, of three statuses with 200 err-codes between them, are each answered 200 (or 503
// with Retry-After, which Vonage tries again), never 500; each status is recorded once.
func TestConcurrentVonageReceiptsNeverAnswer500(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [vonage]}", vonageProvider("vonage", ", receipt_timeout: 1h"))
	b.vonage.SetBehaviour(vonagefake.Behaviour{LoseReceipts: vonagefake.EveryCall})
	sms := b.sendSMS(t, "storm-vg", "+15005550202", "many receipts")
	messageID := b.acceptedOperation(t, sms)
	forms := make([]url.Values, 200)
	for i := range forms {
		status := []string{"accepted", "buffered", "accepted", "delivered"}[i%4]
		forms[i] = url.Values{"messageId": {messageID}, "status": {status}, "err-code": {fmt.Sprint(i)}, "client-ref": {sms}}
	}
	b.storm(t, "/v1/receipts/vonage?token="+testCBToken, forms, nil)
	b.waitState(t, sms, domain.StateDelivered, 5*time.Second)
	if h := b.history(t, sms); count(h, domain.EventReceiptRecorded) != 3 || count(h, domain.EventDelivered) != 1 {
		t.Fatalf("after 200 receipts of three statuses: %v, want each status recorded once", types(h))
	}
}

// TestConcurrentTwilioReceiptsNeverAnswer500 (issue 23, row 2): 100 signed callbacks saying sent,
// with 100 ErrorCodes, about one SID, 20 at a time, are each answered 200 (or 503 with
// Retry-After), never 500; the status is recorded once.
func TestConcurrentTwilioReceiptsNeverAnswer500(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [twilio]}", twilioProvider("twilio", ", receipt_timeout: 1h"))
	b.twilio.SetBehaviour(twiliofake.Behaviour{Hold: true})
	sms := b.sendSMS(t, "storm-tw", "+15005550203", "many callbacks")
	sid := b.acceptedOperation(t, sms)
	forms := make([]url.Values, 100)
	for i := range forms {
		forms[i] = url.Values{"AccountSid": {testSID}, "MessageSid": {sid}, "MessageStatus": {"sent"}, "ErrorCode": {fmt.Sprint(30000 + i)}}
	}
	b.storm(t, "/v1/receipts/twilio", forms, func(form url.Values) string {
		return twilio.Signature(testAuthToken, b.public+"/v1/receipts/twilio", form)
	})
	if h := b.history(t, sms); count(h, domain.EventReceiptRecorded) != 1 {
		t.Fatalf("after 100 callbacks saying sent: %v, want one receipt", types(h))
	}
}

// storm posts forms to path 20 at a time (each signed by sign when it is set), and fails the
// test for any answer but 200, or 503 with Retry-After.
func (b *smsBundle) storm(t *testing.T, path string, forms []url.Values, sign func(url.Values) string) {
	t.Helper()
	work := make(chan url.Values)
	var mu sync.Mutex
	answers := map[int]int{}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for form := range work {
				signature := ""
				if sign != nil {
					signature = sign(form)
				}
				a := b.postReceipt(t, path, form, signature)
				mu.Lock()
				answers[a.status]++
				mu.Unlock()
				if a.status != http.StatusOK && (a.status != http.StatusServiceUnavailable || a.retryAfter == "") {
					t.Errorf("receipt %v: %d (Retry-After %q) %s, want 200, or 503 with Retry-After", form, a.status, a.retryAfter, a.body)
				}
			}
		}()
	}
	for _, form := range forms {
		work <- form
	}
	close(work)
	wg.Wait()
	t.Logf("answers by status: %v", answers)
}

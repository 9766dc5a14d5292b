package vonage

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestReceiptsFromTheFake: the receipts the fake sends, in each of the three ways Vonage sends
// them, parse into the ledger's terms, naming the delivery by client-ref and the message by the
// message-id the send was answered with.
func TestReceiptsFromTheFake(t *testing.T) {
	t.Parallel()
	for _, method := range []string{vonagefake.ReceiptPost, vonagefake.ReceiptGet, vonagefake.ReceiptJSON} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.fake.SetBehaviour(vonagefake.Behaviour{ReceiptMethod: method, Final: map[string]vonagefake.DLR{
				"447700900003": {Status: "failed", ErrCode: "3"},
				"447700900002": {Status: "failed", ErrCode: "2"},
				"447700900006": {Status: "rejected", ErrCode: "6"},
				"447700900009": {Status: "expired"},
				"447700900004": {Status: "rejected", ErrCode: "4"},
				"447700900019": {Status: "failed", ErrCode: "9"},
				"447700900014": {Status: "failed", ErrCode: "14"},
			}})
			cases := []struct {
				recipient      string
				want           commands.ReceiptStatus
				providerStatus string
				code           string
				// suppress: the err-code is hard evidence against the number
				// (suppressingReceiptCodes).
				suppress bool
			}{
				{"+447700900001", commands.ReceiptDelivered, "delivered", "", false},
				{"+447700900003", commands.ReceiptFailed, "failed", "3", true},
				{"+447700900002", commands.ReceiptRetry, "failed", "2", false},
				{"+447700900006", commands.ReceiptFailed, "rejected", "6", false},
				{"+447700900009", commands.ReceiptRetry, "expired", "1", false},
				{"+447700900004", commands.ReceiptFailed, "rejected", "4", true},
				{"+447700900019", commands.ReceiptFailed, "failed", "9", true},
				{"+447700900014", commands.ReceiptFailed, "failed", "14", false},
			}
			for i, c := range cases {
				before := time.Now().UTC().Add(-2 * time.Second)
				out := send(t, b.sender, workMessage(c.recipient, "Order 42 has shipped"))
				if out.Kind != domain.OutcomeAccepted {
					t.Fatalf("%s: Kind = %s (%s), want accepted", c.recipient, out.Kind, out.Err)
				}
				got := b.sink.waitFor(t, i+1)[i]
				if method == vonagefake.ReceiptGet && len(got.body) != 0 {
					t.Errorf("a GET receipt has a body: %q", got.body)
				}

				r, err := b.sender.ParseReceipt(got.url, got.header, got.body)

				if err != nil {
					t.Fatalf("%s: ParseReceipt: %v", c.recipient, err)
				}
				if r.Status != c.want || r.ProviderStatus != c.providerStatus || r.Code != c.code {
					t.Errorf("%s: receipt %s/%s code %q, want %s/%s code %q", c.recipient, r.Status, r.ProviderStatus, r.Code, c.want, c.providerStatus, c.code)
				}
				if r.Suppress != c.suppress {
					t.Errorf("%s: receipt's Suppress = %t, want %t", c.recipient, r.Suppress, c.suppress)
				}
				if r.Provider != "vonage" || r.OperationID != out.ProviderOperationID || r.DeliveryID != testDeliveryID {
					t.Errorf("%s: receipt %+v, want provider vonage, operation %s, delivery %s", c.recipient, r, out.ProviderOperationID, testDeliveryID)
				}
				if r.At.Before(before) || r.At.After(time.Now().Add(2*time.Second)) || r.At.Location() != time.UTC {
					t.Errorf("%s: At = %s, want the fake's message-timestamp, just now, in UTC", c.recipient, r.At)
				}
				if c.code != "" && r.Detail == "" {
					t.Errorf("%s: Detail is empty, want the err-code's meaning", c.recipient)
				}
			}
		})
	}
}

// TestReceiptsPendingFirst: an accepted or buffered receipt is pending, and the final one that
// follows it decides.
func TestReceiptsPendingFirst(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"accepted", "buffered"} {
		t.Run(first, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.fake.SetBehaviour(vonagefake.Behaviour{First: first})
			out := send(t, b.sender, workMessage("+447700900001", "hi"))
			if out.Kind != domain.OutcomeAccepted {
				t.Fatalf("Kind = %s (%s), want accepted", out.Kind, out.Err)
			}
			got := b.sink.waitFor(t, 2)
			want := []struct {
				status         commands.ReceiptStatus
				providerStatus string
			}{{commands.ReceiptPending, first}, {commands.ReceiptDelivered, "delivered"}}
			for i, w := range want {
				r, err := b.sender.ParseReceipt(got[i].url, got[i].header, got[i].body)
				if err != nil || r.Status != w.status || r.ProviderStatus != w.providerStatus || r.OperationID != out.ProviderOperationID {
					t.Errorf("receipt %d = %+v, %v; want %s (%s) for %s", i+1, r, err, w.status, w.providerStatus, out.ProviderOperationID)
				}
			}
		})
	}
}

// TestReceiptsLostAndRepeated: a lost receipt never reaches the endpoint; one sent twice parses
// to the same receipt twice (recording it is idempotent above this adapter).
func TestReceiptsLostAndRepeated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(vonagefake.Behaviour{LoseReceipts: 1, DuplicateReceipts: 1})
	lost := send(t, b.sender, workMessage("+447700900001", "first"))
	eventually(t, func() bool { return len(b.fake.Receipts()) == 1 }, "the fake decides the first receipt")
	if r := b.fake.Receipts()[0]; !r.Lost || r.MessageID != lost.ProviderOperationID {
		t.Errorf("the fake's first receipt = %+v, want message %s's, lost", r, lost.ProviderOperationID)
	}
	twice := send(t, b.sender, workMessage("+447700900002", "second"))

	got := b.sink.waitFor(t, 2)

	var parsed []commands.Receipt
	for _, c := range got {
		r, err := b.sender.ParseReceipt(c.url, c.header, c.body)
		if err != nil {
			t.Fatalf("ParseReceipt: %v", err)
		}
		parsed = append(parsed, r)
	}
	if parsed[0] != parsed[1] || parsed[0].OperationID != twice.ProviderOperationID {
		t.Errorf("receipts %+v, want the second message's receipt twice", parsed)
	}
	if n := len(b.sink.callbacks()); n != 2 {
		t.Errorf("the endpoint got %d receipts, want 2: the lost one never comes", n)
	}
}

// receiptURL is a callback URL with the DLR parameters in its query (a GET receipt) and token
// as the token ("" for none).
func receiptURL(token string, dlr map[string]string) string {
	q := url.Values{}
	for k, v := range dlr {
		q.Set(k, v)
	}
	if token != "" {
		q.Set("token", token)
	}
	return "https://ledger.example.com/v1/receipts/vonage?" + q.Encode()
}

// receiptSender is a sender that authenticates receipts with testToken.
func receiptSender(t *testing.T) *Sender {
	t.Helper()
	return newSender(t, Config{Provider: "vonage", APIKey: testKey, APISecret: testSecret, From: "Ledger",
		Callback: "https://ledger.example.com/v1/receipts/vonage?token=" + testToken, CallbackToken: testToken})
}

// delivered is a well-formed DLR.
func delivered() map[string]string {
	return map[string]string{"messageId": "0A0000001234567B", "status": "delivered", "err-code": "0", "client-ref": testDeliveryID,
		"msisdn": "447700900001", "to": "Ledger", "message-timestamp": "2020-01-01 12:00:00", "price": "0.03330000", "scts": "2001011400"}
}

// TestParseReceiptAuthentication: only a callback URL that carries our token, once, is read; a
// receipt without it is refused before anything else is looked at, and no error repeats a
// token.
func TestParseReceiptAuthentication(t *testing.T) {
	t.Parallel()
	s := receiptSender(t)
	wrong := "cbTok-not-the-right-one-0000"
	noID := delivered()
	delete(noID, "messageId")
	form := url.Values{"messageId": {"0A01"}, "status": {"delivered"}, "token": {testToken}}.Encode()
	tests := []struct {
		name   string
		url    string
		header http.Header
		body   string
	}{
		{"no token", receiptURL("", delivered()), nil, ""},
		{"a wrong token", receiptURL(wrong, delivered()), nil, ""},
		{"the token with a suffix", receiptURL(testToken+"x", delivered()), nil, ""},
		{"a prefix of the token", receiptURL(testToken[:10], delivered()), nil, ""},
		{"the token twice", receiptURL(testToken, delivered()) + "&token=" + url.QueryEscape(testToken), nil, ""},
		{"the token in the body only", "https://ledger.example.com/v1/receipts/vonage",
			http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, form},
		{"a wrong token on a malformed receipt", receiptURL(wrong, noID), nil, ""},
		{"an unreadable URL", "https://ledger.example.com/%zz?token=" + testToken, nil, ""},
		{"an unreadable query", "https://ledger.example.com/v1/receipts/vonage?token=" + testToken + "&x=%zz", nil, ""},
	}
	for _, tt := range tests {
		_, err := s.ParseReceipt(tt.url, tt.header, []byte(tt.body))
		if !errors.Is(err, commands.ErrReceiptUnauthenticated) {
			t.Errorf("%s: ParseReceipt = %v, want ErrReceiptUnauthenticated", tt.name, err)
			continue
		}
		if secret := holdsSecret(err.Error()); secret != "" || strings.Contains(err.Error(), wrong) {
			t.Errorf("%s: the error %q repeats a token", tt.name, err)
		}
	}

	// A provider without a callback token refuses every receipt, even one naming a token.
	bare := newSender(t, Config{Provider: "vonage", APIKey: testKey, APISecret: testSecret, From: "Ledger"})
	if _, err := bare.ParseReceipt(receiptURL(testToken, delivered()), nil, nil); !errors.Is(err, commands.ErrReceiptUnauthenticated) {
		t.Errorf("without a callback token: ParseReceipt = %v, want ErrReceiptUnauthenticated", err)
	}
	if _, err := s.ParseReceipt(receiptURL(testToken, delivered()), nil, nil); err != nil {
		t.Errorf("the right token: ParseReceipt = %v, want the receipt", err)
	}
}

// TestParseReceiptMalformed: an authenticated callback that does not hold a receipt of the form
// Vonage sends is malformed.
func TestParseReceiptMalformed(t *testing.T) {
	t.Parallel()
	s := receiptSender(t)
	without := func(key string) map[string]string { d := delivered(); delete(d, key); return d }
	with := func(key, value string) map[string]string { d := delivered(); d[key] = value; return d }
	tokenOnly := receiptURL(testToken, nil)
	jsonType := http.Header{"Content-Type": {"application/json"}}
	tests := []struct {
		name   string
		url    string
		header http.Header
		body   string
	}{
		{"no messageId", receiptURL(testToken, without("messageId")), nil, ""},
		{"an empty messageId", receiptURL(testToken, with("messageId", "")), nil, ""},
		{"no status", receiptURL(testToken, without("status")), nil, ""},
		{"nothing at all", tokenOnly, nil, ""},
		{"a messageId that is no id", receiptURL(testToken, with("messageId", "0A01\nX-Forged: 1")), nil, ""},
		{"a status that is no word", receiptURL(testToken, with("status", "deliv ered!")), nil, ""},
		{"an err-code that is no number", receiptURL(testToken, with("err-code", "x1")), nil, ""},
		{"a client-ref with controls", receiptURL(testToken, with("client-ref", "a\x00b")), nil, ""},
		{"messageId twice", receiptURL(testToken, delivered()) + "&messageId=0A02", nil, ""},
		{"JSON that is not an object", tokenOnly, jsonType, `["messageId"]`},
		{"JSON with an object member", tokenOnly, jsonType, `{"messageId":{"id":"0A01"},"status":"delivered"}`},
		{"JSON cut short", tokenOnly, jsonType, `{"messageId":"0A01","status":`},
		{"a body of another type", tokenOnly, http.Header{"Content-Type": {"text/plain"}}, "messageId=0A01&status=delivered"},
		{"a body too large", tokenOnly, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}},
			"messageId=0A01&status=delivered&pad=" + strings.Repeat("x", maxReceiptBody)},
	}
	for _, tt := range tests {
		_, err := s.ParseReceipt(tt.url, tt.header, []byte(tt.body))
		if !errors.Is(err, commands.ErrReceiptMalformed) {
			t.Errorf("%s: ParseReceipt = %v, want ErrReceiptMalformed", tt.name, err)
		}
		if err != nil && holdsSecret(err.Error()) != "" {
			t.Errorf("%s: the error %q repeats the token", tt.name, err)
		}
	}
}

// TestParseReceiptBodies: a POST form and a POST of JSON (numbers taken as Vonage's strings, a
// body without Content-Type recognised) read as the same receipt as the GET.
func TestParseReceiptBodies(t *testing.T) {
	t.Parallel()
	s := receiptSender(t)
	want, err := s.ParseReceipt(receiptURL(testToken, delivered()), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{}
	for k, v := range delivered() {
		form.Set(k, v)
	}
	asJSON := `{"messageId":"0A0000001234567B","status":"delivered","err-code":0,"client-ref":"` + testDeliveryID +
		`","msisdn":447700900001,"to":"Ledger","message-timestamp":"2020-01-01 12:00:00","price":"0.03330000","scts":"2001011400"}`
	bodies := []struct {
		name   string
		header http.Header
		body   string
	}{
		{"form", http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=UTF-8"}}, form.Encode()},
		{"JSON", http.Header{"Content-Type": {"application/json"}}, asJSON},
		{"JSON without Content-Type", nil, asJSON},
		{"form without Content-Type", nil, form.Encode()},
	}
	for _, tt := range bodies {
		got, err := s.ParseReceipt(receiptURL(testToken, nil), tt.header, []byte(tt.body))
		if err != nil || got != want {
			t.Errorf("%s: ParseReceipt = %+v, %v; want %+v", tt.name, got, err, want)
		}
	}
	if want.At != time.Date(2020, 1, 1, 12, 0, 0, 0, time.UTC) || want.Code != "" || want.Status != commands.ReceiptDelivered {
		t.Errorf("receipt %+v, want delivered at 2020-01-01 12:00:00 UTC without a code", want)
	}
}

// TestParseReceiptMapping holds the mapping of (status, err-code) to an independent copy of
// Vonage's tables (docs: SMS "Delivery receipts", DLR status messages and DLR error codes).
func TestParseReceiptMapping(t *testing.T) {
	t.Parallel()
	s := receiptSender(t)
	const (
		pending   = commands.ReceiptPending
		delivered = commands.ReceiptDelivered
		failed    = commands.ReceiptFailed
		retry     = commands.ReceiptRetry
	)
	byCode := map[string]commands.ReceiptStatus{
		"1": retry, "2": retry, "3": failed, "4": failed, "5": failed, "6": failed, "7": retry, "8": retry,
		"9": failed, "10": failed, "11": failed, "12": failed, "13": failed, "14": failed, "15": retry, "99": retry,
		"42": failed, "0": failed, "": failed, // not in the table: failed, for an operator to replay
	}
	for code, want := range byCode {
		for _, status := range []string{"failed", "rejected"} {
			dlr := map[string]string{"messageId": "0A01", "status": status, "err-code": code}
			r, err := s.ParseReceipt(receiptURL(testToken, dlr), nil, nil)
			if err != nil || r.Status != want {
				t.Errorf("%s with err-code %q: %+v, %v; want %s", status, code, r, err, want)
			}
			if code != "" && code != "0" && (r.Code != code || r.Detail == "") {
				t.Errorf("%s with err-code %q: Code %q, Detail %q; want the code and its meaning", status, code, r.Code, r.Detail)
			}
		}
	}
	byStatus := map[string]commands.ReceiptStatus{
		"accepted": pending, "buffered": pending, "unknown": pending, "delivered": delivered, "expired": retry,
		"DELIVERED": delivered, "something-new": pending,
	}
	for status, want := range byStatus {
		r, err := s.ParseReceipt(receiptURL(testToken, map[string]string{"messageId": "0A01", "status": status}), nil, nil)
		if err != nil || r.Status != want || r.ProviderStatus != strings.ToLower(status) {
			t.Errorf("status %q: %+v, %v; want %s", status, r, err, want)
		}
		if !r.At.IsZero() || r.DeliveryID != "" {
			t.Errorf("status %q: At %s, DeliveryID %q; want neither without message-timestamp and client-ref", status, r.At, r.DeliveryID)
		}
	}
	r, err := s.ParseReceipt(receiptURL(testToken, map[string]string{"messageId": "0A01", "status": "delivered", "message-timestamp": "yesterday"}), nil, nil)
	if err != nil || !r.At.IsZero() {
		t.Errorf("an unreadable message-timestamp: %+v, %v; want the receipt without At", r, err)
	}
}

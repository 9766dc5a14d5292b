package twilio_test

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/adapters/providers/twilio"
	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/commands"
)

// TestSignatureTwilioExample: the worked example of Twilio's request validation documentation
// and its helper libraries' tests (twilio-python, twilio-php, twilio-csharp RequestValidator
// tests): auth token 12345, this URL and these parameters sign as RSOYDt4T1cUTdK1PDd93/VVr8B8=.
func TestSignatureTwilioExample(t *testing.T) {
	t.Parallel()
	form := url.Values{
		"CallSid": {"CA1234567890ABCDE"},
		"Caller":  {"+14158675309"},
		"Digits":  {"1234"},
		"From":    {"+14158675309"},
		"To":      {"+18005551212"},
	}
	const exampleURL = "https://mycompany.com/myapp.php?foo=1&bar=2"
	if got := twilio.Signature("12345", exampleURL, form); got != "RSOYDt4T1cUTdK1PDd93/VVr8B8=" {
		t.Errorf("Signature = %q, want Twilio's RSOYDt4T1cUTdK1PDd93/VVr8B8=", got)
	}
	// Every input counts.
	changed := url.Values{}
	for k, v := range form {
		changed[k] = v
	}
	changed.Set("Digits", "9999")
	for name, got := range map[string]string{
		"token":     twilio.Signature("54321", exampleURL, form),
		"url":       twilio.Signature("12345", exampleURL+"&x=1", form),
		"parameter": twilio.Signature("12345", exampleURL, changed),
	} {
		if got == "RSOYDt4T1cUTdK1PDd93/VVr8B8=" {
			t.Errorf("another %s signs the same", name)
		}
	}
	// A name with several values: each distinct value once, sorted, as the helper libraries do
	// (vector from a project's test of twilio-python's RequestValidator).
	repeated := url.Values{"Sid": {"CA123"}, "SidAccount": {"AC123"}, "Digits": {"5678", "1234", "1234"}}
	if got := twilio.Signature("12345", exampleURL, repeated); got != "IK+Dwps556ElfBT0I3Rgjkr1wJU=" {
		t.Errorf("Signature of repeated values = %q, want IK+Dwps556ElfBT0I3Rgjkr1wJU=", got)
	}
}

// waitCallback waits for the receiver to get a callback with this status for sid.
func waitCallback(t *testing.T, b *bundle, sid, status string) callback {
	t.Helper()
	var got callback
	eventually(t, func() bool {
		for _, c := range b.receiver.callbacks() {
			form, err := url.ParseQuery(string(c.body))
			if err == nil && form.Get("MessageSid") == sid && form.Get("MessageStatus") == status {
				got = c
				return true
			}
		}
		return false
	}, "the "+status+" callback of "+sid+" arrives")
	return got
}

// parse reads a callback, and fails the test if the receipt or the error holds a token.
func parse(t *testing.T, s *twilio.Sender, callbackURL string, header http.Header, body []byte) (commands.Receipt, error) {
	t.Helper()
	r, err := s.ParseReceipt(callbackURL, header, body)
	if holdsToken(r.Detail + r.ProviderStatus + r.Code + " " + errText(err)) {
		t.Errorf("ParseReceipt's answer holds an auth token: %+v %v", r, err)
	}
	return r, err
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestParseReceiptFromTheFake: the callbacks the fake signs as Twilio does verify and parse:
// sent is pending, delivered is delivered, undelivered with a code that a retry may mend is
// retry.
func TestParseReceiptFromTheFake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(twiliofake.Behaviour{Final: []twiliofake.FinalRule{{Status: "undelivered", Code: 30003, To: []string{"+14155550199"}}}})
	delivered := accepted(t, b, workMessage(recipient, "hi"))
	undelivered := accepted(t, b, workMessage("+14155550199", "hi"))

	for _, tt := range []struct {
		sid, status string
		want        commands.Receipt
	}{
		{delivered, "sent", commands.Receipt{Status: commands.ReceiptPending, ProviderStatus: "sent"}},
		{delivered, "delivered", commands.Receipt{Status: commands.ReceiptDelivered, ProviderStatus: "delivered"}},
		{undelivered, "undelivered", commands.Receipt{Status: commands.ReceiptRetry, ProviderStatus: "undelivered",
			Code: "30003", Detail: "unreachable destination handset"}},
	} {
		c := waitCallback(t, b, tt.sid, tt.status)
		if c.url != b.callbackURL {
			t.Errorf("the callback came to %s, want the StatusCallback %s", c.url, b.callbackURL)
		}
		r, err := parse(t, b.sender, b.callbackURL, c.header, c.body)
		if err != nil {
			t.Fatalf("ParseReceipt(%s %s) = %v", tt.sid, tt.status, err)
		}
		hasAt := !r.At.IsZero()
		r.At = r.At.UTC().Truncate(0)
		want := tt.want
		want.Provider, want.OperationID = "twilio", tt.sid
		got := r
		got.At = want.At
		if got != want {
			t.Errorf("ParseReceipt(%s) = %+v, want %+v", tt.status, got, want)
		}
		if hasAt != (tt.status != "sent") {
			t.Errorf("ParseReceipt(%s).At = %v, want the carrier's time on final callbacks only", tt.status, r.At)
		}
	}
}

// TestParseReceiptSuppresses: the status callbacks the fake signs for an undelivered message
// suppress the number for 30005 (not in service) and 30006 (landline), and not for their near
// misses: 30003 (unreachable for now, retried) and 30004 (blocked, by whom it does not say).
func TestParseReceiptSuppresses(t *testing.T) {
	t.Parallel()
	for code, suppress := range map[int]bool{30005: true, 30006: true, 30003: false, 30004: false} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.fake.SetBehaviour(twiliofake.Behaviour{Final: []twiliofake.FinalRule{{Status: "undelivered", Code: code}}})
			sid := accepted(t, b, workMessage(recipient, "hi"))
			c := waitCallback(t, b, sid, "undelivered")
			r, err := parse(t, b.sender, b.callbackURL, c.header, c.body)
			if err != nil {
				t.Fatalf("ParseReceipt = %v", err)
			}
			if r.Code != strconv.Itoa(code) || r.Suppress != suppress {
				t.Errorf("ParseReceipt = %+v, want code %d with Suppress %t", r, code, suppress)
			}
		})
	}
}

// TestParseReceiptRefusesForgeries: a changed parameter, a wrong token, another URL, a missing
// or empty header, another account's message: not authenticated.
func TestParseReceiptRefusesForgeries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sid := accepted(t, b, workMessage(recipient, "hi"))
	c := waitCallback(t, b, sid, "delivered")
	form, _ := url.ParseQuery(string(c.body))
	signed := func(token, u string, f url.Values) http.Header {
		return http.Header{twilio.SignatureHeader: {twilio.Signature(token, u, f)}}
	}
	changed := cloneForm(form)
	changed.Set("MessageStatus", "undelivered")
	added := cloneForm(form)
	added.Set("ErrorCode", "30003")
	otherAccount := cloneForm(form)
	otherAccount.Set("AccountSid", "AC99999999999999999999999999999999")
	other := newSender(t, func() twilio.Config { cfg := b.cfg; cfg.AuthToken = otherToken; return cfg }())

	tests := []struct {
		name   string
		sender *twilio.Sender
		url    string
		header http.Header
		body   string
	}{
		{"a changed parameter", b.sender, b.callbackURL, c.header, changed.Encode()},
		{"an added parameter", b.sender, b.callbackURL, c.header, added.Encode()},
		{"another URL", b.sender, b.callbackURL + "?x=1", c.header, string(c.body)},
		{"the receiver's token is another", other, b.callbackURL, c.header, string(c.body)},
		{"signed with another token", b.sender, b.callbackURL, signed(otherToken, b.callbackURL, form), string(c.body)},
		{"no header", b.sender, b.callbackURL, http.Header{}, string(c.body)},
		{"an empty header", b.sender, b.callbackURL, http.Header{twilio.SignatureHeader: {""}}, string(c.body)},
		{"not a form", b.sender, b.callbackURL, c.header, "%zz"},
		{"another account's message", b.sender, b.callbackURL, signed(testToken, b.callbackURL, otherAccount), otherAccount.Encode()},
	}
	for _, tt := range tests {
		r, err := parse(t, tt.sender, tt.url, tt.header, []byte(tt.body))
		if !errors.Is(err, commands.ErrReceiptUnauthenticated) {
			t.Errorf("%s: ParseReceipt = %+v, %v; want ErrReceiptUnauthenticated", tt.name, r, err)
		}
	}
}

// TestParseReceiptMalformed: signed, but not a receipt.
func TestParseReceiptMalformed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const callbackURL = "https://ledger.example/v1/receipts/twilio"
	for name, form := range map[string]url.Values{
		"no MessageSid":        {"AccountSid": {testAccount}, "MessageStatus": {"delivered"}},
		"no MessageStatus":     {"AccountSid": {testAccount}, "MessageSid": {"SM0123"}},
		"a sid that is no id":  {"AccountSid": {testAccount}, "MessageSid": {"SM/../x"}, "MessageStatus": {"delivered"}},
		"an ErrorCode no code": {"AccountSid": {testAccount}, "MessageSid": {"SM0123"}, "MessageStatus": {"failed"}, "ErrorCode": {"x\n"}},
	} {
		header := http.Header{twilio.SignatureHeader: {twilio.Signature(testToken, callbackURL, form)}}
		r, err := parse(t, b.sender, callbackURL, header, []byte(form.Encode()))
		if !errors.Is(err, commands.ErrReceiptMalformed) {
			t.Errorf("%s: ParseReceipt = %+v, %v; want ErrReceiptMalformed", name, r, err)
		}
	}
}

// TestParseReceiptDefaultPort: Twilio may sign an https URL with its :443; the receipt verifies
// whether the URL the ledger knows has the port or not.
func TestParseReceiptDefaultPort(t *testing.T) {
	t.Parallel()
	b := setup(t)
	form := url.Values{"AccountSid": {testAccount}, "MessageSid": {"SM0123"}, "MessageStatus": {"delivered"}, "ExtraNewParameter": {"x"}}
	for _, pair := range [][2]string{
		{"https://ledger.example/v1/receipts/twilio", "https://ledger.example:443/v1/receipts/twilio"},
		{"https://ledger.example:443/v1/receipts/twilio", "https://ledger.example/v1/receipts/twilio"},
		{"http://[::1]:80/r", "http://[::1]/r"},
	} {
		known, signedAs := pair[0], pair[1]
		header := http.Header{twilio.SignatureHeader: {twilio.Signature(testToken, signedAs, form)}}
		r, err := parse(t, b.sender, known, header, []byte(form.Encode()))
		if err != nil || r.Status != commands.ReceiptDelivered || r.OperationID != "SM0123" {
			t.Errorf("known %s, signed as %s: ParseReceipt = %+v, %v; want delivered", known, signedAs, r, err)
		}
	}
	header := http.Header{twilio.SignatureHeader: {twilio.Signature(testToken, "https://ledger.example:8443/v1/receipts/twilio", form)}}
	if _, err := parse(t, b.sender, "https://ledger.example/v1/receipts/twilio", header, []byte(form.Encode())); !errors.Is(err, commands.ErrReceiptUnauthenticated) {
		t.Errorf("another port: ParseReceipt = %v, want ErrReceiptUnauthenticated", err)
	}
}

// TestParseReceiptStatuses: Twilio's statuses in the ledger's terms.
func TestParseReceiptStatuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const callbackURL = "https://ledger.example/v1/receipts/twilio"
	for _, tt := range []struct {
		status, code string
		want         commands.ReceiptStatus
	}{
		{"queued", "", commands.ReceiptPending},
		{"accepted", "", commands.ReceiptPending},
		{"scheduled", "", commands.ReceiptPending},
		{"sending", "", commands.ReceiptPending},
		{"sent", "", commands.ReceiptPending},
		{"delivered", "", commands.ReceiptDelivered},
		{"read", "", commands.ReceiptDelivered},
		{"undelivered", "30005", commands.ReceiptFailed},
		{"undelivered", "30007", commands.ReceiptFailed},
		{"undelivered", "30003", commands.ReceiptRetry},
		{"undelivered", "30008", commands.ReceiptRetry},
		{"failed", "30001", commands.ReceiptRetry},
		{"failed", "30002", commands.ReceiptRetry},
		{"failed", "30500", commands.ReceiptRetry},
		{"failed", "", commands.ReceiptFailed},
		{"failed", "12345", commands.ReceiptFailed},
		{"canceled", "30003", commands.ReceiptFailed},
		{"partially_delivered", "", commands.ReceiptPending},
		{"something-new", "", commands.ReceiptPending},
	} {
		form := url.Values{"AccountSid": {testAccount}, "MessageSid": {"SM0123"}, "MessageStatus": {tt.status}}
		if tt.code != "" {
			form.Set("ErrorCode", tt.code)
		}
		header := http.Header{twilio.SignatureHeader: {twilio.Signature(testToken, callbackURL, form)}}
		r, err := parse(t, b.sender, callbackURL, header, []byte(form.Encode()))
		if err != nil || r.Status != tt.want || r.ProviderStatus != tt.status || r.Code != tt.code {
			t.Errorf("%s %s: ParseReceipt = %+v, %v; want %s", tt.status, tt.code, r, err, tt.want)
		}
	}
}

func cloneForm(f url.Values) url.Values {
	c := url.Values{}
	for k, v := range f {
		c[k] = append([]string(nil), v...)
	}
	return c
}

// TestParseReceiptTextIsSafe: a text the callback carries reaches the receipt on one printable,
// bounded line.
func TestParseReceiptTextIsSafe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const callbackURL = "https://ledger.example/v1/receipts/twilio"
	form := url.Values{"AccountSid": {testAccount}, "MessageSid": {"SM0123"}, "MessageStatus": {"undelivered\n"},
		"ErrorCode": {"30005"}, "ErrorMessage": {"line one\r\nline two " + strings.Repeat("x", 1000)}}
	header := http.Header{twilio.SignatureHeader: {twilio.Signature(testToken, callbackURL, form)}}
	r, err := parse(t, b.sender, callbackURL, header, []byte(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if !printableLine(r.Detail) || !printableLine(r.ProviderStatus) || len(r.Detail) > 300 || !strings.HasPrefix(r.Detail, "line one  line two") {
		t.Errorf("receipt %+v, want its texts on one printable, bounded line", r)
	}
}

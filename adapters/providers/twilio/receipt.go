package twilio

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/deliveryledger/ledger/commands"
)

// SignatureHeader is the header Twilio signs its callbacks in.
const SignatureHeader = "X-Twilio-Signature"

// rawDlrDoneDate is the layout of a status callback's RawDlrDoneDate: the carrier's delivery
// receipt time, YYMMDDhhmm in UTC.
const rawDlrDoneDate = "0601021504"

// errorCode is what a callback's ErrorCode may be to be recorded: Twilio's are numbers.
var errorCode = regexp.MustCompile(`^[0-9]{1,10}$`)

// Signature is Twilio's signature of a request to url with the form parameters form: the
// base64 HMAC-SHA1, keyed with the auth token, of the full URL (query included) followed by
// every parameter's name and value, sorted by name, concatenated without separators
// (https://www.twilio.com/docs/usage/webhooks/webhooks-security). A name given several values
// contributes each distinct value once, in sorted order, as Twilio's helper libraries compute
// it.
func Signature(authToken, url string, form url.Values) string {
	mac := hmac.New(sha1.New, []byte(authToken))
	mac.Write([]byte(url))
	names := make([]string, 0, len(form))
	for name := range form {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		values := slices.Clone(form[name])
		slices.Sort(values)
		for _, v := range slices.Compact(values) {
			mac.Write([]byte(name))
			mac.Write([]byte(v))
		}
	}
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// ParseReceipt reads one of Twilio's status callbacks: a POST form (MessageSid, MessageStatus,
// ErrorCode, AccountSid, To, From, ...) posted to callbackURL, the URL the message was sent with
// as its StatusCallback, exactly as Twilio called it. It returns
//
//   - commands.ErrReceiptUnauthenticated (wrapped) when the X-Twilio-Signature header is missing
//     or is not the signature of callbackURL and the form with this account's auth token, or
//     when the callback is about another account's message: nothing of it is to be believed;
//   - commands.ErrReceiptMalformed (wrapped) when it is authenticated but names no message or
//     no status;
//   - otherwise the receipt, read with the same tables as a lookup.
//
// Parameters Twilio adds later are signed like the others and otherwise ignored.
func (s *Sender) ParseReceipt(callbackURL string, header http.Header, body []byte) (commands.Receipt, error) {
	got := header.Get(SignatureHeader)
	if got == "" {
		return commands.Receipt{}, fmt.Errorf("%w: no %s header", commands.ErrReceiptUnauthenticated, SignatureHeader)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return commands.Receipt{}, fmt.Errorf("%w: the body is not a form Twilio signed", commands.ErrReceiptUnauthenticated)
	}
	if !s.signedBy(callbackURL, form, got) {
		return commands.Receipt{}, fmt.Errorf("%w: %s does not match the callback's URL and parameters under this account's auth token",
			commands.ErrReceiptUnauthenticated, SignatureHeader)
	}
	if form.Get("AccountSid") != s.accountSID {
		return commands.Receipt{}, fmt.Errorf("%w: the callback is not about a message of account %s", commands.ErrReceiptUnauthenticated, s.accountSID)
	}

	sid, status := form.Get("MessageSid"), form.Get("MessageStatus")
	switch {
	case sid == "" || status == "":
		return commands.Receipt{}, fmt.Errorf("%w: a status callback needs MessageSid and MessageStatus", commands.ErrReceiptMalformed)
	case !messageSID.MatchString(sid):
		return commands.Receipt{}, fmt.Errorf("%w: MessageSid is not a message id", commands.ErrReceiptMalformed)
	}
	code := form.Get("ErrorCode")
	if code != "" && !errorCode.MatchString(code) {
		return commands.Receipt{}, fmt.Errorf("%w: ErrorCode is not a number", commands.ErrReceiptMalformed)
	}
	st, what := receiptStatus(status, code)
	r := commands.Receipt{
		Provider:       s.provider,
		OperationID:    sid,
		Status:         st,
		ProviderStatus: s.history.PeerText(status),
		Code:           code,
		Detail:         s.history.PeerText(form.Get("ErrorMessage")),
		Suppress:       receiptSuppresses(status, code),
	}
	if r.Detail == "" {
		r.Detail = what
	}
	if at, err := time.Parse(rawDlrDoneDate, form.Get("RawDlrDoneDate")); err == nil {
		r.At = at.UTC()
	}
	return r, nil
}

// signedBy compares the signature in constant time with the callback URL's, trying the URL with
// and without its scheme's default port as Twilio's helper libraries do: Twilio signs some
// callbacks with an explicit :443 that a proxy in front of the ledger may not pass on.
func (s *Sender) signedBy(callbackURL string, form url.Values, got string) bool {
	ok := false
	for _, u := range portVariants(callbackURL) {
		want := Signature(s.authToken, u, form)
		// Every variant is compared, so the time taken does not tell which one matched.
		if subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1 {
			ok = true
		}
	}
	return ok
}

// portVariants is raw, and raw with its default port added or removed.
func portVariants(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return []string{raw}
	}
	port := map[string]string{"https": "443", "http": "80"}[u.Scheme]
	if port == "" {
		return []string{raw}
	}
	other := *u
	switch u.Port() {
	case "":
		other.Host = net.JoinHostPort(u.Hostname(), port)
	case port:
		other.Host = u.Hostname()
		if ip := net.ParseIP(other.Host); ip != nil && ip.To4() == nil {
			other.Host = "[" + other.Host + "]"
		}
	default:
		return []string{raw}
	}
	return []string{raw, other.String()}
}

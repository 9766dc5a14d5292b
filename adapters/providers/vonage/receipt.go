package vonage

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
)

const (
	// maxReceiptBody bounds a receipt's body: Vonage's DLR is a dozen short parameters, well
	// under 2 KiB.
	maxReceiptBody = 16 << 10
	// receiptTimeLayout is message-timestamp's form, in UTC.
	receiptTimeLayout = "2006-01-02 15:04:05"
)

var (
	// errCodeForm is what an err-code is: a small number.
	errCodeForm = regexp.MustCompile(`^[0-9]{1,10}$`)
	// clientRefForm is what a client-ref may be: the adapter sends the delivery id (a UUID);
	// Vonage takes references of up to 40 characters (100 in later versions).
	clientRefForm = regexp.MustCompile(`^[\x21-\x7e]{1,100}$`)
	// statusForm bounds a status before it is matched and recorded.
	statusForm = regexp.MustCompile(`^[A-Za-z_-]{1,32}$`)
)

// ReceiptsByGET is true: an account may have its delivery receipts sent as a GET query (a
// dashboard setting), which ParseReceipt reads like a POST form or JSON.
func (s *Sender) ReceiptsByGET() bool { return true }

// ParseReceipt reads one of Vonage's delivery receipts (DLRs) for a message this provider sent.
// callbackURL is the whole URL the receipt was sent to (scheme, host, path and query, as the
// receiving server saw it), header its headers, body its body. Vonage sends receipts as the
// account's dashboard says: a GET with the parameters in the query, a POST form, or a POST of
// JSON; all three are read (a body by its Content-Type, no body from the query), and the API
// routes all three here (GET /v1/receipts/{provider} is for Vonage providers only).
//
// Authentication comes first and is our own secret: the callback URL's token query parameter
// must equal Config.CallbackToken (compared in constant time), or the error is
// commands.ErrReceiptUnauthenticated and nothing of the receipt is read. Vonage can also sign
// its callbacks, but that needs a signature secret and method set per account in the dashboard
// and applies to every callback of the account; the token in the callback URL the adapter sends
// with each message (Config.Callback) works for every account, is rotated with the ledger's
// configuration alone, and is what the receipts endpoint checks. Without a CallbackToken every
// receipt is refused.
//
// An authenticated receipt without a messageId or a status, or whose members are not of the
// form Vonage sends, is commands.ErrReceiptMalformed. The status maps to the ledger's terms:
// accepted, buffered and unknown are pending; delivered is delivered; expired (held at a
// carrier past the expiry time) is retry; failed and rejected are failed or retry by err-code
// (receiptCodes). A status Vonage does not document is pending, recorded as it came.
// Receipt.DeliveryID is client-ref, OperationID messageId, Code err-code (empty for 0), At
// message-timestamp (UTC; zero when absent or unreadable). The ledger finds the delivery by
// messageId and only checks client-ref against it: whoever holds the token can write any
// client-ref. Errors never contain the token.
func (s *Sender) ParseReceipt(callbackURL string, header http.Header, body []byte) (commands.Receipt, error) {
	u, err := url.Parse(callbackURL)
	if err != nil {
		return commands.Receipt{}, fmt.Errorf("%w: the callback URL does not parse", commands.ErrReceiptUnauthenticated)
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return commands.Receipt{}, fmt.Errorf("%w: the callback URL's query does not parse", commands.ErrReceiptUnauthenticated)
	}
	switch tokens := query["token"]; {
	case s.token == "":
		return commands.Receipt{}, fmt.Errorf("%w: provider %s has no callback token configured", commands.ErrReceiptUnauthenticated, s.provider)
	case len(tokens) == 0:
		return commands.Receipt{}, fmt.Errorf("%w: the callback URL has no token", commands.ErrReceiptUnauthenticated)
	case len(tokens) > 1:
		return commands.Receipt{}, fmt.Errorf("%w: the callback URL has more than one token", commands.ErrReceiptUnauthenticated)
	case !sameSecret(tokens[0], s.token):
		return commands.Receipt{}, fmt.Errorf("%w: the callback URL's token is wrong", commands.ErrReceiptUnauthenticated)
	}

	params, err := receiptParams(query, header, body)
	if err != nil {
		return commands.Receipt{}, fmt.Errorf("%w: %v", commands.ErrReceiptMalformed, err)
	}
	return s.receiptOf(params)
}

// receiptOf maps authenticated DLR parameters to a Receipt.
func (s *Sender) receiptOf(p map[string]string) (commands.Receipt, error) {
	malformed := func(format string, args ...any) (commands.Receipt, error) {
		return commands.Receipt{}, fmt.Errorf("%w: "+format, append([]any{commands.ErrReceiptMalformed}, args...)...)
	}
	id, status := p["messageId"], strings.ToLower(p["status"])
	errCode, clientRef := p["err-code"], p["client-ref"]
	switch {
	case id == "":
		return malformed("no messageId")
	case !operationID.MatchString(id):
		return malformed("messageId is not of the form Vonage sends")
	case status == "":
		return malformed("no status")
	case !statusForm.MatchString(status):
		return malformed("status is not of the form Vonage sends")
	case errCode != "" && !errCodeForm.MatchString(errCode):
		return malformed("err-code is not a number")
	case clientRef != "" && !clientRefForm.MatchString(clientRef):
		return malformed("client-ref is not of the form the adapter sends")
	}

	r := commands.Receipt{
		Provider:       s.provider,
		OperationID:    id,
		DeliveryID:     clientRef,
		ProviderStatus: status,
	}
	if errCode != "0" {
		r.Code = errCode
	}
	if at, err := time.ParseInLocation(receiptTimeLayout, p["message-timestamp"], time.UTC); err == nil {
		r.At = at
	}
	switch status {
	case "accepted", "buffered", "unknown":
		r.Status = commands.ReceiptPending
	case "delivered":
		r.Status = commands.ReceiptDelivered
	case "expired":
		// Held in a downstream carrier's retry scheme until the message's validity ran out:
		// the handset was unreachable for that long, and a new attempt may find it.
		r.Status = commands.ReceiptRetry
		r.Detail = "expired: held at a downstream carrier and not delivered within the expiry time"
	case "failed", "rejected":
		r.Status, r.Detail = failedReceipt(errCode)
		r.Suppress = r.Status == commands.ReceiptFailed && suppressingReceiptCodes[errCode] != ""
	default:
		r.Status = commands.ReceiptPending
		r.Detail = "a status Vonage does not document"
	}
	if r.Detail == "" && r.Code != "" {
		if c, ok := receiptCodes[r.Code]; ok {
			r.Detail = c.meaning
		}
	}
	return r, nil
}

// failedReceipt decides a failed or rejected receipt by its err-code.
func failedReceipt(errCode string) (commands.ReceiptStatus, string) {
	if c, ok := receiptCodes[errCode]; ok {
		return c.status, c.meaning
	}
	if errCode == "" || errCode == "0" {
		return commands.ReceiptFailed, "not delivered, without an err-code"
	}
	return commands.ReceiptFailed, "err-code " + errCode + ", not in Vonage's table"
}

// receiptParams collects a receipt's parameters: from the body when there is one (a form or
// JSON, by Content-Type), else from the callback URL's query (a GET). The token is ours, not
// Vonage's, and is left out. A parameter given twice is refused: which one would be believed?
func receiptParams(query url.Values, header http.Header, body []byte) (map[string]string, error) {
	if len(body) > maxReceiptBody {
		return nil, fmt.Errorf("the body is longer than %d KiB", maxReceiptBody>>10)
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		q := make(url.Values, len(query))
		for k, v := range query {
			if k != "token" {
				q[k] = v
			}
		}
		return single(q)
	}
	mediaType, _, err := mime.ParseMediaType(header.Get("Content-Type"))
	if err != nil {
		// No Content-Type (or an unreadable one): JSON is an object, a form is not.
		mediaType = "application/x-www-form-urlencoded"
		if body[0] == '{' {
			mediaType = "application/json"
		}
	}
	switch mediaType {
	case "application/json":
		var members map[string]flexString
		if err := json.Unmarshal(body, &members); err != nil || members == nil {
			return nil, errors.New("the body is not a JSON object of strings and numbers")
		}
		params := make(map[string]string, len(members))
		for k, v := range members {
			params[k] = string(v)
		}
		return params, nil
	case "application/x-www-form-urlencoded":
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, errors.New("the body is not a form")
		}
		return single(form)
	default:
		return nil, fmt.Errorf("a body of type %q is neither a form nor JSON", provider.Printable(clip(mediaType)))
	}
}

// single keeps one value per parameter, refusing a parameter given more than once.
func single(values url.Values) (map[string]string, error) {
	params := make(map[string]string, len(values))
	for k, v := range values {
		if len(v) > 1 {
			return nil, fmt.Errorf("parameter %q is given %d times", provider.Printable(clip(k)), len(v))
		}
		params[k] = v[0]
	}
	return params, nil
}

// sameSecret compares two secrets in constant time, their lengths included: both are hashed
// first, so that neither the content nor the length of ours leaks through timing.
func sameSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

package twilio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
)

// Sender is a provider that can be asked about its messages.
var (
	_ commands.Sender = (*Sender)(nil)
	_ commands.Lookup = (*Sender)(nil)
)

const (
	// listPageSize is the messages asked for per page of a list (Twilio's default is 50, its
	// maximum 1000): enough for a day of one sender's messages to one number in a page or two,
	// small enough that a page stays well under maxListRead.
	listPageSize = 50
	// maxListPages bounds the pages one lookup reads, each list. A lookup that reaches it
	// without an answer says so as an error rather than "not found", which would allow a
	// second message.
	maxListPages = 10
	// maxListRead bounds what we read of a page: listPageSize messages of at most 20 KiB each
	// (see maxResponseRead).
	maxListRead = listPageSize * 20 << 10
	// MaxClockSkew is how far before the query's Since a listed message may have been created
	// by Twilio's clock and still be the one the attempt sent: the two clocks are not the same,
	// and date_created has whole seconds.
	MaxClockSkew = 5 * time.Second
)

// Lookup asks Twilio what became of a message: by its sid when the acceptance was recorded
// (q.OperationID), otherwise by listing the messages from this sender to q.Recipient sent since
// q.Since and matching q.Text. Twilio's word is read with the same tables as a status callback.
// No such message is a ReceiptNotFound receipt (it was never created, so another attempt is
// safe); an error (Twilio unreachable or answering 5xx, an answer that is not Twilio's) means
// nothing is known yet, and the caller asks again later. Errors never contain the auth token.
func (s *Sender) Lookup(ctx context.Context, q commands.LookupQuery) (commands.Receipt, error) {
	if q.OperationID != "" {
		return s.fetch(ctx, q)
	}
	return s.find(ctx, q)
}

// fetch reads one message by its sid.
func (s *Sender) fetch(ctx context.Context, q commands.LookupQuery) (commands.Receipt, error) {
	if !messageSID.MatchString(q.OperationID) {
		return commands.Receipt{}, fmt.Errorf("twilio lookup: %q is not a message sid", provider.Printable(clip(q.OperationID)))
	}
	target := s.base + "/" + apiVersion + "/Accounts/" + s.accountSID + "/Messages/" + q.OperationID + ".json"
	status, answer, err := s.get(ctx, target, maxResponseRead)
	if err != nil {
		return commands.Receipt{}, err
	}
	switch {
	case status == http.StatusOK:
	case status == http.StatusNotFound && isTwilioNotFound(answer):
		return commands.Receipt{Provider: s.provider, OperationID: q.OperationID, DeliveryID: q.DeliveryID,
			Status: commands.ReceiptNotFound, Detail: "Twilio has no message " + q.OperationID}, nil
	default:
		return commands.Receipt{}, s.answerError("fetch message "+q.OperationID, status, answer)
	}
	var m apiMessage
	if err := json.Unmarshal(answer, &m); err != nil || m.SID != q.OperationID {
		return commands.Receipt{}, fmt.Errorf("twilio lookup: fetch message %s: the answer is not the message's JSON", q.OperationID)
	}
	return s.receiptOf(m, q.DeliveryID), nil
}

// isTwilioNotFound tells Twilio's "no such resource" (code 20404) from a 404 of something else:
// a wrong base_url answers 404 for every message, and reading that as "never created" would
// send every message twice.
func isTwilioNotFound(answer []byte) bool {
	var e apiError
	return json.Unmarshal(answer, &e) == nil && e.Code == "20404"
}

// listPage is a page of the Messages list.
type listPage struct {
	Messages    []apiMessage `json:"messages"`
	NextPageURI *string      `json:"next_page_uri"`
}

// find looks a message up by what was sent, for an attempt whose create timed out before
// Twilio answered: the messages from this sender to the recipient whose body is the text and
// that Twilio created no earlier than the attempt began (less MaxClockSkew).
//
// It lists twice when it must. First with Twilio's date filter, DateSent>=YYYY-MM-DD (the UTC
// day the attempt began, as Twilio's filter takes days only). A message still waiting in the
// sender's queue has no date_sent yet, and that filter leaves it out; so when the first list
// has no match, a second one without the filter reads the latest messages, newest first, down
// to the attempt's start. Only when neither has it is the answer "not found".
func (s *Sender) find(ctx context.Context, q commands.LookupQuery) (commands.Receipt, error) {
	switch {
	case q.Recipient == "" || q.Text == "":
		return commands.Receipt{}, errors.New("twilio lookup: without an operation id, the recipient and the text are needed")
	case q.Since.IsZero():
		return commands.Receipt{}, errors.New("twilio lookup: without an operation id, since when is needed")
	}
	since := q.Since.UTC().Truncate(time.Second).Add(-MaxClockSkew)
	query := url.Values{"To": {q.Recipient}, "From": {s.from}, "PageSize": {strconv.Itoa(listPageSize)}}
	query.Set("DateSent>", since.Format(time.DateOnly)) // on the wire: DateSent%3E=YYYY-MM-DD
	m, found, err := s.scan(ctx, query, q, since, false)
	if err != nil || found {
		return s.receiptOrError(m, q, err)
	}
	query.Del("DateSent>")
	m, found, err = s.scan(ctx, query, q, since, true)
	if err != nil || found {
		return s.receiptOrError(m, q, err)
	}
	return commands.Receipt{Provider: s.provider, DeliveryID: q.DeliveryID, Status: commands.ReceiptNotFound,
		Detail: fmt.Sprintf("Twilio has no message from %s to %s with this text created since %s",
			s.from, q.Recipient, since.Format(time.RFC3339))}, nil
}

// receiptOrError is the receipt of a message a list found, or the list's error.
func (s *Sender) receiptOrError(m apiMessage, q commands.LookupQuery, err error) (commands.Receipt, error) {
	if err != nil {
		return commands.Receipt{}, err
	}
	return s.receiptOf(m, q.DeliveryID), nil
}

// scan reads the pages of a list and returns the matching message created first (the closest to
// the attempt's start: later ones would be other attempts' doubles). newestFirst stops at the
// first page that reaches messages created before since, as Twilio lists newest first.
func (s *Sender) scan(ctx context.Context, query url.Values, q commands.LookupQuery, since time.Time, newestFirst bool) (apiMessage, bool, error) {
	var (
		best      apiMessage
		bestAt    time.Time
		found     bool
		target    = s.messages + "?" + query.Encode()
		olderSeen bool
	)
	for page := 0; page < maxListPages; page++ {
		status, answer, err := s.get(ctx, target, maxListRead)
		if err != nil {
			return apiMessage{}, false, err
		}
		if status != http.StatusOK {
			return apiMessage{}, false, s.answerError("list messages", status, answer)
		}
		var p listPage
		if err := json.Unmarshal(answer, &p); err != nil {
			return apiMessage{}, false, errors.New("twilio lookup: list messages: the answer is not Twilio's JSON")
		}
		for _, m := range p.Messages {
			created, err := time.Parse(time.RFC1123Z, m.DateCreated)
			if err != nil {
				continue // not a message this lookup can place in time
			}
			if created.Before(since) {
				olderSeen = true
				continue
			}
			if m.To != q.Recipient || m.Body != q.Text || !messageSID.MatchString(m.SID) {
				continue
			}
			// Not After: of two created in the same second, the one listed later is the
			// older, as Twilio lists newest first.
			if !found || !created.After(bestAt) {
				best, bestAt, found = m, created, true
			}
		}
		if p.NextPageURI == nil || *p.NextPageURI == "" || (newestFirst && olderSeen) {
			return best, found, nil
		}
		next, err := s.nextPage(*p.NextPageURI)
		if err != nil {
			return apiMessage{}, false, err
		}
		target = next
	}
	if found {
		return best, true, nil
	}
	return apiMessage{}, false, fmt.Errorf("twilio lookup: list messages: more than %d pages of messages from %s to %s; cannot tell whether the message was created",
		maxListPages, s.from, q.Recipient)
}

// nextPage resolves a list's next_page_uri against the base URL, and follows it only to this
// account's list on the same host: the credentials go with the call.
func (s *Sender) nextPage(uri string) (string, error) {
	ref, err := url.Parse(uri)
	if err != nil {
		return "", errors.New("twilio lookup: list messages: next_page_uri is not a URL")
	}
	next := s.baseURL.ResolveReference(ref)
	want, _ := url.Parse(s.messages) // built by New from a parsed URL
	if next.Scheme != want.Scheme || next.Host != want.Host || next.Path != want.Path {
		return "", errors.New("twilio lookup: list messages: next_page_uri leaves this account's messages; not followed")
	}
	return next.String(), nil
}

// get calls target and reads its answer, bounded by the configured timeout and by ctx.
func (s *Sender) get(ctx context.Context, target string, limit int) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := s.newRequest(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, nil, errors.New("twilio lookup: build the request: unusable base_url or operation id")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("twilio lookup at %s: %s", s.host, provider.Printable(s.history.Redact(provider.Cause(err).Error())))
	}
	answer, readErr := provider.ReadBounded(resp.Body, limit)
	_ = resp.Body.Close()
	if readErr != nil {
		return 0, nil, fmt.Errorf("twilio lookup at %s: HTTP %d, %s", s.host, resp.StatusCode, provider.Printable(s.history.Redact(readErr.Error())))
	}
	return resp.StatusCode, answer, nil
}

// answerError describes an answer a lookup cannot read as a message.
func (s *Sender) answerError(what string, status int, answer []byte) error {
	var e apiError
	text := fmt.Sprintf("twilio lookup: %s: Twilio answered HTTP %d", what, status)
	switch {
	case json.Unmarshal(answer, &e) == nil && (e.Code != "" || e.Message != ""):
		text += ", error " + s.history.PeerText(string(e.Code)) + ": " + s.history.PeerText(e.Message)
	case len(answer) > 0:
		text += " " + http.StatusText(status) + ": " + s.history.PeerText(string(answer))
	default:
		text += " " + http.StatusText(status)
	}
	return errors.New(text)
}

// receiptOf reads a message resource as a receipt.
func (s *Sender) receiptOf(m apiMessage, deliveryID string) commands.Receipt {
	code := provider.Printable(clip(string(m.ErrorCode)))
	status, what := receiptStatus(m.Status, code)
	detail := s.history.PeerText(m.ErrorMessage)
	if detail == "" {
		detail = what
	}
	r := commands.Receipt{
		Provider:       s.provider,
		OperationID:    m.SID,
		DeliveryID:     deliveryID,
		Status:         status,
		ProviderStatus: s.history.PeerText(m.Status),
		Code:           code,
		Detail:         detail,
		Suppress:       receiptSuppresses(m.Status, code),
	}
	if at, err := time.Parse(time.RFC1123Z, m.DateUpdated); err == nil {
		r.At = at.UTC()
	}
	return r
}

package httpapi_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// fuzzMaxRecipients is the documented bound of a fan-out.
const fuzzMaxRecipients = 1000

// fuzzChannels are the channels of the fuzzed server: two, so that a recipient sent on the
// wrong channel, and the same address on two channels, are reachable.
var fuzzChannels = map[string]func(string) error{
	"webhook": webhook.ValidateURL,
	"sms":     validatePhoneNumber,
}

// fuzzChecks are fuzzChannels as the server's acceptance checks.
func fuzzChecks() map[string]commands.Check {
	checks := make(map[string]commands.Check, len(fuzzChannels))
	for name, validate := range fuzzChannels {
		checks[name] = recipientCheck(validate)
	}
	return checks
}

var phoneNumber = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)

// validatePhoneNumber is the fuzzed server's recipient check for sms: an E.164 number.
func validatePhoneNumber(recipient string) error {
	if !phoneNumber.MatchString(recipient) {
		return errors.New("must be an E.164 phone number such as +33612345678")
	}
	return nil
}

// FuzzAcceptRequest feeds arbitrary bodies to the two accept endpoints, through the real handler
// down to the accept command, whose store is an in-memory fake: decoding and validation need no
// database. For any body the answer is either
//   - 202, and then what the command recorded is a valid notification (known channels,
//     recipients valid for their channel and unique, payload a JSON object, a valid priority,
//     max attempts within the server's bound), holds exactly what the body asked for, and is
//     accepted again unchanged when a client sends it back re-encoded; or
//   - 400 (413 above the body limit), a problem that records nothing and names the member at
//     fault, leaving the field empty only when the body is not one JSON object.
func FuzzAcceptRequest(f *testing.F) {
	const (
		delivery     = false
		notification = true
	)
	for _, seed := range []struct {
		fanOut bool
		body   string
	}{
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{"order":42}}`},
		{delivery, `{"channel":"sms","recipient":"+33612345678","payload":{},"priority":"high","max_attempts":10}`},
		{delivery, ` { "payload" : { "a" : [1, 2.5e3, "<&>\u2028"] } , "channel" : "webhook" , "recipient" : "http://[::1]:8080/h?q=1#f" , "priority" : "low" , "max_attempts" : 1 } `},
		{delivery, `{"Channel":"webhook","RECIPIENT":"https://example.com/h","payload":{},"Max_Attempts":2}`},
		{delivery, `{"channel":"sms","channel":"webhook","recipient":"https://example.com/h","payload":{"a":1,"a":2}}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"priority":null,"max_attempts":null}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"max_attempts":11}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"max_attempts":0}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"max_attempts":1.5}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"max_attempts":1e400}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"priority":"urgent"}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":[1]}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":null}`},
		{delivery, `{"channel":"webhook","recipient":"ftp://example.com/h","payload":{}}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/\u0000","payload":{}}`},
		{delivery, `{"channel":"sms","recipient":"https://example.com/h","payload":{}}`},
		{delivery, `{"channel":"pigeon","recipient":"coo","payload":{}}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"recipients":[]}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{}} {}`},
		{delivery, `{"channel":"webhook",`},
		{delivery, `[]`},
		{delivery, ``},
		{notification, `{"payload":{"order":42},"recipients":[{"channel":"webhook","recipient":"https://a.example.com/h"},{"channel":"sms","recipient":"+14155550100"}]}`},
		{notification, `{"payload":{},"recipients":[{"channel":"webhook","recipient":"https://a.example.com/h"},{"channel":"webhook","recipient":"https://a.example.com/h"}]}`},
		{notification, `{"payload":{},"recipients":[{"channel":"webhook","recipient":"https://a.example.com/h"},{"channel":"sms","recipient":"https://a.example.com/h"}]}`},
		{notification, `{"payload":{},"recipients":[{"channel":"webhook","recipient":"https://a.example.com/h","cc":"x"}]}`},
		{notification, `{"payload":{},"recipients":[{"channel":5}]}`},
		{notification, `{"payload":{},"recipients":{}}`},
		{notification, `{"payload":{},"recipients":[]}`},
		{notification, `{"payload":{},"recipients":null,"priority":"normal"}`},
		{notification, `{"payload":{},"channel":"webhook","recipient":"https://a.example.com/h"}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"window":{"timezone":"Europe/Berlin","days":["mon","fri"],"start":"22:00","end":"06:00"}}`},
		{delivery, `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"window":{"timezone":"Mars/Olympus","start":"09:00","end":"18:00"}}`},
		{notification, `{"payload":{},"window":{"timezone":"UTC","start":"09:00","end":"24:00","days":[]},"recipients":[{"channel":"webhook","recipient":"https://a.example.com/h"},{"channel":"sms","recipient":"+14155550100","window":{"timezone":"America/New_York","start":"08:00","end":"20:00"}}]}`},
		{notification, `{"payload":{},"recipients":[{"channel":"webhook","recipient":"https://a.example.com/h","window":{"timezone":"UTC","start":"9:00","end":"18:00"}}]}`},
	} {
		f.Add(seed.fanOut, seed.body)
	}
	f.Fuzz(func(t *testing.T, fanOut bool, body string) {
		path := "/v1/deliveries"
		if fanOut {
			path = "/v1/notifications"
		}
		rec, recorded := fuzzPost(t, path, body, true)
		if rec.Code != http.StatusAccepted {
			checkRefused(t, fanOut, body, rec, recorded)
			return
		}
		first := checkAccepted(t, fanOut, rec, recorded)
		if want := requested(t, fanOut, body); !first.equal(want) {
			t.Fatalf("%s asks for %+v, but the command recorded %+v", body, want, first)
		}

		// Round trip: the request as the server understood it, encoded again, is accepted as
		// the same request.
		again := first.encode(t, fanOut)
		rec, recorded = fuzzPost(t, path, again, false)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("%s accepted, but its re-encoding %s got %d: %s", body, again, rec.Code, rec.Body)
		}
		if second := checkAccepted(t, fanOut, rec, recorded); !first.equal(second) {
			t.Fatalf("%s was accepted as %+v, its re-encoding %s as %+v", body, first, again, second)
		}
	})
}

// fuzzPost sends body to a fresh server as tenant acme and returns the answer and what the
// accept command recorded, nil if it recorded nothing. The answer is checked against
// docs/openapi.yaml, and so is the request unless it is fuzzed (then it may break the description).
func fuzzPost(t *testing.T, path, body string, fuzzed bool) (*httptest.ResponseRecorder, *commands.AcceptRecord) {
	t.Helper()
	store := &fuzzAcceptStore{}
	topics := amqp.Topology{Prefix: "fuzz", Channels: []string{"webhook", "sms"}, Tiers: []time.Duration{time.Second}}
	handler, err := httpapi.New(
		httpapi.Config{APIKeys: map[string]string{keyAcme: "acme"}, Channels: fuzzChecks()},
		httpapi.Deps{
			Accept: commands.NewAcceptHandler(store, topics, commands.SystemClock{}, serverPolicies),
			Events: fuzzNoEvents{},
		}, nil)
	if err != nil {
		t.Fatalf("new api: %v", err)
	}
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+keyAcme)
	r.Header.Set("Idempotency-Key", "fuzz-1")
	r.Header.Set("Content-Type", "application/json")
	if fuzzed {
		r = r.WithContext(openapitest.Invalid(r.Context()))
	}
	w := httptest.NewRecorder()
	openapitest.Wrap(t, handler).ServeHTTP(w, r)
	return w, store.recorded
}

// acceptance is what the accept command recorded, in the terms of the request.
type acceptance struct {
	payload     json.RawMessage // see normalPayload
	priority    domain.Priority
	maxAttempts int
	recipients  []commands.Recipient
	// windows are the recipients' windows, nil for none.
	windows []*domain.Window
}

func (a acceptance) equal(b acceptance) bool {
	return bytes.Equal(a.payload, b.payload) && a.priority == b.priority && a.maxAttempts == b.maxAttempts &&
		slices.Equal(a.recipients, b.recipients) && slices.EqualFunc(a.windows, b.windows, sameWindow)
}

// sameWindow compares windows as they are stored: an empty days list is no list.
func sameWindow(a, b *domain.Window) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// fuzzRecipient is a notification's recipient as the request spells it.
type fuzzRecipient struct {
	Channel   string         `json:"channel"`
	Recipient string         `json:"recipient"`
	Window    *domain.Window `json:"window,omitempty"`
}

// requested decodes an accepted body on its own, with the defaults the API documents, to say
// what the command should have recorded: members are taken as sent, nothing is rewritten.
func requested(t *testing.T, fanOut bool, body string) acceptance {
	t.Helper()
	var req struct {
		Channel     string          `json:"channel"`
		Recipient   string          `json:"recipient"`
		Payload     json.RawMessage `json:"payload"`
		Priority    domain.Priority `json:"priority"`
		MaxAttempts *int            `json:"max_attempts"`
		Recipients  []fuzzRecipient `json:"recipients"`
		Window      *domain.Window  `json:"window"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatalf("%s was accepted, but does not decode: %v", body, err)
	}
	want := acceptance{priority: req.Priority, maxAttempts: serverMaxAttempts}
	for _, r := range req.Recipients {
		want.recipients = append(want.recipients, commands.Recipient{Channel: r.Channel, Recipient: r.Recipient})
		want.windows = append(want.windows, cmp.Or(r.Window, req.Window))
	}
	payload, err := normalPayload(req.Payload)
	if err != nil {
		t.Fatalf("%s was accepted with payload %q: %v", body, req.Payload, err)
	}
	want.payload = payload
	if want.priority == "" {
		want.priority = domain.PriorityNormal
	}
	if req.MaxAttempts != nil {
		want.maxAttempts = *req.MaxAttempts
	}
	if !fanOut {
		want.recipients = []commands.Recipient{{Channel: req.Channel, Recipient: req.Recipient}}
		want.windows = []*domain.Window{req.Window}
	}
	return want
}

// normalPayload spells a payload the way the event's data stores it: encoding/json compacts a
// json.RawMessage and escapes <, >, & and U+2028/U+2029 in its strings, and changes nothing else.
func normalPayload(raw json.RawMessage) (json.RawMessage, error) {
	var compact, escaped bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, err
	}
	json.HTMLEscape(&escaped, compact.Bytes())
	return escaped.Bytes(), nil
}

// encode writes a as the body of the endpoint, every member explicit, as a client would.
func (a acceptance) encode(t *testing.T, fanOut bool) string {
	t.Helper()
	var v any
	if fanOut {
		recipients := make([]fuzzRecipient, len(a.recipients))
		for i, r := range a.recipients {
			recipients[i] = fuzzRecipient{r.Channel, r.Recipient, a.windows[i]}
		}
		v = struct {
			Payload     json.RawMessage `json:"payload"`
			Recipients  []fuzzRecipient `json:"recipients"`
			Priority    domain.Priority `json:"priority"`
			MaxAttempts int             `json:"max_attempts"`
		}{a.payload, recipients, a.priority, a.maxAttempts}
	} else {
		v = struct {
			Channel     string          `json:"channel"`
			Recipient   string          `json:"recipient"`
			Payload     json.RawMessage `json:"payload"`
			Priority    domain.Priority `json:"priority"`
			MaxAttempts int             `json:"max_attempts"`
			Window      *domain.Window  `json:"window,omitempty"`
		}{a.recipients[0].Channel, a.recipients[0].Recipient, a.payload, a.priority, a.maxAttempts, a.windows[0]}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("encode %+v: %v", a, err)
	}
	return buf.String()
}

// checkAccepted checks a 202 and what the accept command recorded for it.
func checkAccepted(t *testing.T, fanOut bool, rec *httptest.ResponseRecorder, recorded *commands.AcceptRecord) acceptance {
	t.Helper()
	if recorded == nil {
		t.Fatalf("202 without a recorded request: %s", rec.Body)
	}
	n := len(recorded.Events)
	switch {
	case n == 0 || n > fuzzMaxRecipients:
		t.Fatalf("202 for %d recipients, want 1 to %d", n, fuzzMaxRecipients)
	case !fanOut && n != 1:
		t.Fatalf("POST /v1/deliveries accepted %d deliveries, want 1", n)
	case len(recorded.Outbox) != n:
		t.Fatalf("%d deliveries but %d work messages", n, len(recorded.Outbox))
	}
	var got acceptance
	seen := make(map[commands.Recipient]bool, n)
	for i, e := range recorded.Events {
		data, err := domain.DecodeData(e)
		acc, ok := data.(*domain.Accepted)
		if err != nil || !ok || e.Type != domain.EventAccepted || e.Version != 1 {
			t.Fatalf("recorded event %d is %s version %d (%v), want a decodable %s at version 1",
				i, e.Type, e.Version, err, domain.EventAccepted)
		}
		validate, known := fuzzChannels[acc.Channel]
		if !known {
			t.Fatalf("accepted unknown channel %q", acc.Channel)
		}
		if err := validate(acc.Recipient); err != nil {
			t.Fatalf("accepted %s recipient %q: %v", acc.Channel, acc.Recipient, err)
		}
		r := commands.Recipient{Channel: acc.Channel, Recipient: acc.Recipient}
		if seen[r] {
			t.Fatalf("accepted %+v twice", r)
		}
		seen[r] = true
		got.recipients = append(got.recipients, r)
		if acc.Window != nil {
			if err := acc.Window.Validate(); err != nil {
				t.Fatalf("accepted window %+v: %v", acc.Window, err)
			}
		}
		got.windows = append(got.windows, acc.Window)

		payload, err := normalPayload(acc.Payload)
		if err != nil || len(payload) == 0 || payload[0] != '{' {
			t.Fatalf("accepted payload %q, want a JSON object (%v)", acc.Payload, err)
		}
		if !acc.Priority.Valid() {
			t.Fatalf("accepted priority %q", acc.Priority)
		}
		if acc.MaxAttempts < 1 || acc.MaxAttempts > serverMaxAttempts {
			t.Fatalf("accepted max_attempts %d, want 1 to %d", acc.MaxAttempts, serverMaxAttempts)
		}
		if i == 0 {
			got.payload, got.priority, got.maxAttempts = payload, acc.Priority, acc.MaxAttempts
		} else if !bytes.Equal(payload, got.payload) || acc.Priority != got.priority || acc.MaxAttempts != got.maxAttempts {
			t.Fatalf("the deliveries of one notification differ: %+v and %+v", recorded.Events[0], e)
		}
	}

	// The answer lists what was recorded.
	var answer struct {
		Channel    string               `json:"channel"`
		Recipient  string               `json:"recipient"`
		Deliveries []commands.Recipient `json:"deliveries"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
		t.Fatalf("decode 202 %s: %v", rec.Body, err)
	}
	listed := answer.Deliveries
	if !fanOut {
		listed = []commands.Recipient{{Channel: answer.Channel, Recipient: answer.Recipient}}
	}
	if !slices.Equal(listed, got.recipients) {
		t.Fatalf("202 lists %v, the command recorded %v", listed, got.recipients)
	}
	return got
}

var (
	windowFields       = `window(\.(timezone|start|end|days(\[(0|[1-9][0-9]*)\])?))?`
	deliveryFields     = regexp.MustCompile(`^(channel|recipient|payload|priority|max_attempts|` + windowFields + `)$`)
	notificationFields = regexp.MustCompile(`^(payload|priority|max_attempts|` + windowFields + `|recipients(\[(0|[1-9][0-9]*)\](\.(channel|recipient|` + windowFields + `))?|\.(channel|recipient|` + windowFields + `))?)$`)
)

// checkRefused checks a refusal: nothing recorded, and a problem that names the member at fault.
func checkRefused(t *testing.T, fanOut bool, body string, rec *httptest.ResponseRecorder, recorded *commands.AcceptRecord) {
	t.Helper()
	if recorded != nil {
		t.Fatalf("%d, but the request was recorded: %+v", rec.Code, recorded)
	}
	want := http.StatusBadRequest
	if int64(len(body)) > httpapi.DefaultMaxBodyBytes {
		want = http.StatusRequestEntityTooLarge
	}
	var p problemDoc
	if rec.Code != want || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: %d %s, want %d application/problem+json", body, rec.Code, rec.Header().Get("Content-Type"), want)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != want || p.Detail == "" {
		t.Fatalf("problem %s (%v): want status %d and a detail", rec.Body, err, want)
	}
	if want == http.StatusRequestEntityTooLarge {
		return
	}
	top, isObject := firstObject(body)
	switch {
	case p.Field == "" && strings.HasPrefix(p.Detail, "unknown member"):
		// A member named "": the problem names it, though its field member is left out.
		if !top.hasKey("") {
			t.Fatalf("problem names unknown member \"\", which the body does not have: %s", body)
		}
	case p.Field == "":
		if isObject && json.Valid([]byte(body)) {
			t.Fatalf("%s is one JSON object, but the problem names no member: %s", body, p.Detail)
		}
	case fanOut && notificationFields.MatchString(p.Field), !fanOut && deliveryFields.MatchString(p.Field):
		if i, ok := recipientIndex(p.Field); ok && !top.hasRecipient(i) {
			t.Fatalf("problem names %s, which the body does not have: %s", p.Field, body)
		}
	case strings.HasPrefix(p.Detail, "unknown member"):
		if !top.hasKey(p.Field) {
			t.Fatalf("problem names unknown member %q, which the body does not have: %s", p.Field, body)
		}
	default:
		t.Fatalf("problem names %q, which is no member of the request: %s (%s)", p.Field, p.Detail, body)
	}
}

// jsonObject is a decoded request body, for checking what a problem names.
type jsonObject map[string]any

// firstObject decodes the first JSON value of body, as the server does; ok is false when it is
// not an object.
func firstObject(body string) (obj jsonObject, ok bool) {
	var v any
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber() // 1e700 is a valid member value, though no float64 holds it
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	m, ok := v.(map[string]any)
	return m, ok
}

// recipientLists returns every recipients array of the object: encoding/json matches member
// names case-insensitively, so "Recipients" fills the same field as "recipients".
func (o jsonObject) recipientLists() [][]any {
	var lists [][]any
	for k, v := range o {
		if l, ok := v.([]any); ok && strings.EqualFold(k, "recipients") {
			lists = append(lists, l)
		}
	}
	return lists
}

// hasKey reports whether the object or one of its recipients has the member name.
func (o jsonObject) hasKey(name string) bool {
	has := func(m map[string]any) bool {
		for k := range m {
			if k == name {
				return true
			}
		}
		return false
	}
	if has(o) {
		return true
	}
	for _, list := range o.recipientLists() {
		for _, r := range list {
			if m, ok := r.(map[string]any); ok && has(m) {
				return true
			}
		}
	}
	return false
}

// hasRecipient reports whether a recipients array of the object has an element i.
func (o jsonObject) hasRecipient(i int) bool {
	for _, list := range o.recipientLists() {
		if i < len(list) {
			return true
		}
	}
	return false
}

// recipientIndex returns i of a field "recipients[i]...".
func recipientIndex(field string) (int, bool) {
	var i int
	if _, err := fmt.Sscanf(field, "recipients[%d]", &i); err != nil {
		return 0, false
	}
	return i, true
}

// fuzzAcceptStore records the one accept request of a fuzzed call, in memory.
type fuzzAcceptStore struct {
	recorded *commands.AcceptRecord
}

var _ commands.AcceptStore = (*fuzzAcceptStore)(nil)

func (s *fuzzAcceptStore) RecordAccept(_ context.Context, rec commands.AcceptRecord) ([]byte, bool, error) {
	if s.recorded != nil {
		return nil, false, errors.New("fuzz store: second accept on a fresh server")
	}
	s.recorded = &rec
	return rec.Response, false, nil
}

// fuzzNoEvents is the event store of a server that only accepts: the accept endpoints never read
// a stream.
type fuzzNoEvents struct{}

var _ httpapi.EventReader = fuzzNoEvents{}

func (fuzzNoEvents) LoadOf(context.Context, string, string) ([]domain.Event, error) {
	return nil, commands.ErrNotFound
}

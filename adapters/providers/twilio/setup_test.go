package twilio_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/deliveryledger/ledger/adapters/providers/twilio"
	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

const (
	// testAccount and testToken are the account the fakes accept; otherToken is someone
	// else's. Every outcome, receipt and error of these tests is checked for both tokens.
	testAccount = "AC0123456789abcdef0123456789abcdef"
	testToken   = "5ecre7a1b2c3d4e5f60718293a4b5c6d"
	otherToken  = "0therf00dfeedcafe0123456789abcde"
	testFrom    = "+15005550006"
	// testTimeout is short so that the delayed-answer tests are quick; the fake answers well
	// within it otherwise.
	testTimeout = 400 * time.Millisecond
	// recipient is the number most tests send to.
	recipient = "+14155550100"
)

// lines is a fake's Out: safe for the fake's concurrent writes and the test's reads.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// callback is one status callback the receiver got.
type callback struct {
	header http.Header
	body   []byte
	url    string
}

// receiver is the ledger's receipts endpoint in these tests: a loopback server that keeps every
// callback it is posted.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []callback
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, callback{header: r.Header.Clone(), body: body, url: "http://" + r.Host + r.URL.RequestURI()})
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// callbacks returns the callbacks so far.
func (rc *receiver) callbacks() []callback {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]callback(nil), rc.got...)
}

// bundle is what a test works with: a fake Twilio on loopback, what it printed, the receipts
// endpoint its callbacks go to, and a sender configured against both.
type bundle struct {
	fake        *twiliofake.Server
	out         *lines
	receiver    *receiver
	callbackURL string
	cfg         twilio.Config
	sender      *twilio.Sender
}

// setup starts a fake that accepts testAccount/testToken, a receiver, and a sender of provider
// "twilio" whose configuration the options may change.
func setup(t *testing.T, options ...func(*twilio.Config)) *bundle {
	t.Helper()
	out := &lines{}
	fake, err := twiliofake.Start(twiliofake.Config{Addr: "127.0.0.1:0", AccountSID: testAccount, AuthToken: testToken, Out: out})
	if err != nil {
		t.Fatalf("start the fake: %v", err)
	}
	t.Cleanup(func() {
		fake.Close()
		if holdsToken(out.String()) {
			t.Errorf("the fake's output holds a token:\n%s", out)
		}
	})
	rc := newReceiver(t)
	b := &bundle{fake: fake, out: out, receiver: rc, callbackURL: rc.srv.URL + "/v1/receipts/twilio"}
	b.cfg = twilio.Config{Provider: "twilio", BaseURL: fake.URL(), AccountSID: testAccount, AuthToken: testToken,
		From: testFrom, StatusCallback: b.callbackURL, Timeout: testTimeout}
	for _, o := range options {
		o(&b.cfg)
	}
	b.sender = newSender(t, b.cfg)
	return b
}

// newSender builds a Sender, closing its idle connections when the test ends.
func newSender(t *testing.T, cfg twilio.Config) *twilio.Sender {
	t.Helper()
	s, err := twilio.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// holdsToken reports whether text holds either token in a spelling a log, a URL or a basic-auth
// header could give it, or the start of one (a token cut in half).
func holdsToken(text string) bool {
	for _, tok := range []string{testToken, otherToken} {
		credentials := base64.StdEncoding.EncodeToString([]byte(testAccount + ":" + tok))
		for _, spelling := range []string{tok, tok[:10], strings.TrimRight(credentials, "=")} {
			if strings.Contains(text, spelling) {
				return true
			}
		}
	}
	return false
}

// send runs one attempt and fails the test if its outcome holds a token or its Err is not one
// printable line.
func send(t *testing.T, s *twilio.Sender, msg commands.WorkMessage) domain.Outcome {
	t.Helper()
	out := s.Send(t.Context(), msg)
	if all := fmt.Sprintf("%+v %#v", out, out); holdsToken(all) {
		t.Errorf("the outcome holds an auth token: %s", all)
	}
	if !printableLine(out.Err) {
		t.Errorf("Err = %q, want printable text on one line", out.Err)
	}
	return out
}

// lookup runs one lookup and fails the test if its receipt or error holds a token.
func lookup(t *testing.T, s *twilio.Sender, q commands.LookupQuery) (commands.Receipt, error) {
	t.Helper()
	r, err := s.Lookup(t.Context(), q)
	if all := fmt.Sprintf("%+v %v", r, err); holdsToken(all) {
		t.Errorf("the lookup's answer holds an auth token: %s", all)
	}
	return r, err
}

// printableLine reports whether s has no control characters, line separators or bidi controls.
func printableLine(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp, unicode.Bidi_Control)
	})
}

// workMessage is an attempt to send text to number.
func workMessage(number, text string) commands.WorkMessage {
	payload, _ := json.Marshal(map[string]string{"text": text})
	return commands.WorkMessage{
		DeliveryID:  "0b6a4f57-6f4e-4a62-9e4c-7d0c0f3f8a11",
		Tenant:      "acme",
		Channel:     "sms",
		Recipient:   number,
		Payload:     payload,
		Attempt:     1,
		MaxAttempts: 10,
	}
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

// newServer starts a loopback server that answers as a broken Twilio, a proxy or anything else
// the fake does not model; it is closed when the test ends.
func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// answering is a handler that answers every call with status, headers and body.
func answering(status int, header map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// senderFor is a sender against a server that is not the fake.
func senderFor(t *testing.T, baseURL string) *twilio.Sender {
	t.Helper()
	return newSender(t, twilio.Config{Provider: "twilio", BaseURL: baseURL, AccountSID: testAccount, AuthToken: testToken,
		From: testFrom, Timeout: testTimeout})
}

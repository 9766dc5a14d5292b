package vonage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

const (
	// testKey and testSecret are the account of the test senders and fakes; otherSecret is a
	// wrong one. testToken is the callback token. Every outcome and error of these tests is
	// checked for the secrets (see send).
	testKey     = "abcd1234"
	testSecret  = "Zq8sEcretApi+Sec"
	otherSecret = "0therAccountSecr"
	testToken   = "cbTok-3f9a1c7e5b2d4f60a8"
	// testTimeout is short so that the late-answer test is quick; the fake answers well
	// within it.
	testTimeout = 300 * time.Millisecond
	// testDeliveryID is the delivery of workMessage.
	testDeliveryID = "0190f0c2-6f4e-7a62-9e4c-7d0c0f3f8a11"
)

// secretSpellingsOfTests are what must never appear: the secrets whole, escaped, and the first
// half of each (a secret cut in two).
func secretSpellingsOfTests() []string {
	var out []string
	for _, s := range []string{testSecret, otherSecret, testToken} {
		out = append(out, s, url.QueryEscape(s), s[:len(s)/2])
	}
	return out
}

// holdsSecret reports which secret spelling text holds, "" if none.
func holdsSecret(text string) string {
	for _, s := range secretSpellingsOfTests() {
		if strings.Contains(text, s) {
			return s
		}
	}
	return ""
}

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

// callback is one request that reached the receipts endpoint, as the ledger's HTTP layer would
// hand it to ParseReceipt.
type callback struct {
	url    string
	header http.Header
	body   []byte
}

// receiptSink is a loopback receipts endpoint that keeps every request.
type receiptSink struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []callback
}

// newReceiptSink starts a receipts endpoint, closed when the test ends.
func newReceiptSink(t *testing.T) *receiptSink {
	t.Helper()
	s := &receiptSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, callback{url: "http://" + r.Host + r.URL.RequestURI(), header: r.Header.Clone(), body: body})
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// url is the callback a sender is configured with: the wiring's form, token included.
func (s *receiptSink) url() string {
	return s.srv.URL + "/v1/receipts/vonage?token=" + url.QueryEscape(testToken)
}

// callbacks returns what reached the endpoint so far.
func (s *receiptSink) callbacks() []callback {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]callback(nil), s.got...)
}

// waitFor polls until at least n requests reached the endpoint, and returns them.
func (s *receiptSink) waitFor(t *testing.T, n int) []callback {
	t.Helper()
	eventually(t, func() bool { return len(s.callbacks()) >= n }, fmt.Sprintf("%d receipts reach the endpoint", n))
	return s.callbacks()
}

// bundle is what a test works with: a fake SMS API on loopback, what it printed, a receipts
// endpoint and a sender configured against both.
type bundle struct {
	fake   *vonagefake.Server
	out    *lines
	sink   *receiptSink
	sender *Sender
}

// setup starts a fake that accepts testKey/testSecret, a receipts endpoint, and a sender of
// provider "vonage" with callback and token; change adjusts the sender's configuration.
func setup(t *testing.T, change ...func(*Config)) *bundle {
	t.Helper()
	out := &lines{}
	fake, err := vonagefake.Start(vonagefake.Config{Addr: "127.0.0.1:0", APIKey: testKey, APISecret: testSecret, Out: out})
	if err != nil {
		t.Fatalf("start the fake: %v", err)
	}
	t.Cleanup(func() {
		fake.Close()
		if s := holdsSecret(out.String()); s != "" {
			t.Errorf("the fake's output contains a secret (%q):\n%s", s, out)
		}
	})
	sink := newReceiptSink(t)
	cfg := Config{
		Provider: "vonage", BaseURL: fake.URL(), APIKey: testKey, APISecret: testSecret, From: "+447700900999",
		Callback: sink.url(), CallbackToken: testToken, Timeout: testTimeout,
	}
	for _, c := range change {
		c(&cfg)
	}
	return &bundle{fake: fake, out: out, sink: sink, sender: newSender(t, cfg)}
}

// newSender builds a Sender, closing its idle connections when the test ends.
func newSender(t *testing.T, cfg Config) *Sender {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// send runs one attempt and fails the test if its outcome holds a secret or text that is not
// one printable line.
func send(t *testing.T, s *Sender, msg commands.WorkMessage) domain.Outcome {
	t.Helper()
	out := s.Send(t.Context(), msg)
	if secret := holdsSecret(fmt.Sprintf("%+v %#v", out, out)); secret != "" {
		t.Errorf("the outcome holds a secret (%q): %+v", secret, out)
	}
	if provider.Printable(out.Err) != out.Err {
		t.Errorf("Err = %q, want printable text on one line", out.Err)
	}
	if out.NotSent && out.Kind != domain.OutcomeTransient {
		t.Errorf("outcome %+v: only a transient outcome can be NotSent", out)
	}
	return out
}

// workMessage is an attempt to send text to recipient.
func workMessage(recipient, text string) commands.WorkMessage {
	payload, _ := json.Marshal(map[string]string{"text": text})
	return commands.WorkMessage{
		DeliveryID:  testDeliveryID,
		Tenant:      "acme",
		Channel:     "sms",
		Recipient:   recipient,
		Payload:     payload,
		Attempt:     1,
		MaxAttempts: 10,
	}
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

// newServer starts a loopback server that answers as a broken SMS API, a proxy or anything
// else the fake does not model; it is closed when the test ends.
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

// directSender is a sender against base (a server of the test's own), without a callback.
func directSender(t *testing.T, base string) *Sender {
	t.Helper()
	return newSender(t, Config{Provider: "vonage", BaseURL: base, APIKey: testKey, APISecret: testSecret, From: "Ledger", Timeout: testTimeout})
}

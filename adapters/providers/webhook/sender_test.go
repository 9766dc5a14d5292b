package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// fixedNow is the wall clock of the test senders, so that webhook-timestamp and HTTP-date
// Retry-After values are predictable.
var fixedNow = time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)

// testTimeout is short so that timeout tests are quick; every fake server answers well within it.
const testTimeout = 200 * time.Millisecond

// loopback lets the test senders reach httptest servers, which listen on 127.0.0.1.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// newTestSender builds a Sender with cfg (loopback allowed unless cfg says otherwise) and the
// fixed clock.
func newTestSender(t *testing.T, cfg Config) *Sender {
	t.Helper()
	if cfg.AllowCIDRs == nil {
		cfg.AllowCIDRs = loopback
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = testTimeout
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.now = func() time.Time { return fixedNow }
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// forbidDialling makes any network call of s fail the test, for attempts that must be decided
// before reaching the network.
func forbidDialling(t *testing.T, s *Sender) {
	t.Helper()
	s.transport.DialContext = func(context.Context, string, string) (net.Conn, error) {
		t.Error("the sender dialled, but this attempt must fail without a network call")
		return nil, errors.New("dialling forbidden in this test")
	}
}

// newServer starts an httptest server that is closed when the test ends.
func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func workMessage(recipient string) commands.WorkMessage {
	return commands.WorkMessage{
		DeliveryID:  "0b6a4f57-6f4e-4a62-9e4c-7d0c0f3f8a11",
		Tenant:      "acme",
		Channel:     "webhook",
		Recipient:   recipient,
		Payload:     json.RawMessage(`{"event":"order.shipped","order":42}`),
		Attempt:     3,
		MaxAttempts: 10,
	}
}

func TestSenderContract(t *testing.T) {
	t.Parallel()
	s := newTestSender(t, Config{})
	if got := s.Provider(); got != "webhook" {
		t.Errorf("Provider() = %q, want webhook", got)
	}
	if s.Deduplicates() {
		t.Error("Deduplicates() = true, want false: we cannot know that a receiver dedupes")
	}
}

func TestSendRequestHeadersAndBody(t *testing.T) {
	t.Parallel()
	type received struct {
		method string
		header http.Header
		body   string
	}
	got := make(chan received, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- received{method: r.Method, header: r.Header.Clone(), body: string(body)}
		w.WriteHeader(http.StatusNoContent)
	})
	s := newTestSender(t, Config{UserAgent: "ledger-test/1"})
	msg := workMessage(srv.URL + "/hooks/orders")

	out := s.Send(t.Context(), msg)
	if out.Kind != domain.OutcomeDelivered {
		t.Fatalf("Kind = %s (%s), want delivered", out.Kind, out.Err)
	}
	req := <-got
	if req.method != http.MethodPost {
		t.Errorf("method = %s, want POST", req.method)
	}
	if req.body != string(msg.Payload) {
		t.Errorf("body = %s, want %s", req.body, msg.Payload)
	}
	wantHeaders := map[string]string{
		"Content-Type":      "application/json",
		"User-Agent":        "ledger-test/1",
		"webhook-id":        msg.DeliveryID,
		"webhook-timestamp": strconv.FormatInt(fixedNow.Unix(), 10),
		"X-Ledger-Attempt":  "3",
	}
	for name, want := range wantHeaders {
		if v := req.header.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
}

func TestSendDefaultUserAgent(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.UserAgent()
	})
	s := newTestSender(t, Config{})
	if out := s.Send(t.Context(), workMessage(srv.URL)); out.Kind != domain.OutcomeDelivered {
		t.Fatalf("Kind = %s (%s), want delivered", out.Kind, out.Err)
	}
	if ua := <-got; ua != DefaultUserAgent {
		t.Errorf("User-Agent = %q, want %q", ua, DefaultUserAgent)
	}
}

func TestSendClassifiesResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		wantKind   domain.OutcomeKind
		wantClass  domain.ErrorClass
		wantRetry  time.Duration
		wantOpID   string
		wantErrHas []string
		// wantSuppress: the answer is hard evidence against the endpoint (410 alone).
		wantSuppress bool
	}{
		{
			name: "200 with request id is delivered", status: 200,
			header:   map[string]string{"X-Request-Id": "req-7f3a"},
			wantKind: domain.OutcomeDelivered, wantOpID: "req-7f3a",
		},
		{name: "202 without request id is delivered", status: 202, wantKind: domain.OutcomeDelivered},
		{
			name: "500 is transient with the body in the error", status: 500, body: "database is down",
			wantKind: domain.OutcomeTransient, wantClass: domain.ClassTransient,
			wantErrHas: []string{"HTTP 500", "database is down"},
		},
		{
			name: "503 honours Retry-After", status: 503, header: map[string]string{"Retry-After": "7"},
			wantKind: domain.OutcomeTransient, wantClass: domain.ClassTransient, wantRetry: 7 * time.Second,
		},
		{
			name: "429 with Retry-After seconds", status: 429, header: map[string]string{"Retry-After": "2"},
			wantKind: domain.OutcomeTransient, wantClass: domain.ClassTransient, wantRetry: 2 * time.Second,
		},
		{
			name: "429 with Retry-After HTTP-date", status: 429,
			header:   map[string]string{"Retry-After": fixedNow.Add(90 * time.Second).Format(http.TimeFormat)},
			wantKind: domain.OutcomeTransient, wantClass: domain.ClassTransient, wantRetry: 90 * time.Second,
		},
		{
			name: "429 with garbage Retry-After", status: 429, header: map[string]string{"Retry-After": "soon"},
			wantKind: domain.OutcomeTransient, wantClass: domain.ClassTransient,
		},
		{name: "408 is transient", status: 408, wantKind: domain.OutcomeTransient, wantClass: domain.ClassTransient},
		{name: "425 is transient", status: 425, wantKind: domain.OutcomeTransient, wantClass: domain.ClassTransient},
		{
			name: "400 is permanent", status: 400, body: `{"error":"unknown field"}`,
			wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent,
			wantErrHas: []string{"HTTP 400", "unknown field"},
		},
		{
			name: "Retry-After on a permanent failure is ignored", status: 410,
			header:   map[string]string{"Retry-After": "60"},
			wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent, wantSuppress: true,
		},
		{name: "410 Gone is permanent and suppresses", status: 410, wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent, wantSuppress: true},
		{name: "404 is permanent", status: 404, wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent},
		{name: "401 is permanent", status: 401, wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent},
		{name: "403 is permanent", status: 403, wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent},
		{
			name: "301 is permanent and names the location", status: 301,
			header:   map[string]string{"Location": "https://elsewhere.example/hook"},
			wantKind: domain.OutcomePermanent, wantClass: domain.ClassPermanent,
			wantErrHas: []string{"redirects are not followed", "https://elsewhere.example/hook"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			s := newTestSender(t, Config{})

			out := s.Send(t.Context(), workMessage(srv.URL))

			if out.Kind != tt.wantKind {
				t.Fatalf("Kind = %s (%s), want %s", out.Kind, out.Err, tt.wantKind)
			}
			if out.Class != tt.wantClass {
				t.Errorf("Class = %q, want %q", out.Class, tt.wantClass)
			}
			if out.Provider != "webhook" {
				t.Errorf("Provider = %q, want webhook", out.Provider)
			}
			if out.StatusCode != tt.status {
				t.Errorf("StatusCode = %d, want %d", out.StatusCode, tt.status)
			}
			if out.Suppress != tt.wantSuppress {
				t.Errorf("Suppress = %t, want %t", out.Suppress, tt.wantSuppress)
			}
			if want := strconv.Itoa(tt.status); tt.wantKind != domain.OutcomeDelivered && out.ProviderCode != want {
				t.Errorf("ProviderCode = %q, want the receiver's status %q", out.ProviderCode, want)
			}
			if out.RetryAfter != tt.wantRetry {
				t.Errorf("RetryAfter = %s, want %s", out.RetryAfter, tt.wantRetry)
			}
			if out.ProviderOperationID != tt.wantOpID {
				t.Errorf("ProviderOperationID = %q, want %q", out.ProviderOperationID, tt.wantOpID)
			}
			if out.Latency <= 0 {
				t.Errorf("Latency = %s, want > 0", out.Latency)
			}
			if tt.wantKind == domain.OutcomeDelivered && out.Err != "" {
				t.Errorf("Err = %q, want empty on delivery", out.Err)
			}
			for _, s := range tt.wantErrHas {
				if !strings.Contains(out.Err, s) {
					t.Errorf("Err = %q, want it to contain %q", out.Err, s)
				}
			}
		})
	}
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var targetHits atomic.Int32
	target := newServer(t, func(w http.ResponseWriter, r *http.Request) { targetHits.Add(1) })
	redirector := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusFound)
	})
	s := newTestSender(t, Config{})

	out := s.Send(t.Context(), workMessage(redirector.URL))

	if out.Kind != domain.OutcomePermanent || out.StatusCode != http.StatusFound {
		t.Errorf("outcome = %s %d (%s), want permanent 302", out.Kind, out.StatusCode, out.Err)
	}
	if n := targetHits.Load(); n != 0 {
		t.Errorf("redirect target got %d requests, want 0", n)
	}
}

func TestSendBoundsTheResponseBody(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		// Control characters must not reach the history; the body is far beyond what we read.
		_, _ = io.WriteString(w, "line one\r\nline two\x00")
		_, _ = io.WriteString(w, strings.Repeat("x", 1<<20))
	})
	s := newTestSender(t, Config{})

	out := s.Send(t.Context(), workMessage(srv.URL))

	if out.Kind != domain.OutcomeTransient {
		t.Fatalf("Kind = %s (%s), want transient", out.Kind, out.Err)
	}
	_, snippet, ok := strings.Cut(out.Err, "Internal Server Error: ")
	if !ok {
		t.Fatalf("Err = %q, want the body snippet after the status", out.Err)
	}
	if len(snippet) > maxSnippet {
		t.Errorf("snippet has %d bytes, want at most %d", len(snippet), maxSnippet)
	}
	if !strings.HasPrefix(snippet, "line one  line two x") {
		t.Errorf("snippet = %.40q..., want control characters replaced by spaces", snippet)
	}
}

func TestSendConnectionRefusedIsTransient(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	s := newTestSender(t, Config{})

	out := s.Send(t.Context(), workMessage("http://"+addr+"/hook?token=s3cret"))

	if out.Kind != domain.OutcomeTransient || out.Class != domain.ClassTransient {
		t.Errorf("outcome = %s/%s (%s), want transient", out.Kind, out.Class, out.Err)
	}
	if out.StatusCode != 0 {
		t.Errorf("StatusCode = %d, want 0 without a response", out.StatusCode)
	}
	if !strings.Contains(out.Err, addr) {
		t.Errorf("Err = %q, want it to name the host %s", out.Err, addr)
	}
	if strings.Contains(out.Err, "s3cret") {
		t.Errorf("Err = %q leaks the URL's query into the history", out.Err)
	}
}

func TestSendTimeoutAfterWriteIsUnknown(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		// Sleep well past the sender's timeout; leave early once the client gives up so the
		// server can close promptly.
		select {
		case <-time.After(10 * testTimeout):
		case <-r.Context().Done():
		}
	})
	s := newTestSender(t, Config{})

	out := s.Send(t.Context(), workMessage(srv.URL))

	if out.Kind != domain.OutcomeUnknown || out.Class != domain.ClassUnknown {
		t.Fatalf("outcome = %s/%s (%s), want unknown", out.Kind, out.Class, out.Err)
	}
	if !strings.Contains(out.Err, "may have acted") {
		t.Errorf("Err = %q, want it to say the receiver may have acted", out.Err)
	}
	if out.Latency < testTimeout {
		t.Errorf("Latency = %s, want at least the timeout %s", out.Latency, testTimeout)
	}
}

func TestSendConnectionClosedAfterWriteIsUnknown(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	})
	s := newTestSender(t, Config{})

	out := s.Send(t.Context(), workMessage(srv.URL))

	if out.Kind != domain.OutcomeUnknown {
		t.Errorf("Kind = %s (%s), want unknown", out.Kind, out.Err)
	}
}

func TestSendTLSHandshakeStallIsTransient(t *testing.T) {
	t.Parallel()
	// A TCP listener that accepts and never speaks: the TLS handshake, which comes before the
	// request, runs into the timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	s := newTestSender(t, Config{})

	out := s.Send(t.Context(), workMessage("https://"+ln.Addr().String()+"/hook"))

	if out.Kind != domain.OutcomeTransient {
		t.Errorf("Kind = %s (%s), want transient", out.Kind, out.Err)
	}
}

func TestSendTLSHandshakeFailureIsTransient(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshake is the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	// The sender does not trust the test server's self-signed certificate.
	s := newTestSender(t, Config{})

	out := s.Send(t.Context(), workMessage(srv.URL))

	if out.Kind != domain.OutcomeTransient {
		t.Errorf("Kind = %s (%s), want transient", out.Kind, out.Err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("server got %d requests, want 0", n)
	}
}

func TestSendCanceledContextBeforeWriteIsTransient(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	s := newTestSender(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	out := s.Send(ctx, workMessage(srv.URL))

	if out.Kind != domain.OutcomeTransient {
		t.Errorf("Kind = %s (%s), want transient", out.Kind, out.Err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("server got %d requests, want 0", n)
	}
}

func TestSendDefaultConfigRefusesLoopback(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.CloseIdleConnections)

	for _, recipient := range []string{
		srv.URL,
		// A name is checked on the address it resolves to, not on its spelling.
		"http://localhost:" + u.Port() + "/",
	} {
		out := s.Send(t.Context(), workMessage(recipient))
		if out.Kind != domain.OutcomePermanent || out.Class != domain.ClassPermanent {
			t.Errorf("%s: outcome = %s/%s (%s), want permanent", recipient, out.Kind, out.Class, out.Err)
		}
		if !strings.Contains(out.Err, "not allowed") || !strings.Contains(out.Err, "LEDGER_WEBHOOK_ALLOW_CIDRS") {
			t.Errorf("%s: Err = %q, want it to say the address is not allowed and name LEDGER_WEBHOOK_ALLOW_CIDRS",
				recipient, out.Err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("server got %d requests, want 0", n)
	}
}

func TestSendRejectsInvalidDestinationWithoutNetwork(t *testing.T) {
	t.Parallel()
	recipients := []string{
		"",
		"not a url",
		"://missing-scheme",
		"ftp://example.com/hook",
		"mailto:ops@example.com",
		"http://",
		"http:///path-only",
		"https://:443/",
		"http://[::1",
		"http://example.com:port/",
	}
	for _, recipient := range recipients {
		t.Run(recipient, func(t *testing.T) {
			t.Parallel()
			s := newTestSender(t, Config{})
			forbidDialling(t, s)

			out := s.Send(t.Context(), workMessage(recipient))

			if out.Kind != domain.OutcomePermanent || out.Class != domain.ClassPermanent {
				t.Errorf("outcome = %s/%s (%s), want permanent", out.Kind, out.Class, out.Err)
			}
			if !strings.Contains(out.Err, "invalid webhook URL") {
				t.Errorf("Err = %q, want it to say the URL is invalid", out.Err)
			}
		})
	}
}

func TestSendRejectsUnsendableMessageWithoutNetwork(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*commands.WorkMessage)
	}{
		{"payload is not JSON", func(m *commands.WorkMessage) { m.Payload = json.RawMessage(`{"unterminated":`) }},
		{"payload is empty", func(m *commands.WorkMessage) { m.Payload = nil }},
		{"delivery id would split a header", func(m *commands.WorkMessage) { m.DeliveryID = "id\r\nX-Evil: 1" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newTestSender(t, Config{})
			forbidDialling(t, s)
			msg := workMessage("https://hooks.example.com/orders")
			tt.modify(&msg)

			out := s.Send(t.Context(), msg)

			if out.Kind != domain.OutcomePermanent {
				t.Errorf("Kind = %s (%s), want permanent", out.Kind, out.Err)
			}
		})
	}
}

func TestClassifyTransportError(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://hooks.example.com/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}}
	}
	tests := []struct {
		name    string
		err     error
		written bool
		want    domain.OutcomeKind
	}{
		{"no such host", wrap(&net.DNSError{Err: "no such host", Name: "nope.example", IsNotFound: true}), false, domain.OutcomePermanent},
		{"DNS temporary failure", wrap(&net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}), false, domain.OutcomeTransient},
		{"DNS timeout", wrap(&net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}), false, domain.OutcomeTransient},
		{"refused address", wrap(&addressNotAllowedError{address: "10.0.0.1", reason: "private address"}), false, domain.OutcomePermanent},
		{"failure before write", wrap(errors.New("connection reset by peer")), false, domain.OutcomeTransient},
		{"deadline before write", context.DeadlineExceeded, false, domain.OutcomeTransient},
		{"failure after write", errors.New("EOF"), true, domain.OutcomeUnknown},
		{"deadline after write", context.DeadlineExceeded, true, domain.OutcomeUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := classifyTransportError(provider.Answer{Err: tt.err, Written: tt.written}).Kind; got != tt.want {
				t.Errorf("classifyTransportError(%v, written=%t) = %s, want %s", tt.err, tt.written, got, tt.want)
			}
		})
	}
}

// TestSendKeepsAConnectionPerCallInFlight: with more calls in flight to one host than the
// default pool keeps, every connection of a round of concurrent calls is reused by the next
// round instead of being closed and dialled again.
func TestSendKeepsAConnectionPerCallInFlight(t *testing.T) {
	t.Parallel()
	const inFlight = 100 // above the default of 64 idle connections per host
	var dialled atomic.Int64
	var arrived sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived.Done()
		arrived.Wait() // answer once all calls of the round are open at once
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := newTestSender(t, Config{Timeout: 10 * time.Second, InFlight: inFlight})

	for round := 1; round <= 2; round++ {
		arrived.Add(inFlight)
		var calls sync.WaitGroup
		for range inFlight {
			calls.Go(func() {
				if out := s.Send(context.Background(), workMessage(srv.URL)); out.Kind != domain.OutcomeDelivered {
					t.Errorf("round %d: outcome %s (%s), want delivered", round, out.Kind, out.Err)
				}
			})
		}
		calls.Wait()
	}
	if got := dialled.Load(); got != inFlight {
		t.Errorf("%d connections dialled over two rounds of %d calls, want %d (the second round reuses the first's)", got, inFlight, inFlight)
	}
}

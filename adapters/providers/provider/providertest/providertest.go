// Package providertest is the conformance suite of the Sender contract (commands.Sender): every
// provider adapter runs it against its fake, in the manner of watermill's pubsub/tests, so that
// the line between transient, unknown, NotSent and ProviderFault (what a duplicate, failover
// and the breakers run on) is drawn the same way by all of them. A harness arranges each case
// on its fake (or on a misbehaving peer the suite starts, for what no fake can do: reset after
// the request, hang, answer without end); the suite calls Send and checks the outcome.
// A capability a sender lacks is declared in Features and its cases are skipped with the
// reason, never passed silently.
package providertest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// Case is a behaviour of the provider a harness arranges.
type Case string

// The cases of the suite.
const (
	// Delivered: the provider takes the message (delivered or accepted).
	Delivered Case = "delivered"
	// Refused: nothing listens at the provider's address (Peer.Addr is 127.0.0.1:1).
	Refused Case = "refused"
	// ResetAfterWrite: the provider reads the whole request, then resets the connection.
	ResetAfterWrite Case = "reset after write"
	// TimeoutAfterWrite: the provider reads the whole request and never answers.
	TimeoutAfterWrite Case = "timeout after write"
	// RateLimited: the provider refuses for now and asks for RetryAfter (429 Retry-After: 7);
	// whether that counts against it is the adapter's call.
	RateLimited Case = "rate limited"
	// ServerError: the provider's servers fail (HTTP 5xx; SMTP 421 at MAIL FROM).
	ServerError Case = "server error"
	// Permanent: the provider refuses this recipient for good (an invalid number, no such
	// chat, SMTP 550 5.1.1, a webhook's 410), with an answer that is hard evidence against it:
	// the outcome suppresses the recipient (Outcome.Suppress) unless Features.NoSuppress says
	// why the sender has no such answer.
	Permanent Case = "permanent refusal"
	// CallerCancelled: the attempt's context ends while the provider holds the request.
	CallerCancelled Case = "caller cancelled"
	// Oversize: the provider answers 200 with a body without end.
	Oversize Case = "oversize answer"
	// EchoedRequest: something in front of the provider answers 502 with the request it got,
	// credentials and all.
	EchoedRequest Case = "echoed request"
)

// RetryAfter is the wait RateLimited asks for.
const RetryAfter = 7 * time.Second

// Timeout is the call timeout a harness gives its sender: short, so that TimeoutAfterWrite ends
// quickly.
const Timeout = 400 * time.Millisecond

// Features declares what a sender cannot do or does differently, each with the reason.
type Features struct {
	// HTTP: the sender speaks HTTP, so the suite's misbehaving peers apply (Peer.URL).
	HTTP bool
	// RecipientEndpoint: the endpoint is the recipient's (a webhook URL), not the provider's:
	// no failure counts against the provider's breaker, which every recipient shares.
	RecipientEndpoint bool
	// ServerErrorUnknown, when not "", says why a server error leaves the outcome unknown (the
	// provider may have acted before it failed) instead of transient.
	ServerErrorUnknown string
	// ServerErrorNotSent, when not "", says why a server error is a refusal before anything
	// was handed over, so the attempt may fail over (SMTP's 421 at MAIL FROM).
	ServerErrorNotSent string
	// StatusIsProof: a 2xx status alone is the provider's acknowledgement (a webhook's), so
	// an answer without end is delivered once its status came; only the bounded read is
	// checked. Otherwise the body is the proof, and one read short is not taken for it.
	StatusIsProof bool
	// NoRetryAfter, when not "", says why the protocol carries no requested wait.
	NoRetryAfter string
	// NoOversize, when not "", says why the bounded read cannot be tested.
	NoOversize string
	// NoEcho, when not "", says why nothing can echo the request.
	NoEcho string
	// NoSuppress, when not "", says why none of the provider's answers is hard evidence
	// against a recipient, so that the Permanent case does not suppress it.
	NoSuppress string
}

// Peer is where the case's provider is, when the suite serves it itself: Addr is host:port,
// URL the same as an http base URL. Both are "" when the harness's fake serves the case.
type Peer struct {
	Addr string
	URL  string
}

// Harness is one sender under the suite.
type Harness struct {
	Features Features
	// Secrets are the credentials the sender holds; none may appear in an outcome, in the
	// sender printed, or in a log of either.
	Secrets []string
	// Arrange builds the sender for a case with Timeout as its call timeout: against peer when
	// peer.Addr is set, else against its fake made to behave as c says. It returns the sender
	// and the message to send.
	Arrange func(t *testing.T, c Case, peer Peer) (commands.Sender, commands.WorkMessage)
}

// Run runs every case of the suite against h.
func Run(t *testing.T, h Harness) {
	for _, tc := range cases {
		t.Run(string(tc.c), func(t *testing.T) {
			t.Parallel()
			if reason := tc.skip(h.Features); reason != "" {
				t.Skip(reason)
			}
			var peer Peer
			var served func() int64
			if tc.peer != nil && (h.Features.HTTP || tc.c == Refused) {
				peer, served = tc.peer(t)
			}
			sender, msg := h.Arrange(t, tc.c, peer)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.c == CallerCancelled {
				time.AfterFunc(100*time.Millisecond, cancel)
			}
			start := time.Now()
			o := sender.Send(ctx, msg)
			elapsed := time.Since(start)
			t.Logf("%s: %+v", tc.c, o)
			common(t, h, sender, o)
			tc.check(t, h.Features, o)
			if tc.c == Oversize {
				if n := served(); n > oversizeBound {
					t.Errorf("the sender read %d bytes of an answer without end (in %s), want at most %d: the read is not bounded", n, elapsed, oversizeBound)
				}
			}
		})
	}
}

// common checks what holds for every outcome.
func common(t *testing.T, h Harness, sender commands.Sender, o domain.Outcome) {
	t.Helper()
	if o.Provider != sender.Provider() {
		t.Errorf("outcome names provider %q, want %q", o.Provider, sender.Provider())
	}
	if o.NotSent && o.Kind != domain.OutcomeTransient {
		t.Errorf("NotSent on a %s outcome: only a transient outcome may move to the next provider", o.Kind)
	}
	if o.Suppress && o.Kind != domain.OutcomePermanent {
		t.Errorf("Suppress on a %s outcome (%s): only a permanent one is evidence against the recipient; soft answers never suppress", o.Kind, o.Err)
	}
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	logger.Info("attempt", "sender", sender, "outcome", o, "err", o.Err)
	printed := strings.Join([]string{o.Err, o.ProviderCode, o.ProviderOperationID, fmt.Sprintf("%v %+v", sender, sender), log.String()}, "\n")
	for _, secret := range h.Secrets {
		if secret != "" && strings.Contains(printed, secret) {
			t.Errorf("a secret (%d characters) appears in the outcome, the sender printed or the log:\n%s", len(secret), printed)
		}
	}
}

type suiteCase struct {
	c     Case
	peer  func(t *testing.T) (Peer, func() int64)
	skip  func(Features) string
	check func(t *testing.T, f Features, o domain.Outcome)
}

func never(Features) string { return "" }

// fault is whether a failure of the provider's end counts against it.
func fault(f Features) bool { return !f.RecipientEndpoint }

func want(t *testing.T, o domain.Outcome, kind domain.OutcomeKind, notSent, providerFault bool) {
	t.Helper()
	if o.Kind != kind || o.NotSent != notSent || o.ProviderFault != providerFault {
		t.Errorf("outcome %s NotSent=%t ProviderFault=%t (%s), want %s NotSent=%t ProviderFault=%t",
			o.Kind, o.NotSent, o.ProviderFault, o.Err, kind, notSent, providerFault)
	}
}

var cases = []suiteCase{
	{c: Delivered, skip: never, check: func(t *testing.T, _ Features, o domain.Outcome) {
		if o.Kind != domain.OutcomeDelivered && o.Kind != domain.OutcomeAccepted {
			t.Errorf("outcome %s (%s), want delivered or accepted", o.Kind, o.Err)
		}
		if o.ProviderFault || o.NotSent {
			t.Errorf("a delivery with NotSent=%t ProviderFault=%t", o.NotSent, o.ProviderFault)
		}
	}},
	{c: Refused, peer: refused, skip: never, check: func(t *testing.T, f Features, o domain.Outcome) {
		want(t, o, domain.OutcomeTransient, true, fault(f))
	}},
	{c: ResetAfterWrite, peer: resetting, skip: never, check: func(t *testing.T, f Features, o domain.Outcome) {
		want(t, o, domain.OutcomeUnknown, false, fault(f))
	}},
	{c: TimeoutAfterWrite, peer: hanging, skip: never, check: func(t *testing.T, f Features, o domain.Outcome) {
		want(t, o, domain.OutcomeUnknown, false, fault(f))
	}},
	{c: RateLimited, skip: func(f Features) string { return f.NoRetryAfter }, check: func(t *testing.T, _ Features, o domain.Outcome) {
		// Whether a throttle counts against the provider is the adapter's to say: an account's
		// limit is the provider's load (Twilio 20429, Vonage status 1), a chat's flood limit
		// is not (Telegram).
		if o.Kind != domain.OutcomeTransient || o.NotSent {
			t.Errorf("outcome %s NotSent=%t (%s), want transient, not NotSent: the provider got the request", o.Kind, o.NotSent, o.Err)
		}
		if o.RetryAfter != RetryAfter {
			t.Errorf("RetryAfter %s, want the provider's %s", o.RetryAfter, RetryAfter)
		}
	}},
	{c: ServerError, skip: never, check: func(t *testing.T, f Features, o domain.Outcome) {
		switch {
		case f.ServerErrorUnknown != "":
			want(t, o, domain.OutcomeUnknown, false, fault(f))
		default:
			want(t, o, domain.OutcomeTransient, f.ServerErrorNotSent != "", fault(f))
		}
	}},
	{c: Permanent, skip: never, check: func(t *testing.T, f Features, o domain.Outcome) {
		want(t, o, domain.OutcomePermanent, false, false)
		if o.Suppress != (f.NoSuppress == "") {
			t.Errorf("a permanent refusal of the recipient (%s) has Suppress=%t, want %t (NoSuppress %q)", o.ProviderCode, o.Suppress, f.NoSuppress == "", f.NoSuppress)
		}
	}},
	{c: CallerCancelled, peer: hanging, skip: never, check: func(t *testing.T, _ Features, o domain.Outcome) {
		if o.ProviderFault {
			t.Errorf("outcome %s (%s) counts against the provider, but the caller went away", o.Kind, o.Err)
		}
		if o.Kind == domain.OutcomeDelivered || o.Kind == domain.OutcomeAccepted {
			t.Errorf("outcome %s after the caller went away", o.Kind)
		}
	}},
	{c: Oversize, peer: endless, skip: func(f Features) string { return f.NoOversize }, check: func(t *testing.T, f Features, o domain.Outcome) {
		if !f.StatusIsProof && (o.Kind == domain.OutcomeDelivered || o.Kind == domain.OutcomeAccepted) {
			t.Errorf("outcome %s on an answer without end, want it not taken as proof", o.Kind)
		}
	}},
	{c: EchoedRequest, peer: echoing, skip: func(f Features) string { return f.NoEcho }, check: func(t *testing.T, _ Features, o domain.Outcome) {
		if o.Kind == domain.OutcomeDelivered || o.Kind == domain.OutcomeAccepted {
			t.Errorf("outcome %s on a 502", o.Kind)
		}
	}},
}

// oversizeBound is more than any sender's read limit plus the loopback's socket buffers, far
// less than endless serves.
const oversizeBound = 32 << 20

// endlessBytes is how much endless serves at most, so that a sender that reads without bound
// still ends.
const endlessBytes = 256 << 20

func refused(*testing.T) (Peer, func() int64) {
	// Port 1 (tcpmux) is privileged and served by nothing here: a port just freed could be
	// taken by a parallel test's listener.
	return Peer{Addr: "127.0.0.1:1", URL: "http://127.0.0.1:1"}, nil
}

// serve starts a TCP peer on the loopback that reads one HTTP request whole and hands the
// connection and the request to then.
func serve(t *testing.T, then func(c *net.TCPConn, req *http.Request, raw []byte)) Peer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(15 * time.Second))
				var raw bytes.Buffer
				req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(c, &raw)))
				if err != nil {
					return
				}
				if _, err := io.Copy(io.Discard, req.Body); err != nil {
					return
				}
				then(c.(*net.TCPConn), req, raw.Bytes())
			}()
		}
	}()
	addr := l.Addr().String()
	return Peer{Addr: addr, URL: "http://" + addr}
}

func resetting(t *testing.T) (Peer, func() int64) {
	return serve(t, func(c *net.TCPConn, _ *http.Request, _ []byte) {
		_ = c.SetLinger(0) // close sends RST
	}), nil
}

func hanging(t *testing.T) (Peer, func() int64) {
	return serve(t, func(c *net.TCPConn, _ *http.Request, _ []byte) {
		// Hold the request unanswered until the client gives up (or the peer's deadline).
		_, _ = io.Copy(io.Discard, c)
	}), nil
}

func endless(t *testing.T) (Peer, func() int64) {
	var written atomic.Int64
	p := serve(t, func(c *net.TCPConn, _ *http.Request, _ []byte) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(endlessBytes)+"\r\n\r\n")
		chunk := bytes.Repeat([]byte(" "), 64<<10)
		for written.Load() < endlessBytes {
			n, err := c.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	return p, written.Load
}

func echoing(t *testing.T) (Peer, func() int64) {
	return serve(t, func(c *net.TCPConn, _ *http.Request, raw []byte) {
		// The request line, the headers (basic auth) and the body (a form's secret), as a
		// proxy's error page may show them; once plain and once as the path, percent-encoded.
		body := string(raw)
		_, _ = fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	}), nil
}

// Answering starts a peer that answers every request with status, header and body: for a case
// a harness's fake cannot answer (a Retry-After the real API never sends, but a gateway in
// front of it may).
func Answering(t *testing.T, status int, header http.Header, body string) Peer {
	t.Helper()
	return serve(t, func(c *net.TCPConn, _ *http.Request, _ []byte) {
		resp := &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Header: header.Clone(),
			ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body)), Close: true}
		if resp.Header == nil {
			resp.Header = http.Header{}
		}
		_ = resp.Write(c)
	})
}

// Package smtpfake is a real SMTP server for tests and for `ledger sink`: it speaks the
// protocol through github.com/emersion/go-smtp, so a client talks to it unmodified, keeps
// every message it reads, and misbehaves on request (a reply code at a chosen stage, a
// dropped connection, a slow reply; see Behaviour). It binds the loopback only.
package smtpfake

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/mail"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

const (
	// serverTimeout bounds how long a connection may sit idle or stall mid-command, so that a
	// client which vanished does not pin a goroutine of a long-running `ledger sink`.
	serverTimeout = time.Minute
	// maxMessageBytes is far above any notification and small enough for a test's memory.
	maxMessageBytes = 32 << 20
)

// Config configures a fake server.
type Config struct {
	// Addr is the address to listen on, on the loopback: "127.0.0.1:0" in tests (any free
	// port), "127.0.0.1:2525" for `ledger sink`. An empty host means 127.0.0.1; "localhost"
	// is taken as 127.0.0.1 without resolving it; any other host than a loopback IP is refused.
	Addr string
	// Out receives one line per message received and per failure the fake answered; nil means
	// silent.
	Out io.Writer
	// RequireAuth refuses MAIL FROM (530 5.7.0) until the client authenticated with Username
	// and Password.
	RequireAuth bool
	// Username and Password are the one account AUTH PLAIN accepts. With a Username the fake
	// offers AUTH even without RequireAuth. AUTH is offered in plain text too: the fake runs
	// on the loopback.
	Username, Password string
	// StartTLS offers STARTTLS, with a self-signed certificate for 127.0.0.1, ::1 and
	// localhost generated at start (CertPool trusts it).
	StartTLS bool
	// ImplicitTLS speaks TLS from the first byte (port 465 style), with the same certificate.
	// It excludes StartTLS.
	ImplicitTLS bool
	// Behaviour is the behaviour at start (see SetBehaviour); the zero value accepts everything.
	Behaviour Behaviour
}

// Message is one message the fake read to its end (its final ".").
type Message struct {
	// From is the envelope sender (MAIL FROM).
	From string
	// To are the envelope recipients (RCPT TO).
	To []string
	// Data is the message as received: headers and body, CRLF line ends, dot-stuffing undone.
	Data []byte
	// Reply is what the fake answered to its end ("250 2.0.0 OK: queued as 00001"), or will
	// answer once a Behaviour.Delay has passed; empty when it dropped the connection instead.
	Reply string
	// QueueID is the id the fake queued it under; empty when it refused or dropped it.
	QueueID string
	// TLS tells whether the session was encrypted.
	TLS bool
	// Auth is the user the session authenticated as; empty without AUTH.
	Auth string
}

// Parsed parses Data as an RFC 5322 message.
func (m Message) Parsed() (*mail.Message, error) {
	return mail.ReadMessage(bytes.NewReader(m.Data))
}

// Header returns the message's header; an unparsable message gives an empty one.
func (m Message) Header() mail.Header {
	parsed, err := m.Parsed()
	if err != nil {
		return mail.Header{}
	}
	return parsed.Header
}

// MessageID returns the Message-ID header, angle brackets included.
func (m Message) MessageID() string { return m.Header().Get("Message-ID") }

// Subject returns the Subject header, RFC 2047 encoded words decoded.
func (m Message) Subject() string {
	raw := m.Header().Get("Subject")
	decoded, err := new(mime.WordDecoder).DecodeHeader(raw)
	if err != nil {
		return raw
	}
	return decoded
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	cfg      Config
	listener net.Listener
	smtp     *smtp.Server
	pool     *x509.CertPool
	tls      *tls.Config

	done      chan struct{} // closed by Close: ends delays
	closeOnce sync.Once
	closeErr  error
	serving   sync.WaitGroup // the accept loop
	handlers  sync.WaitGroup // one per accepted connection, until go-smtp closes it

	mu        sync.Mutex
	conns     map[*fakeConn]struct{}
	closed    bool
	behaviour Behaviour
	affected  int // messages the behaviour applied to since it was set
	messages  []Message
	queued    int // the last queue id given
	counts    Counts
}

// Counts are what the fake was asked, command by command, since it started. A client's
// retries show in them where Messages cannot: a transaction refused before its message
// leaves no Message, and a client that resends after a lost reply (RFC 5321 section 4.1.1.4
// leaves it unable to know whether the message was queued) sends a second DATA.
type Counts struct {
	// Sessions are the connections accepted.
	Sessions int
	// Mail are the MAIL FROM commands: the transactions started, refused ones included.
	Mail int
	// Rcpt are the RCPT TO commands, refused ones included.
	Rcpt int
	// Data are the DATA commands of transactions with a recipient: those answered 354 and
	// those the Behaviour refused (go-smtp refuses a DATA without recipients itself, unseen).
	Data int
}

// Start listens on cfg.Addr and serves until Close.
func Start(cfg Config) (*Server, error) {
	addr, err := loopbackAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	var problems []error
	if cfg.StartTLS && cfg.ImplicitTLS {
		problems = append(problems, errors.New("StartTLS and ImplicitTLS exclude each other"))
	}
	if cfg.RequireAuth && cfg.Username == "" {
		problems = append(problems, errors.New("RequireAuth needs a Username (and Password) to accept"))
	}
	if err := cfg.Behaviour.Validate(); err != nil {
		problems = append(problems, err)
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("smtpfake: %w", err)
	}

	s := &Server{
		cfg:       cfg,
		done:      make(chan struct{}),
		conns:     make(map[*fakeConn]struct{}),
		behaviour: cfg.Behaviour,
	}
	if cfg.StartTLS || cfg.ImplicitTLS {
		cert, pool, err := selfSigned()
		if err != nil {
			return nil, fmt.Errorf("smtpfake: certificate: %w", err)
		}
		s.pool = pool
		s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("smtpfake: listen: %w", err)
	}
	s.listener = &trackingListener{Listener: l, srv: s}

	srv := smtp.NewServer(backend{s})
	srv.Domain = "localhost"
	srv.ReadTimeout = serverTimeout
	srv.WriteTimeout = serverTimeout
	srv.MaxMessageBytes = maxMessageBytes
	srv.MaxRecipients = 100
	srv.AllowInsecureAuth = true // loopback only; tests of AUTH need not set up TLS
	srv.ErrorLog = log.New(io.Discard, "", 0)
	if cfg.StartTLS {
		srv.TLSConfig = s.tls // implicit TLS is done under go-smtp, by the listener
	}
	s.smtp = srv

	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		_ = srv.Serve(s.listener) // returns when Close closes the listener
	}()
	return s, nil
}

// Addr is the address the fake listens on ("127.0.0.1:54321").
func (s *Server) Addr() string { return s.listener.Addr().String() }

// CertPool is the pool a client trusts the fake's certificate with; nil without TLS.
func (s *Server) CertPool() *x509.CertPool { return s.pool }

// SetBehaviour changes how the fake answers the transactions that start (MAIL FROM) from now
// on, and restarts the count of Behaviour.Times. b must be valid (ParseBehaviour's results
// are): an invalid one panics, since it is a test's own mistake.
func (s *Server) SetBehaviour(b Behaviour) {
	if err := b.Validate(); err != nil {
		panic(fmt.Sprintf("smtpfake: SetBehaviour: %v", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behaviour, s.affected = b, 0
}

// Messages returns every message the fake read to its end, in order, refused and dropped ones
// included (Message.Reply tells which). A message is recorded as soon as it is read, before a
// delayed reply: a test sees what reached the server even when its client gave up waiting.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages...)
}

// Counts returns what the fake was asked so far (see Counts).
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// count adds one to n, one of s.counts' fields.
func (s *Server) count(n *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*n++
}

// Close stops listening, closes every connection (a delayed reply is abandoned) and waits for
// their handlers to end.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.closeErr = s.smtp.Close()
		// go-smtp closes the listeners its Serve registered; Serve may not have started yet.
		if err := s.listener.Close(); s.closeErr == nil {
			s.closeErr = err
		}
		if errors.Is(s.closeErr, net.ErrClosed) {
			s.closeErr = nil
		}
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			// go-smtp closes the connections it registered; one accepted an instant ago may
			// not be registered yet.
			_ = c.raw.Close()
		}
		s.mu.Unlock()
		s.serving.Wait()
		s.handlers.Wait()
	})
	return s.closeErr
}

// draw decides the fate of a transaction that starts: the behaviour it misbehaves with, or
// the zero Behaviour once Times messages had theirs.
func (s *Server) draw() Behaviour {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.behaviour
	if b.IsZero() || (b.Times > 0 && s.affected >= b.Times) {
		return Behaviour{}
	}
	s.affected++
	return b
}

// record keeps a message read to its end, giving it a queue id when it is to be queued.
func (s *Server) record(m Message, queue bool) Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	if queue {
		s.queued++
		m.QueueID = fmt.Sprintf("%05X", s.queued)
		m.Reply = "250 2.0.0 " + queuedText(m.QueueID)
	}
	s.messages = append(s.messages, m)
	return m
}

// queuedText is the text of the reply that accepts a message, naming its queue id as real
// servers do ("250 2.0.0 Ok: queued as 4F2A1" from Postfix).
func queuedText(id string) string { return "OK: queued as " + id }

// say writes one line to Out.
func (s *Server) say(format string, args ...any) {
	if s.cfg.Out == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.cfg.Out, "smtpfake: "+format+"\n", args...)
}

// wait waits d, or less if the server closes; it reports whether the whole wait passed.
func (s *Server) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// loopbackAddr checks and completes a listen address: loopback only, never resolved.
func loopbackAddr(addr string) (string, error) {
	if addr == "" {
		return "127.0.0.1:0", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("smtpfake: address %q: %w", addr, err)
	}
	switch host {
	case "", "localhost":
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("smtpfake: address %q: the fake binds the loopback only (127.0.0.1, ::1)", addr)
	}
	return net.JoinHostPort(host, port), nil
}

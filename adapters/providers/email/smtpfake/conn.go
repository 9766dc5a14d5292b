package smtpfake

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
)

// maxHeld bounds the bytes of one line the connection holds back while it waits for the line's
// end: a longer line is no command it looks for, and go-smtp refuses it anyway.
const maxHeld = 64 << 10

// trackingListener hands go-smtp connections the fake can answer DATA on, and remembers them so
// that Close can close every one (go-smtp's own Server.Close misses one it has accepted but not
// yet registered).
type trackingListener struct {
	net.Listener
	srv *Server
}

// Accept returns the next connection, under TLS for ImplicitTLS.
func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		fc := &fakeConn{Conn: raw, raw: raw, srv: l.srv}
		if l.srv.cfg.ImplicitTLS {
			fc.Conn = tls.Server(raw, l.srv.tls)
		}
		if l.srv.track(fc) {
			return fc, nil
		}
		_ = raw.Close() // the server is closing
	}
}

// track registers a new connection, unless the server is closing.
func (s *Server) track(c *fakeConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.handlers.Add(1)
	s.counts.Sessions++
	return true
}

// mode is what the client's bytes are, as the connection follows the session.
type mode int

const (
	modeCommand mode = iota // command lines
	modeData                // the message, after a 354, up to its "." line
	modePass                // TLS records after STARTTLS, or BDAT chunks: not looked at
)

// fakeConn is a connection as go-smtp sees it. It follows the session's command lines so that
// it can answer DATA itself when the fate says to fail there: go-smtp answers DATA with 354
// before any backend code runs (conn.go, handleData), and a server that refuses DATA is a
// stage the client must be tested against. Once the session is under STARTTLS its lines are
// encrypted below go-smtp's TLS, and the connection stops looking.
type fakeConn struct {
	net.Conn          // what go-smtp reads and writes: raw, or TLS over it for ImplicitTLS
	raw      net.Conn // the TCP connection
	srv      *Server
	once     sync.Once

	// Read state: used by go-smtp's one goroutine per connection only.
	buf     []byte
	pending []byte // the client's bytes not yet looked at
	ready   []byte // bytes to hand to go-smtp
	readErr error

	midLine bool // the start of the current line was handed over already, too long to hold

	mu       sync.Mutex // the fields below: Write may also come from Server.Close
	mode     mode
	awaiting string // the command whose reply decides the next mode: DATA or STARTTLS
	session  *session
}

// fakeConnOf finds the fakeConn under a go-smtp connection (under its STARTTLS layer).
func fakeConnOf(c net.Conn) *fakeConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	fc, _ := c.(*fakeConn)
	return fc
}

// Read hands go-smtp the client's bytes. While it follows the session it hands one line per
// call, and looks at a command line only then: go-smtp has handled every command before it
// (a pipelining client may have sent MAIL, RCPT and DATA at once), so the session's state and
// the mode are those the line meets.
func (c *fakeConn) Read(p []byte) (int, error) {
	for len(c.ready) == 0 {
		c.mu.Lock()
		pass := c.mode == modePass
		c.mu.Unlock()
		switch i := bytes.IndexByte(c.pending, '\n'); {
		case pass && len(c.pending) > 0:
			c.ready, c.pending = c.pending, nil
		case pass && c.readErr == nil:
			return c.Conn.Read(p)
		case i >= 0:
			line := c.pending[:i+1]
			c.pending = c.pending[i+1:]
			c.ready = c.line(line)
		case len(c.pending) > maxHeld || (c.readErr != nil && len(c.pending) > 0):
			// No command is this long, and what came before an error goes on to go-smtp.
			c.ready, c.pending = c.pending, nil
			c.midLine = true
		case c.readErr != nil:
			return 0, c.readErr
		default:
			if c.buf == nil {
				c.buf = make([]byte, 4096)
			}
			n, err := c.Conn.Read(c.buf)
			c.pending = append(c.pending, c.buf[:n]...)
			c.readErr = err
		}
	}
	n := copy(p, c.ready)
	c.ready = c.ready[n:]
	return n, nil
}

// line looks at one whole line of the client's and returns what go-smtp is to read of it:
// the line, or nothing when the connection answered it itself.
func (c *fakeConn) line(line []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	mid := c.midLine
	c.midLine = false
	if mid {
		return line // the end of a line handed over in part: not a command, not the "."
	}
	if c.mode == modeData {
		if string(line) == ".\r\n" || string(line) == ".\n" {
			c.mode = modeCommand
		}
		return line
	}
	command := strings.ToUpper(strings.TrimRight(string(line), "\r\n"))
	verb, _, _ := strings.Cut(command, " ")
	switch {
	case command == "DATA":
		if c.session != nil {
			if reply, ok := c.session.answerData(); ok {
				// go-smtp never sees this DATA; the client got its answer.
				_, _ = io.WriteString(c.Conn, reply)
				return nil
			}
		}
		c.awaiting = "DATA"
	case command == "STARTTLS":
		c.awaiting = "STARTTLS"
	case verb == "BDAT":
		c.mode = modePass // binary chunks from here on
	}
	return line
}

// Write passes go-smtp's replies on, and learns from the reply to DATA or STARTTLS what the
// client sends next.
func (c *fakeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	switch c.awaiting {
	case "DATA":
		if bytes.HasPrefix(p, []byte("354")) {
			c.mode = modeData
		}
	case "STARTTLS":
		if bytes.HasPrefix(p, []byte("220")) {
			c.mode = modePass
		}
	}
	c.awaiting = ""
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// setSession tells the connection the session it answers DATA for.
func (c *fakeConn) setSession(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.session = s
}

// drop closes the TCP connection under everything, without a reply and without TLS's
// close_notify; reset makes it a TCP reset, so that a client still writing fails at once.
func (c *fakeConn) drop(reset bool) {
	if tc, ok := c.raw.(*net.TCPConn); ok && reset {
		_ = tc.SetLinger(0)
	}
	_ = c.raw.Close()
}

// Close closes the connection and tells the server its handler is done with it.
func (c *fakeConn) Close() error {
	c.once.Do(func() {
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
		c.srv.handlers.Done()
	})
	return c.Conn.Close()
}

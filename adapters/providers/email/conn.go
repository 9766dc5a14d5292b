package email

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// attemptConn is the TCP connection of one attempt, under TLS when there is TLS. It does two
// things go-mail cannot be asked for:
//
//   - it holds every deadline to the attempt's own. go-mail sets a fresh deadline of its
//     timeout before the session and again before each message (Client.UpdateDeadline), and
//     after the dial it never looks at the context; clamping here makes Config.Timeout and the
//     caller's context bound the whole attempt, dial to QUIT;
//   - it remembers whether a write failed. go-mail's smtp.DataCloser.Close (smtp/smtp.go)
//     discards the error of writing the end of the message (the buffered tail and the final
//     ".") and reports only the failure to read the reply, so from go-mail alone "the
//     connection broke before the server had the whole message" (transient) and "it broke
//     while we waited for the reply" (unknown) look the same. Every write of the session is
//     sequential, so no failed write means every byte, the final "." included, was handed
//     to the network.
type attemptConn struct {
	net.Conn
	deadline time.Time

	mu      sync.Mutex // serialises deadline changes, so that expire cannot be undone
	expired bool

	writeFailed atomic.Bool
	// sent counts the bytes written since mark, to tell a failure at the greeting (the client
	// has sent nothing yet) from one at EHLO.
	sent atomic.Int64
}

// past is a deadline that has passed: setting it makes pending reads and writes fail at once.
var past = time.Unix(1, 0)

func newAttemptConn(c net.Conn, deadline time.Time) *attemptConn {
	ac := &attemptConn{Conn: c, deadline: deadline}
	_ = ac.SetDeadline(time.Time{})
	return ac
}

// clamp returns the earlier of t and the attempt's deadline (t zero means no deadline).
func (c *attemptConn) clamp(t time.Time) time.Time {
	if c.expired {
		return past
	}
	if t.IsZero() || t.After(c.deadline) {
		return c.deadline
	}
	return t
}

// SetDeadline sets the read and write deadlines, never later than the attempt's.
func (c *attemptConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetDeadline(c.clamp(t))
}

// SetReadDeadline sets the read deadline, never later than the attempt's.
func (c *attemptConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetReadDeadline(c.clamp(t))
}

// SetWriteDeadline sets the write deadline, never later than the attempt's.
func (c *attemptConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetWriteDeadline(c.clamp(t))
}

// Write writes p and records a failure.
func (c *attemptConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	if err != nil {
		c.writeFailed.Store(true)
	}
	return n, err
}

// expire makes every pending and later read and write fail: the attempt's context is done.
func (c *attemptConn) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expired = true
	_ = c.Conn.SetDeadline(past)
}

// mark restarts the count of bytes sent (after an implicit TLS handshake, whose records are
// not SMTP).
func (c *attemptConn) mark() { c.sent.Store(0) }

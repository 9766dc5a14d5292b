package bench

import (
	"github.com/deliveryledger/ledger/adapters/providers/webhook"

	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/google/uuid"
)

// The load generator's HTTP/1.1 client for the accept endpoint, in the manner of wrk: each
// request is written in one write on a kept-alive connection and its response read with one
// buffered reader, by the goroutine that sends it. Go's net/http client hands every request to
// two goroutines of its own and builds header maps both ways; in the accept phase it took about a
// quarter of the benchmark process's CPU, which the ledger under test, on the same two cores, then
// went without. The requests and the answers on the wire are the same.

// benchConn is one kept-alive connection to the API.
type benchConn struct {
	conn net.Conn
	r    *bufio.Reader
	req  []byte // the request being written, reused
	body []byte // the answer's body, reused
}

// acceptPool keeps the idle connections to one API address.
type acceptPool struct {
	addr string
	mu   sync.Mutex
	idle []*benchConn
}

var acceptPools sync.Map // base URL → *acceptPool

func poolFor(base string) (*acceptPool, error) {
	if p, ok := acceptPools.Load(base); ok {
		return p.(*acceptPool), nil
	}
	addr, ok := strings.CutPrefix(base, "http://")
	if !ok || strings.Contains(addr, "/") {
		return nil, fmt.Errorf("bench client: base URL %q is not http://host:port", base)
	}
	p, _ := acceptPools.LoadOrStore(base, &acceptPool{addr: addr})
	return p.(*acceptPool), nil
}

func (p *acceptPool) get() (c *benchConn, reused bool, err error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c = p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, true, nil
	}
	p.mu.Unlock()
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	return &benchConn{conn: conn, r: bufio.NewReaderSize(conn, 4096)}, false, nil
}

func (p *acceptPool) put(c *benchConn) {
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// acceptOne sends one delivery, each with its own Idempotency-Key; it returns the delivery id.
func acceptOne(base, recipient string) (string, error) {
	return acceptBody(base, fmt.Appendf(nil, `{"channel":%q,"recipient":%q,"payload":{"order":%d,"text":"benchmark"}}`, webhook.Name, recipient, rand.IntN(1e9)))
}

// acceptBody sends one accept request with body and a new Idempotency-Key; it returns the
// delivery id.
func acceptBody(base string, body []byte) (string, error) {
	answer, err := acceptPost(base, "/v1/deliveries", body)
	if err != nil {
		return "", err
	}
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return "", fmt.Errorf("accept answer: %w", err)
	}
	return a.ID, nil
}

// acceptPost posts body to an accept path (/v1/deliveries, /v1/notifications) with a new
// Idempotency-Key and returns the 202 answer's body, copied.
func acceptPost(base, path string, body []byte) ([]byte, error) {
	pool, err := poolFor(base)
	if err != nil {
		return nil, err
	}
	key := uuid.NewString()
	for {
		c, reused, err := pool.get()
		if err != nil {
			return nil, err
		}
		status, answer, keep, err := c.post(pool.addr, path, key, body)
		if err != nil {
			c.conn.Close()
			// A kept-alive connection the server closed meanwhile fails before any answer: send
			// again on the next one, or a new one. After a pause every idle connection may be
			// stale (the schedule phase's projection leaves them idle for minutes), and each try
			// uses one up, so the retries end with the idle list at the latest. The
			// Idempotency-Key makes a repeat safe in any case.
			if reused && errors.Is(err, errStaleConn) {
				continue
			}
			return nil, err
		}
		answer = slices.Clone(answer)
		if keep {
			pool.put(c)
		} else {
			c.conn.Close()
		}
		if status != 202 {
			return nil, fmt.Errorf("accept: %d %s", status, answer)
		}
		return answer, nil
	}
}

// errStaleConn: the connection ended before the first byte of an answer.
var errStaleConn = errors.New("connection closed before the answer")

// post writes one JSON POST and reads its answer. The body it returns is valid until the next
// call on c; keep says whether the connection may carry another request.
func (c *benchConn) post(host, path, key string, body []byte) (status int, answer []byte, keep bool, err error) {
	c.req = append(c.req[:0], "POST "...)
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\nHost: "...)
	c.req = append(c.req, host...)
	c.req = append(c.req, "\r\nAuthorization: Bearer bench-key\r\nContent-Type: application/json\r\nIdempotency-Key: "...)
	c.req = append(c.req, key...)
	c.req = append(c.req, "\r\nContent-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, body...)
	if _, err := c.conn.Write(c.req); err != nil {
		return 0, nil, false, errors.Join(errStaleConn, err)
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		// Closed by the server before a byte of the answer: its FIN reads as the end of the
		// stream, or, once our write has drawn its RST, as a reset.
		if len(line) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)) {
			err = errors.Join(errStaleConn, err)
		}
		return 0, nil, false, err
	}
	// "HTTP/1.1 202 Accepted"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, nil, false, fmt.Errorf("bench client: bad status line %q", line)
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, nil, false, fmt.Errorf("bench client: bad status line %q", line)
	}
	length, chunked, keep := -1, false, true
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, nil, false, fmt.Errorf("bench client: bad header line %q", h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, nil, false, fmt.Errorf("bench client: bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		c.body, err = readChunked(c.r, c.body[:0])
	case length >= 0:
		c.body = slices.Grow(c.body[:0], length)[:length]
		_, err = io.ReadFull(c.r, c.body)
	default:
		// No length: the body runs to the end of the connection.
		c.body, err = io.ReadAll(c.r)
		keep = false
	}
	if err != nil {
		return 0, nil, false, err
	}
	return status, c.body, keep, nil
}

// readChunked appends a chunked body (RFC 9112, section 7.1) to dst; trailers are skipped.
func readChunked(r *bufio.Reader, dst []byte) ([]byte, error) {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bench client: bad chunk size %q", line)
		}
		if n == 0 {
			for { // trailers, up to the empty line
				t, err := r.ReadSlice('\n')
				if err != nil {
					return nil, err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return dst, nil
				}
			}
		}
		start := len(dst)
		dst = slices.Grow(dst, int(n))[:start+int(n)]
		if _, err := io.ReadFull(r, dst[start:]); err != nil {
			return nil, err
		}
		if _, err := r.Discard(2); err != nil { // the chunk's CRLF
			return nil, err
		}
	}
}

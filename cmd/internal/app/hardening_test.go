package app

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// TestSlowBodiesAndIdleConnectionsAreCut: a body sent a byte at a time, and a keep-alive
// connection left idle, are closed by the server after their timeouts instead of being held
// open for ever.
func TestSlowBodiesAndIdleConnectionsAreCut(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "api", func(c *Config) {
		c.HTTPReadTimeout = 300 * time.Millisecond
		c.HTTPIdleTimeout = 300 * time.Millisecond
	})

	// The headers announce 100 bytes; one arrives every 100 ms, which would take 10 s.
	conn, err := net.Dial("tcp", b.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/deliveries HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer acme-key\r\n"+
		"Idempotency-Key: slow-1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn) // the answer, if any, then EOF when the server closes
		close(closed)
	}()
	var wrote atomic.Int64
	go func() {
		for range 100 {
			select {
			case <-closed:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
			wrote.Add(1)
		}
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("a body trickling a byte every 100 ms was still being read after %d bytes", wrote.Load())
	}
	if n := wrote.Load(); n >= 100 {
		t.Fatalf("the whole slow body (%d bytes) was read", n)
	}

	// A finished request's keep-alive connection is closed once idle.
	idle, err := net.Dial("tcp", b.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(idle)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle keep-alive connection was not closed by the server: %v", err)
	}
}

// TestAnswersPastTheWriteTimeoutAreCut: the write timeout bounds the time from a request's
// headers to the end of its answer, so a request that keeps the server busy past it (here a body
// trickling in slower than the write timeout but within the read timeout) gets its connection
// closed instead of an answer, and holds no connection longer than that.
func TestAnswersPastTheWriteTimeoutAreCut(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "api", func(c *Config) {
		c.HTTPReadTimeout = 10 * time.Second
		c.HTTPWriteTimeout = 300 * time.Millisecond
	})
	answer := func(trickle time.Duration) (*http.Response, error) {
		conn, err := net.Dial("tcp", b.app.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// An accept the API refuses (the body is not an object): nothing is recorded either way.
		body := "[0,0,0]"
		fmt.Fprintf(conn, "POST /v1/deliveries HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer acme-key\r\n"+
			"Idempotency-Key: slow-answer\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		for i := range len(body) {
			time.Sleep(trickle)
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				break
			}
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		return http.ReadResponse(bufio.NewReader(conn), nil)
	}
	// Within the write timeout the refusal is answered.
	if resp, err := answer(0); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a prompt request: %v %v, want 400", resp, err)
	}
	// 7 bytes 100 ms apart: the answer is due 700 ms after the headers, past the write timeout.
	if resp, err := answer(100 * time.Millisecond); err == nil {
		t.Fatalf("an answer due after the write timeout was written: %d", resp.StatusCode)
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server neither answered nor closed the connection: %v", err)
	}
}

// TestReadinessReusesOneBrokerConnection: readiness checks share one kept connection to the
// broker instead of a login each.
func TestReadinessReusesOneBrokerConnection(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	broker, err := url.Parse(amqptest.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := pgtest.NewProxyTo(t, broker.Host)
	cfg := testConfig(t, schema)
	cfg.Roles = "api"
	cfg.AMQPURL = proxy.Rewrite(amqptest.URL())
	b := startApp(t, schema, cfg)
	before := proxy.Accepted()
	for i := range 50 {
		resp, _ := b.do(t, "GET", "/readyz", "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("readyz %d: %d", i, resp.StatusCode)
		}
	}
	if logins := proxy.Accepted() - before; logins > 1 {
		t.Fatalf("50 readiness checks opened %d broker connections, want at most 1", logins)
	}
	// A broker that goes away makes the check fail (once the client library has seen its
	// connection close, which is asynchronous: poll); once it is back, it passes again.
	proxy.Cut()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := b.do(t, "GET", "/readyz", "", nil)
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz with the broker cut: %d after 5 s, want 503", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	proxy.Restore()
	deadline = time.Now().Add(10 * time.Second)
	for {
		resp, _ := b.do(t, "GET", "/readyz", "", nil)
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz still %d after the broker came back", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMetricsAreApartFromTheAPI: /metrics is served on its own listener, not to whoever can reach
// the API, and by roles without the API too.
func TestMetricsAreApartFromTheAPI(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "api")
	if resp, _ := b.do(t, "GET", "/metrics", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/metrics on the API listener: %d, want 404", resp.StatusCode)
	}
	if !strings.Contains(b.metricsText(t), "go_goroutines") {
		t.Fatal("the metrics listener serves no metrics")
	}
	projector := setupE2E(t, "projector")
	if projector.app.Addr() != "" || !strings.Contains(projector.metricsText(t), "go_goroutines") {
		t.Fatal("a process without the api role serves no metrics")
	}
}

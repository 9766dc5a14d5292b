package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAcceptOneSpeaksHTTP runs the load generator's client against net/http's server: the
// request is a well-formed accept, and answers with a length, chunked or closing the connection
// are all read.
func TestAcceptOneSpeaksHTTP(t *testing.T) {
	t.Parallel()
	var dialled atomic.Int64
	var mu sync.Mutex
	keys := map[string]bool{}
	mode := "length"
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/deliveries" {
			t.Errorf("request %s %s, want POST /v1/deliveries", r.Method, r.URL.Path)
		}
		if r.Header.Get("Authorization") != "Bearer bench-key" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers %v", r.Header)
		}
		var body struct {
			Channel   string          `json:"channel"`
			Recipient string          `json:"recipient"`
			Payload   json.RawMessage `json:"payload"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Channel != "webhook" || body.Recipient != "http://sink/hook" {
			t.Errorf("body %+v, %v", body, err)
		}
		mu.Lock()
		key := r.Header.Get("Idempotency-Key")
		if key == "" || keys[key] {
			t.Errorf("Idempotency-Key %q is empty or repeated", key)
		}
		keys[key] = true
		m := mode
		mu.Unlock()
		id := fmt.Sprintf(`{"id":"d-%d","state":"accepted"}`, len(keys))
		switch m {
		case "chunked":
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, id[:5])
			w.(http.Flusher).Flush() // the rest goes out as a second chunk
			_, _ = io.WriteString(w, id[5:])
		case "close":
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, id)
		case "refuse":
			http.Error(w, `{"title":"no"}`, http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, id)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	n := 0
	for _, m := range []string{"length", "length", "chunked", "chunked", "close", "length", "refuse"} {
		mu.Lock()
		mode = m
		mu.Unlock()
		id, err := acceptOne(srv.URL, "http://sink/hook")
		if m == "refuse" {
			if err == nil || !strings.Contains(err.Error(), "400") {
				t.Errorf("refused accept: err = %v, want the 400 reported", err)
			}
			continue
		}
		n++
		if want := fmt.Sprintf("d-%d", n); err != nil || id != want {
			t.Fatalf("%s answer: id %q, err %v; want %s", m, id, err, want)
		}
	}
	// One connection until the server closed it, then a second one.
	if got := dialled.Load(); got != 2 {
		t.Errorf("%d connections for 7 sequential requests with one close, want 2", got)
	}
}

// TestAcceptOneSendsAgainOnAStaleConnection: a kept-alive connection the server closed while it
// was idle (with a FIN), or reset as the next request arrived, costs a new connection, not a
// failed request.
func TestAcceptOneSendsAgainOnAStaleConnection(t *testing.T) {
	t.Parallel()
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			t.Parallel()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			var conns atomic.Int64
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					n := conns.Add(1)
					// Answer one request as if the connection stayed open, then drop it.
					if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
						body := fmt.Sprintf(`{"id":"d-%d"}`, n)
						fmt.Fprintf(c, "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
					}
					if reset {
						// Wait for the next request to arrive, then reset the connection
						// without answering it: the client reads a reset, not an end.
						_, _ = c.Read(make([]byte, 1))
						_ = c.(*net.TCPConn).SetLinger(0)
					}
					c.Close()
				}
			}()
			base := "http://" + l.Addr().String()
			for want := 1; want <= 2; want++ {
				id, err := acceptOne(base, "http://sink/hook")
				if err != nil {
					t.Fatalf("request %d: %v", want, err)
				}
				// The second request finds the first connection dead and goes out on a second one.
				if wantID := fmt.Sprintf("d-%d", want); id != wantID {
					t.Errorf("request %d answered %q on connection %d, want %s", want, id, conns.Load(), wantID)
				}
			}
		})
	}
}

// TestAcceptOneGoesThroughEveryStaleIdleConnection: after a pause every idle connection may have
// been closed by the server (the schedule phase's projection leaves the fill's connections idle
// for minutes): a request tries them in turn and then a new one, and does not fail.
func TestAcceptOneGoesThroughEveryStaleIdleConnection(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	const stale = 4
	var conns, closed atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// The first connections are the idle ones, closed by the server; the next answers.
			if conns.Add(1) > stale {
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					fmt.Fprintf(c, "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"id\":\"ok\"}")
				}
			}
			c.Close()
			closed.Add(1)
		}
	}()
	base := "http://" + l.Addr().String()
	pool, err := poolFor(base)
	if err != nil {
		t.Fatal(err)
	}
	var idle []*benchConn
	for range stale {
		c, _, err := pool.get()
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	for _, c := range idle {
		pool.put(c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for closed.Load() < stale && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	id, err := acceptOne(base, "http://sink/hook")
	if err != nil || id != "ok" {
		t.Fatalf("accept after %d stale idle connections: %q, %v", stale, id, err)
	}
}

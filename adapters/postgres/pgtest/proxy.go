package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP relay in front of a real service (the database, or with NewProxyTo the broker)
// that a test can cut and restore, to show what the ledger does while the service is
// unreachable. It is a network fault, not a fake: every byte goes to the real service.
type Proxy struct {
	target   string
	listener net.Listener
	addr     string

	mu       sync.Mutex
	cut      bool
	conns    map[net.Conn]struct{}
	accepted int
}

// NewProxy starts a proxy to the test database's host and returns it; it stops with the test.
func NewProxy(t testing.TB) *Proxy {
	t.Helper()
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatal(err)
	}
	return NewProxyTo(t, u.Host)
}

// NewProxyTo starts a proxy to target (host:port); it stops with the test.
func NewProxyTo(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: target, listener: l, addr: l.Addr().String(), conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.Cut()
	})
	return p
}

// Rewrite returns rawURL with its host replaced by the proxy's address.
func (p *Proxy) Rewrite(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	u.Host = p.addr
	return u.String()
}

func (p *Proxy) serve() {
	for {
		c, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.accepted++
		p.mu.Unlock()
		go p.pipe(c)
	}
}

func (p *Proxy) pipe(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends when either side closes, or on Cut
		done <- struct{}{}
	}
	go cp(server, client)
	go cp(client, server)
	<-done
	client.Close()
	server.Close()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// Accepted returns how many connections the proxy has relayed (a broker's logins, say).
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Cut drops every connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

package amqp

import (
	"context"
	"errors"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// probeDialTimeout bounds the connection attempt of a readiness check.
const probeDialTimeout = 2 * time.Second

// probeRedial is the shortest time between two connection attempts of a Probe: an orchestrator
// that checks readiness often, against a broker that is down, costs a dial a second at most.
const probeRedial = time.Second

// Probe tells whether the broker can be reached, keeping one connection open between checks:
// a readiness probe every few seconds from every orchestrator would otherwise be a broker login
// each (and a log line in the broker's). A connection the broker closed is noticed at the next
// check, which dials again.
type Probe struct {
	url string

	mu       sync.Mutex
	conn     *amqp091.Connection
	lastDial time.Time
	lastErr  error
}

// NewProbe returns a probe of the broker at url; it connects on its first check.
func NewProbe(url string) *Probe { return &Probe{url: url} }

// Check reports whether the broker is reachable now.
func (p *Probe) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	if p.lastErr != nil && time.Since(p.lastDial) < probeRedial {
		return p.lastErr
	}
	p.lastDial = time.Now()
	conn, err := DialConfig(p.url, amqp091.Config{Dial: amqp091.DefaultDial(probeDialTimeout)})
	if err != nil {
		p.conn, p.lastErr = nil, err
		return err
	}
	p.conn, p.lastErr = conn, nil
	return nil
}

// Close closes the probe's connection.
func (p *Probe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close()
	p.conn = nil
	if errors.Is(err, amqp091.ErrClosed) {
		return nil
	}
	return err
}

package app

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/metrics"
)

// acceptPaceInterval is how often the accept pacing reads the work queues' depth.
const acceptPaceInterval = 250 * time.Millisecond

// acceptPacer holds accepts back while the work queues hold more than backlog messages
// (--accept-pace-backlog). An accept commits as fast as the database allows, a delivery costs
// several times its CPU, and so callers that wait for their 202 and send again (a closed loop)
// outrun the workers on a machine they share and grow the queue without bound: 64 such clients
// here grew it by about 100 a second and their deliveries' p50 to a second. The pacer makes an
// accept wait before its commit, in proportion to how far the queue is above the bound (maxWait
// at twice the bound), so such callers slow to the delivery rate and the queue stays near the
// bound. It never refuses: a caller that does not wait for its answer sees a slower 202, and an
// accept made while the depth is unknown (the broker unreachable: what the outbox is for) does
// not wait.
type acceptPacer struct {
	backlog int64
	maxWait time.Duration
	metrics *metrics.Metrics
	waiting atomic.Int64 // messages waiting at the last read; -1: unknown
}

func newAcceptPacer(backlog int, maxWait time.Duration, m *metrics.Metrics) *acceptPacer {
	p := &acceptPacer{backlog: int64(backlog), maxWait: maxWait, metrics: m}
	p.waiting.Store(-1)
	return p
}

// delay is the wait for waiting messages.
func (p *acceptPacer) delay(waiting int64) time.Duration {
	if waiting <= p.backlog || p.backlog <= 0 {
		return 0
	}
	over := min(waiting-p.backlog, p.backlog)
	return time.Duration(float64(p.maxWait) * float64(over) / float64(p.backlog))
}

// wait holds an accept for the current depth's delay, or until ctx ends.
func (p *acceptPacer) wait(ctx context.Context) {
	d := p.delay(p.waiting.Load())
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	p.metrics.AcceptPaced(d)
}

// watch keeps the depth current from the broker until ctx ends.
func (p *acceptPacer) watch(ctx context.Context, url string, queues []string) error {
	amqp.WatchWaiting(ctx, url, queues, acceptPaceInterval, func(n int, ok bool) {
		if !ok {
			n = -1
		}
		p.waiting.Store(int64(n))
	})
	return nil
}

// paceAccept builds the pacer when --accept-pace-backlog asks for one, and returns its wait
// for the API (nil: accepts are not paced).
func (a *App) paceAccept() func(context.Context) {
	if a.cfg.AcceptPaceBacklog <= 0 {
		return nil
	}
	a.pacer = newAcceptPacer(a.cfg.AcceptPaceBacklog, a.cfg.AcceptPaceMaxWait, a.metrics)
	return a.pacer.wait
}

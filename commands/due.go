package commands

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// DueRow is a delivery's latest due time as the ledger keeps it: what it is for, when, and the
// version of the event that set it.
type DueRow struct {
	DeliveryID string
	Tenant     string
	Kind       domain.DueKind
	At         time.Time
	Version    int
	// History is the delivery's stream, when the store read it with the row (with a batch of
	// rows, one query for all their streams instead of one a row); nil leaves it to the step.
	History []domain.Event
}

// DueStep decides what a due row calls for: the events to append and the messages to publish
// with them. Returning neither just retires the row.
type DueStep func(ctx context.Context, row DueRow) ([]domain.Event, []OutboxMessage, error)

// DueStore hands out due rows. postgres.DueStore implements it.
type DueStore interface {
	// TakeDue hands out up to limit rows, earliest first: sends due by sendBy, retries and
	// deferrals due by resendBy. Each is locked while step decides, so that several passes at
	// once never hand out one row twice, and what step returns commits with the row's removal
	// in one transaction, which may hold other rows too (the row stays if that fails). A retry
	// or deferral row whose delivery has recorded an event since may be retired without step.
	// It returns how many rows it handled, and the failures of the rows it had to leave.
	TakeDue(ctx context.Context, sendBy, resendBy time.Time, limit int, step DueStep) (int, error)
}

// DefaultDueGrace is how long after a retry's or a deferral's due time the due pass waits for
// the broker's delayed copy before it sends one of its own: a minute covers the rounding of a
// delay up to its tier for the short tiers, and a copy too many is harmless (domain.CopyOf).
const DefaultDueGrace = time.Minute

// DefaultDueInterval is how often the due pass looks for rows that fell due: the bound on how
// late after its send_at a scheduled delivery is queued.
const DefaultDueInterval = 250 * time.Millisecond

// DefaultDueTakers is how many rounds the pass runs at once on a backlog. One taker kept up with
// 2,000 sends a second falling due on a quiet machine but fell seconds behind when the machine
// was busy (docs/benchmarks.md, "Scheduled sends at scale"): each of its transactions waits on
// several round trips and a flush, one after the other.
const DefaultDueTakers = 4

// dueBatch is the most rows one round hands out before it looks again.
const dueBatch = 200

// DuePass is the durable half of the ledger's time: the due rows in PostgreSQL are the record
// of when work is due, RabbitMQ's delay tiers only its fast path. At each round it queues the
// scheduled deliveries whose send_at has come (scheduled → queued, the work message through the
// outbox), and sends a new copy of the work of a retry or a deferral whose delayed message is
// overdue by Grace with the delivery unmoved since (the broker lost it, or its queues were
// deleted). The relay role runs it; several processes share it (FOR UPDATE SKIP LOCKED).
type DuePass struct {
	// Grace is how long a retry or deferral may be overdue before the pass resends it; zero
	// means DefaultDueGrace.
	Grace time.Duration
	// Interval is the time between rounds; zero means DefaultDueInterval.
	Interval time.Duration
	// Takers is how many rounds run at once while a round finds a full batch (a backlog): each
	// round's commit waits on its flush, so one taker alone is bound by round trips, not by the
	// database's capacity. Zero means DefaultDueTakers.
	Takers int

	due    DueStore
	store  EventStore
	topics Topics
	clock  Clock
	logger *slog.Logger
}

// NewDuePass builds the pass.
func NewDuePass(due DueStore, store EventStore, topics Topics, clock Clock, logger *slog.Logger) *DuePass {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &DuePass{due: due, store: store, topics: topics, clock: clock, logger: logger}
}

// Run runs a round every Interval until ctx ends.
func (p *DuePass) Run(ctx context.Context) error {
	interval := p.Interval
	if interval <= 0 {
		interval = DefaultDueInterval
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		// A round that found a full batch goes on at once, at most a few times, so a burst of
		// sends due at one instant is not spread over many intervals; with a backlog, several
		// takers share it (FOR UPDATE SKIP LOCKED hands each row to one of them).
		if n := p.Round(ctx); n >= dueBatch {
			p.drain(ctx)
		}
	}
}

// drain runs Takers rounds at once, each going on while it finds full batches (at most ten
// rounds each), and waits for them.
func (p *DuePass) drain(ctx context.Context) {
	takers := p.Takers
	if takers <= 0 {
		takers = DefaultDueTakers
	}
	var wg sync.WaitGroup
	for range takers {
		wg.Go(func() {
			for range 10 {
				if n := p.Round(ctx); n < dueBatch || ctx.Err() != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}

// Round hands out what is due now and returns how many rows it handled.
func (p *DuePass) Round(ctx context.Context) int {
	grace := p.Grace
	if grace <= 0 {
		grace = DefaultDueGrace
	}
	now := p.clock.Now()
	n, err := p.due.TakeDue(ctx, now, now.Add(-grace), dueBatch, p.step)
	if err != nil && ctx.Err() == nil {
		p.logger.Warn("due pass", "err", err)
	}
	return n
}

// step decides one due row on the delivery's history.
func (p *DuePass) step(ctx context.Context, row DueRow) ([]domain.Event, []OutboxMessage, error) {
	events := row.History
	if events == nil {
		var err error
		events, err = p.store.Load(ctx, row.DeliveryID)
		if errors.Is(err, ErrNotFound) {
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
	}
	d, err := domain.Rehydrate(events)
	if err != nil {
		return nil, nil, err
	}
	now := p.clock.Now()
	if row.Kind == domain.DueSend {
		if d.State() != domain.StateScheduled {
			return nil, nil, nil // cancelled meanwhile, or released by another pass
		}
		queued, err := d.Release(now)
		if err != nil {
			return nil, nil, err
		}
		msg, err := workMessageFor(tracing.Continue(ctx, d.Trace()), d, p.topics.Work(d.Channel(), d.Priority()),
			d.Attempt(), now, queued[0].Key, false)
		if err != nil {
			return nil, nil, err
		}
		return queued, []OutboxMessage{msg}, nil
	}
	if d.Version() != row.Version {
		return nil, nil, nil // the delayed copy came back, or the delivery moved on otherwise
	}
	msg, ok, err := resendMessage(ctx, p.topics, d, now, "due")
	if err != nil || !ok {
		return nil, nil, err
	}
	p.logger.WarnContext(ctx, "due pass: the delayed work of a delivery is overdue, sending it again",
		"delivery_id", d.ID(), "kind", string(row.Kind), "due_at", row.At, "attempt", d.Attempt())
	return nil, []OutboxMessage{msg}, nil
}

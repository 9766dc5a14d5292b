package commands

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// BatchEventStore reads and writes many streams at once.
type BatchEventStore interface {
	// LoadMany returns several streams, keyed by delivery id.
	LoadMany(ctx context.Context, ids []string) (map[string][]domain.Event, error)
	// AppendEach writes independent events in one transaction, skipping any whose version or
	// idempotency key is taken or whose previous version is missing; it returns how many were
	// written.
	AppendEach(ctx context.Context, events []domain.Event) (int, error)
}

// QueuedMark says that the broker confirmed the message of a delivery's attempt.
type QueuedMark struct {
	DeliveryID string
	// Tenant is the delivery's tenant (from the message); it lets attempt 1 be recorded without
	// loading the stream (domain.FirstQueued).
	Tenant  string
	Attempt int
	// Trace is the message's traceparent ("" untraced), so that what is logged about the mark
	// meets the delivery's trace.
	Trace string
}

// QueuedRecorder records the queued transitions the relay reports, many per transaction. The
// relay must not wait for a transaction per message (that caps it at the database's commit
// rate); recording late is safe, because a worker that takes the message first records the same
// transition under the same key, and one that is skipped here for a conflict was recorded or
// overtaken by someone else.
type QueuedRecorder struct {
	store    BatchEventStore
	clock    Clock
	logger   *slog.Logger
	marks    chan QueuedMark
	maxBatch int
	linger   time.Duration
}

// NewQueuedRecorder builds the recorder; Run starts it.
func NewQueuedRecorder(store BatchEventStore, clock Clock, logger *slog.Logger) *QueuedRecorder {
	return &QueuedRecorder{store: store, clock: clock, logger: logger, marks: make(chan QueuedMark, 4096), maxBatch: 500, linger: 10 * time.Millisecond}
}

// Mark queues a transition for recording; it blocks only when the recorder is far behind.
func (r *QueuedRecorder) Mark(ctx context.Context, m QueuedMark) error {
	select {
	case r.marks <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Confirmed is told of every message the broker confirmed, with the body and metadata it was
// written to the outbox with. A message that asks for its queued transition (MetaMarkQueued:
// the first attempt of a delivery) is marked; others are not.
func (r *QueuedRecorder) Confirmed(ctx context.Context, body []byte, metadata map[string]string) error {
	if metadata[MetaMarkQueued] != "true" {
		return nil
	}
	work, err := DecodeWorkMessage(body)
	if err != nil {
		r.logger.ErrorContext(tracing.Extract(ctx, metadata), "relay: undecodable work message, not recording queued", "err", err)
		return nil
	}
	return r.Mark(ctx, QueuedMark{DeliveryID: work.DeliveryID, Tenant: work.Tenant, Attempt: work.Attempt,
		Trace: metadata[tracing.MetaTraceparent]})
}

// Run records marks until ctx ends, then records what is left.
func (r *QueuedRecorder) Run(ctx context.Context) error {
	for {
		var batch []QueuedMark
		select {
		case m := <-r.marks:
			batch = append(batch, m)
		case <-ctx.Done():
			r.flushRemaining()
			return nil
		}
		timer := time.NewTimer(r.linger)
	collect:
		for len(batch) < r.maxBatch {
			select {
			case m := <-r.marks:
				batch = append(batch, m)
			case <-timer.C:
				break collect
			}
		}
		timer.Stop()
		if err := r.Record(ctx, batch); err != nil {
			// The workers record these transitions when they take the messages.
			r.logger.Warn("recording queued transitions failed; workers will record them", "count", len(batch), "err", err)
		}
	}
}

func (r *QueuedRecorder) flushRemaining() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		var batch []QueuedMark
	drain:
		for len(batch) < r.maxBatch {
			select {
			case m := <-r.marks:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		if len(batch) == 0 {
			return
		}
		if err := r.Record(ctx, batch); err != nil {
			r.logger.Warn("recording queued transitions at shutdown failed", "count", len(batch), "err", err)
			return
		}
	}
}

// Record appends EventQueued for every mark whose delivery still waits for that attempt.
//
// Attempt 1, the common case (every accept), needs no read: accepted leads only to queued, so
// its queued event is version 2 (domain.FirstQueued), and AppendEach skips it if version 2 is
// taken, by a worker that recorded it first or moved the delivery further (or if there is no
// version 1: a mark of no delivery). Other attempts are
// decided on the loaded stream.
func (r *QueuedRecorder) Record(ctx context.Context, marks []QueuedMark) error {
	now := r.clock.Now()
	var events []domain.Event
	var load []QueuedMark // the first mark of each delivery that needs its stream
	seen := map[string]bool{}
	for _, m := range marks {
		if seen[m.DeliveryID] {
			continue
		}
		seen[m.DeliveryID] = true
		if m.Attempt == 1 && m.Tenant != "" {
			events = append(events, domain.FirstQueued(m.DeliveryID, m.Tenant, now))
			continue
		}
		load = append(load, m)
	}
	if len(load) > 0 {
		ids := make([]string, len(load))
		for i, m := range load {
			ids[i] = m.DeliveryID
		}
		streams, err := r.store.LoadMany(ctx, ids)
		if err != nil {
			return err
		}
		for _, m := range load {
			stream, ok := streams[m.DeliveryID]
			if !ok {
				continue
			}
			d, err := domain.Rehydrate(stream)
			if err != nil {
				r.logger.ErrorContext(tracing.WithParent(ctx, m.Trace), "cannot fold delivery", "delivery_id", m.DeliveryID, "err", err)
				continue
			}
			if !d.AwaitsQueue(m.Attempt) {
				continue
			}
			queued, err := d.Queue(now)
			if err != nil {
				return fmt.Errorf("queue %s: %w", m.DeliveryID, err)
			}
			events = append(events, queued...)
		}
	}
	if len(events) == 0 {
		return nil
	}
	_, err := r.store.AppendEach(ctx, events)
	return err
}

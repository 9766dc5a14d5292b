package commands

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// RedriveHandler sends the work message of a delivery again when the ledger says it waits for
// the broker but nothing has happened to it for a long time. RabbitMQ moves messages out of a
// delay tier (TTL dead-lettering) at most once: a broker stopped at that moment can lose them,
// and nothing else would ever move such a delivery again. A redriven copy of a message that was
// not lost is harmless: workers skip an attempt another copy has started or closed.
type RedriveHandler struct {
	store  EventStore
	topics Topics
	clock  Clock
}

// NewRedriveHandler builds the command.
func NewRedriveHandler(store EventStore, topics Topics, clock Clock) *RedriveHandler {
	return &RedriveHandler{store: store, topics: topics, clock: clock}
}

// Handle redrives the delivery if, by its own history, it has waited for a worker since before
// olderThan. It reports whether it did. Nothing is appended to the history: the ledger's state
// was true all along, only the broker's copy of the work is renewed.
func (h *RedriveHandler) Handle(ctx context.Context, deliveryID string, olderThan time.Time) (bool, error) {
	_, ok, err := h.handle(ctx, deliveryID, olderThan)
	return ok, err
}

// handle is Handle, and returns the context of the redrive's span (ctx itself when there is
// none) for what is logged about it.
func (h *RedriveHandler) handle(ctx context.Context, deliveryID string, olderThan time.Time) (context.Context, bool, error) {
	events, err := h.store.Load(ctx, deliveryID)
	if errors.Is(err, ErrNotFound) {
		return ctx, false, nil
	}
	if err != nil {
		return ctx, false, err
	}
	d, err := domain.Rehydrate(events)
	if err != nil {
		return ctx, false, err
	}
	now := h.clock.Now()
	waitingSince := d.UpdatedAt()
	if due := d.NextAttemptAt(); due != nil && due.After(waitingSince) {
		waitingSince = *due
	}
	attempt, _, waits := resendTarget(d)
	if !waits || !waitingSince.Before(olderThan) {
		return ctx, false, nil
	}
	// The redrive is a later hop of the delivery's trace: a span under its root, which the
	// redriven message's consume links to.
	ctx, span := h.span(ctx, d, attempt)
	defer span.End()
	msg, _, err := resendMessage(ctx, h.topics, d, now, "redrive")
	if err != nil {
		tracing.Fail(span, err)
		return ctx, false, err
	}
	if err := h.store.Append(ctx, nil, []OutboxMessage{msg}); err != nil {
		err = fmt.Errorf("redrive %s: %w", deliveryID, err)
		tracing.Fail(span, err)
		return ctx, false, err
	}
	return ctx, true, nil
}

// resendTarget names the attempt whose work message d waits for, and whether the relay must
// record it queued once the broker has it; waits is false when d waits for no worker.
func resendTarget(d *domain.Delivery) (attempt int, markQueued, waits bool) {
	switch d.State() {
	case domain.StateAccepted:
		return 1, true, true
	case domain.StateQueued:
		return d.Attempt(), false, true
	case domain.StateRetrying:
		return d.Attempt() + 1, false, true
	}
	return 0, false, false
}

// resendMessage builds a new copy of the work message d waits for, under a key of its own
// (why/attempt/now), for the redrive and the due pass: a copy of a message that was not lost is
// harmless, since workers skip an attempt another copy has started or closed (domain.CopyOf).
// ok is false when d waits for no worker.
func resendMessage(ctx context.Context, topics Topics, d *domain.Delivery, now time.Time, why string) (OutboxMessage, bool, error) {
	attempt, markQueued, waits := resendTarget(d)
	if !waits {
		return OutboxMessage{}, false, nil
	}
	key := fmt.Sprintf("%s/%s/%d/%s", d.ID(), why, attempt, strconv.FormatInt(now.UnixNano(), 36))
	msg, err := workMessageFor(tracing.Continue(ctx, d.Trace()), d, topics.Work(d.Channel(), d.Priority()), attempt, now, key, markQueued)
	if err != nil {
		return OutboxMessage{}, false, err
	}
	msg.ID = uuid.NewSHA1(messageNamespace, []byte(key)).String()
	return msg, true, nil
}

// span starts the redrive's span ("redrive <channel>") under the root of d's trace.
func (h *RedriveHandler) span(ctx context.Context, d *domain.Delivery, attempt int) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return ctx, tracing.NoSpan
	}
	return tracing.StartHop(ctx, d.Trace(), "redrive "+d.Channel(), trace.WithAttributes(tracing.DeliveryID.String(d.ID()),
		tracing.Channel.String(d.Channel()), tracing.Attempt.Int(attempt)))
}

// StaleLister lists the deliveries a view says have waited for a worker since before olderThan,
// oldest first: candidates for a redrive, which checks each against its own history.
// postgres.Views implements it.
type StaleLister interface {
	StaleDeliveries(ctx context.Context, olderThan time.Time, limit int) ([]string, error)
}

// Redriver looks for deliveries that wait with no progress for longer than After and redrives
// them (RedriveHandler), each at most once per After, so a delivery whose message was lost is
// sent again and one whose message merely waits long is not flooded with copies.
type Redriver struct {
	handler *RedriveHandler
	stale   StaleLister
	after   time.Duration
	logger  *slog.Logger
	// last is when each delivery was redriven, for the once-per-After rule.
	last map[string]time.Time
}

// redriveBatch is the most candidates one round looks at.
const redriveBatch = 500

// NewRedriver builds the scheduler; after must be positive.
func NewRedriver(handler *RedriveHandler, stale StaleLister, after time.Duration, logger *slog.Logger) *Redriver {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Redriver{handler: handler, stale: stale, after: after, logger: logger, last: map[string]time.Time{}}
}

// Run redrives every quarter of After (at least every 100 ms) until ctx ends.
func (r *Redriver) Run(ctx context.Context) error {
	ticker := time.NewTicker(max(r.after/4, 100*time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		r.Round(ctx, time.Now())
	}
}

// Round looks once for deliveries that have waited since before now - After and redrives them;
// it returns how many it redrove.
func (r *Redriver) Round(ctx context.Context, now time.Time) int {
	for id, at := range r.last {
		if now.Sub(at) > r.after {
			delete(r.last, id)
		}
	}
	olderThan := now.Add(-r.after)
	ids, err := r.stale.StaleDeliveries(ctx, olderThan, redriveBatch)
	if err != nil {
		if ctx.Err() == nil {
			r.logger.Warn("redrive: list stale deliveries", "err", err)
		}
		return 0
	}
	sent := 0
	for _, id := range ids {
		if _, recent := r.last[id]; recent {
			continue
		}
		hctx, ok, err := r.handler.handle(ctx, id, olderThan)
		if err != nil {
			r.logger.WarnContext(hctx, "redrive failed", "delivery_id", id, "err", err)
			continue
		}
		if ok {
			r.logger.DebugContext(hctx, "redrove delivery", "delivery_id", id)
		}
		if ok {
			r.last[id] = now
			sent++
		}
	}
	if sent > 0 {
		r.logger.Warn("redrove deliveries that waited with no progress", "count", sent, "after", r.after)
	}
	return sent
}

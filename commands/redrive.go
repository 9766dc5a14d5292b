package commands

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/domain"
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
	events, err := h.store.Load(ctx, deliveryID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	d, err := domain.Rehydrate(events)
	if err != nil {
		return false, err
	}
	now := h.clock.Now()
	var attempt int
	var markQueued bool
	switch d.State() {
	case domain.StateAccepted:
		attempt, markQueued = 1, true
	case domain.StateQueued:
		attempt = d.Attempt()
	case domain.StateRetrying:
		attempt = d.Attempt() + 1
	default:
		return false, nil
	}
	waitingSince := d.UpdatedAt()
	if due := d.NextAttemptAt(); due != nil && due.After(waitingSince) {
		waitingSince = *due
	}
	if !waitingSince.Before(olderThan) {
		return false, nil
	}
	key := fmt.Sprintf("%s/redrive/%d/%s", deliveryID, attempt, strconv.FormatInt(now.UnixNano(), 36))
	msg, err := workMessageFor(d, h.topics.Work(d.Channel(), d.Priority()), attempt, now, key, markQueued)
	if err != nil {
		return false, err
	}
	msg.ID = uuid.NewSHA1(messageNamespace, []byte(key)).String()
	if err := h.store.Append(ctx, nil, []OutboxMessage{msg}); err != nil {
		return false, fmt.Errorf("redrive %s: %w", deliveryID, err)
	}
	return true, nil
}

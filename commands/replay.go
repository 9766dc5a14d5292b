package commands

import (
	"context"

	"github.com/deliveryledger/ledger/domain"
)

// Replay asks for a new attempt cycle of a dead delivery.
type Replay struct {
	Tenant     string
	DeliveryID string
	// Reason is recorded with the replay (who asked, why).
	Reason string
}

// ReplayHandler records replays.
type ReplayHandler struct {
	store  EventStore
	topics Topics
	clock  Clock
	// OnDecided, when set, is told the channel and decision ("replayed") of each recorded replay.
	OnDecided func(channel, decision string)
}

// NewReplayHandler builds the command.
func NewReplayHandler(store EventStore, topics Topics, clock Clock) *ReplayHandler {
	return &ReplayHandler{store: store, topics: topics, clock: clock}
}

// Handle replays the delivery and returns it as it is after the replay. A delivery that is not
// dead is refused with domain.ErrNotDead (and returned as it is), one of another tenant or none
// at all with ErrNotFound.
func (h *ReplayHandler) Handle(ctx context.Context, cmd Replay) (*domain.Delivery, error) {
	d, err := decideFor(ctx, h.store, cmd.Tenant, cmd.DeliveryID, func(d *domain.Delivery) (decision, error) {
		now := h.clock.Now()
		replayed, err := d.Replay(cmd.Reason, now)
		if err != nil {
			return decision{}, err
		}
		// The replayed event is the queued transition of the new cycle's first attempt: the
		// relay must not record another one for it.
		msg, err := workMessageFor(d, h.topics.Work(d.Channel(), d.Priority()), d.Attempt(), now, replayed[0].Key, false)
		if err != nil {
			return decision{}, err
		}
		return decision{events: replayed, outbox: []OutboxMessage{msg}}, nil
	})
	if err == nil && h.OnDecided != nil {
		h.OnDecided(d.Channel(), "replayed")
	}
	return d, err
}

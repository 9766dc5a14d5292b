package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// Replay asks for a new attempt cycle of a dead delivery.
type Replay struct {
	Tenant     string
	DeliveryID string
	// Reason and Actor are recorded with the replay (why, who asked).
	Reason string
	Actor  string
	// AllowUnknown replays a delivery whose outcome is unknown too (its provider may have acted:
	// the replay event says so); otherwise only a dead one is replayed.
	AllowUnknown bool
	// Of is the version at which the asker saw the delivery dead (a replay job's item): a replay
	// recorded after it refuses the ask with *domain.AlreadyReplayedError.
	// 0 takes the version the first load finds, so that a request that loses a race to another
	// replay is refused rather than replaying the cycle after it (the delivery may have died
	// again in the meantime).
	Of int
	// Job names the replay job that asks ("" for an operator's own replay).
	Job string
	// RequestKey, when set, is the operator's Idempotency-Key: a repeat of the request (same key,
	// same RequestHash) is answered with the first replay instead of replaying again, however
	// many times it is sent and whatever happened to the delivery since. The same key with
	// another RequestHash is ErrRequestMismatch.
	RequestKey  string
	RequestHash []byte
}

// replayAnswer is what a keyed replay stores: the delivery and the version the replay left it
// at, from which a repeat is answered.
type replayAnswer struct {
	DeliveryID string `json:"delivery_id"`
	Version    int    `json:"version"`
}

// ReplayHandler records replays.
type ReplayHandler struct {
	store  EventStore
	topics Topics
	clock  Clock
	// Requests keeps keyed replays (Replay.RequestKey); nil refuses a keyed replay.
	Requests RequestStore
	// OnDecided, when set, is told the channel and decision ("replayed") of each recorded replay.
	OnDecided func(channel, decision string)
	// Suppression, when set, refuses the replay of a delivery whose recipient is suppressed
	// (*ReplaySuppressedError): the new attempt would only end suppressed, for good, and the
	// delivery stays dead so that it can be replayed once the entry is removed.
	Suppression *SuppressionCheck
}

// ErrPayloadExpired refuses the replay of a delivery whose payload's body left after the
// retention's payloads period: there is nothing to send again.
var ErrPayloadExpired = errors.New("the payload of this delivery expired (retention.payloads): only its SHA-256 is kept, and a replay would have nothing to send")

// ReplaySuppressedError refuses a replay whose recipient is on the suppression list or opted out
// of the delivery's category.
type ReplaySuppressedError struct {
	Block domain.Block
}

func (e *ReplaySuppressedError) Error() string {
	if s := e.Block.Suppression; s != nil {
		return fmt.Sprintf("the recipient is on the suppression list (entry %s, %s%s): remove the entry to replay",
			s.ID, s.Source, map[bool]string{true: ": " + s.Reason, false: ""}[s.Reason != ""])
	}
	return fmt.Sprintf("the recipient opted out of the category %q: a replay would not be sent", e.Block.OptedOut)
}

// NewReplayHandler builds the command.
func NewReplayHandler(store EventStore, topics Topics, clock Clock) *ReplayHandler {
	return &ReplayHandler{store: store, topics: topics, clock: clock}
}

// Handle replays the delivery and returns it as it is after the replay (for a repeated keyed
// request: as the first replay left it). A delivery that is not dead is refused with
// domain.ErrNotDead, one replayed since the version asked of (cmd.Of, or the first load's) with
// *domain.AlreadyReplayedError (both returned as they are), one of another tenant or none at all
// with ErrNotFound.
func (h *ReplayHandler) Handle(ctx context.Context, cmd Replay) (*domain.Delivery, error) {
	if cmd.RequestKey != "" && h.Requests == nil {
		return nil, errors.New("replay: a keyed replay needs a request store")
	}
	var repeat *replayAnswer
	of := cmd.Of
	d, err := decideFor(ctx, h.store, cmd.Tenant, cmd.DeliveryID, func(d *domain.Delivery) (decision, error) {
		if cmd.RequestKey != "" {
			// Looked up on every try: a concurrent repeat that won the key is found here.
			stored, err := h.earlier(ctx, cmd)
			if err != nil || stored != nil {
				repeat = stored
				return decision{}, err
			}
		}
		if of == 0 {
			// Pinned at the first load: a retry after a conflict asks of the same cycle.
			of = d.Version()
		}
		if d.PayloadExpired() {
			return decision{}, ErrPayloadExpired
		}
		if d.State() == domain.StateDead || (cmd.AllowUnknown && d.State() == domain.StateUnknown) {
			blocks, err := h.Suppression.blocks(ctx, d.Tenant(), d.Category(), []RecipientRef{{Channel: d.Channel(), Recipient: d.RecipientKey()}})
			if err != nil {
				return decision{}, err
			}
			if blocks[0].Blocks() {
				return decision{}, &ReplaySuppressedError{Block: blocks[0]}
			}
		}
		now := h.clock.Now()
		replayed, err := d.ReplayAs(domain.ReplayAsk{Reason: cmd.Reason, Actor: cmd.Actor, Unknown: cmd.AllowUnknown,
			Of: of, Job: cmd.Job}, now)
		if err != nil {
			return decision{}, err
		}
		// The replayed event is the queued transition of the new cycle's first attempt: the
		// relay must not record another one for it.
		// Its message is a later hop of the delivery's trace, linked to the operator's request.
		msg, err := workMessageFor(tracing.Continue(ctx, d.Trace()), d, h.topics.Work(d.Channel(), d.Priority()), d.Attempt(), now, replayed[0].Key, false)
		if err != nil {
			return decision{}, err
		}
		dec := decision{events: replayed, outbox: []OutboxMessage{msg}}
		if cmd.RequestKey != "" {
			answer, err := json.Marshal(replayAnswer{DeliveryID: d.ID(), Version: d.Version()})
			if err != nil {
				return decision{}, err
			}
			dec.request = &StoredRequest{Tenant: cmd.Tenant, Key: cmd.RequestKey, Hash: cmd.RequestHash, Response: answer}
			dec.requests = h.Requests
		}
		return dec, nil
	})
	if err != nil {
		return d, err
	}
	if repeat != nil {
		return h.asOf(ctx, cmd.Tenant, *repeat)
	}
	if h.OnDecided != nil {
		h.OnDecided(d.Channel(), "replayed")
	}
	return d, nil
}

// earlier returns the answer of an earlier request under cmd's key, nil if there is none.
func (h *ReplayHandler) earlier(ctx context.Context, cmd Replay) (*replayAnswer, error) {
	stored, err := h.Requests.RequestGet(ctx, cmd.Tenant, cmd.RequestKey)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replay: read request %s: %w", cmd.RequestKey, err)
	}
	if string(stored.Hash) != string(cmd.RequestHash) {
		return nil, ErrRequestMismatch
	}
	var a replayAnswer
	if err := json.Unmarshal(stored.Response, &a); err != nil {
		return nil, fmt.Errorf("replay: decode request %s: %w", cmd.RequestKey, err)
	}
	return &a, nil
}

// asOf is the delivery of an earlier replay as that replay left it.
func (h *ReplayHandler) asOf(ctx context.Context, tenant string, a replayAnswer) (*domain.Delivery, error) {
	events, err := tenantStore{h.store, tenant}.Load(ctx, a.DeliveryID)
	if err != nil {
		return nil, err
	}
	if a.Version < 1 || a.Version > len(events) {
		return nil, fmt.Errorf("replay of %s: stored version %d of a stream of %d events", a.DeliveryID, a.Version, len(events))
	}
	return domain.Rehydrate(events[:a.Version])
}

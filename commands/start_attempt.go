package commands

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/deliveryledger/ledger/domain"
)

// StartAttempt is a worker's request to start the attempt its message carries.
type StartAttempt struct {
	Message WorkMessage
	// Redelivered is the broker's flag: this copy was handed to a consumer before and not acked
	// (the consumer died, or its connection dropped).
	Redelivered bool
	Provider    string
	// ProviderDeduplicates is true when the provider honours our idempotency key, so calling it
	// again for an attempt whose outcome is unknown cannot duplicate the notification.
	ProviderDeduplicates bool
	// NoStart: the worker may not call the provider now (a limit said no and the attempt could
	// not be deferred because it is not queued). Resolve what needs no call (a dead worker's
	// unknown, a duplicate to skip); an attempt that would start is answered StartNotNow and
	// nothing is recorded.
	NoStart bool
}

// StartDecision tells the worker what to do with its message.
type StartDecision string

const (
	// StartProceed: the attempt is recorded as started; call the provider.
	StartProceed StartDecision = "proceed"
	// StartSkip: the attempt was started or closed by another copy of the message, or the
	// delivery moved past it; ack without calling.
	StartSkip StartDecision = "skip"
	// StartRecordedUnknown: an earlier worker started this attempt and died mid-call; the
	// outcome is recorded as unknown, ack without calling.
	StartRecordedUnknown StartDecision = "recorded_unknown"
	// StartNotNow (only with NoStart): the attempt would start; nothing was recorded, give the
	// message back.
	StartNotNow StartDecision = "not_now"
	// StartSuppressed: the recipient was suppressed after the accept; the delivery is recorded
	// suppressed, ack without calling.
	StartSuppressed StartDecision = "suppressed"
)

// StartAttemptHandler records "attempt started" (state processing) under the key
// (delivery, attempt), recording the queued transition first if the relay has not yet.
type StartAttemptHandler struct {
	store EventStore
	clock Clock
	// topics and policies, when set, apply the channel's unknown policy to the outcome of a
	// worker that died mid-call (unknown: retry schedules the next attempt); without them that
	// outcome is held unknown.
	topics   Topics
	policies Policies
	// Suppression, when set, is probed before an attempt that would start: a recipient
	// suppressed since the accept ends the delivery suppressed instead of called.
	Suppression *SuppressionCheck
}

// NewStartAttemptHandler builds the command.
func NewStartAttemptHandler(store EventStore, clock Clock) *StartAttemptHandler {
	return &StartAttemptHandler{store: store, clock: clock}
}

// Handle decides whether the worker may call the provider, and records what it decided.
func (h *StartAttemptHandler) Handle(ctx context.Context, cmd StartAttempt) (StartDecision, *domain.Delivery, error) {
	id, attempt := cmd.Message.DeliveryID, cmd.Message.Attempt
	var answer StartDecision
	// The stream and the probe of its recipient in one round trip, when the store can; the
	// probe's answer holds for that read of the stream only (a retry after a conflict probes
	// again).
	known, preloaded, err := h.Suppression.preload(ctx, cmd.Message)
	if err != nil {
		return "", nil, fmt.Errorf("start attempt %d of %s: %w", attempt, id, err)
	}
	d, err := decide(ctx, h.store, id, known, fmt.Sprintf("start attempt %d of %s", attempt, id), func(d *domain.Delivery) (decision, error) {
		probed := preloaded
		if d != known {
			probed = nil
		}
		known = nil
		now := h.clock.Now()
		verdict := d.CopyOf(attempt, cmd.Redelivered, cmd.ProviderDeduplicates)
		if verdict == domain.CopyQueueAndStart || verdict == domain.CopyStart {
			if probed == nil {
				blocks, err := h.Suppression.blocks(ctx, d.Tenant(), d.Category(), []RecipientRef{{Channel: d.Channel(), Recipient: d.RecipientKey()}})
				if err != nil {
					return decision{}, err
				}
				probed = &blocks[0]
			}
			if probed.Blocks() {
				events, err := d.Suppress(*probed, now)
				if err != nil {
					return decision{}, err
				}
				answer = StartSuppressed
				return decision{events: events}, nil
			}
		}
		if cmd.NoStart && verdict.Calls() {
			answer = StartNotNow
			return decision{}, nil
		}
		switch verdict {
		case domain.CopyQueueAndStart:
			queued, err := d.Queue(now)
			if err != nil {
				return decision{}, err
			}
			started, err := d.StartAttempt(cmd.Provider, now)
			if err != nil {
				return decision{}, err
			}
			answer = StartProceed
			return decision{events: append(queued, started...)}, nil
		case domain.CopyStart:
			started, err := d.StartAttempt(cmd.Provider, now)
			answer = StartProceed
			return decision{events: started}, err
		case domain.CopyCallAgain:
			answer = StartProceed
			return decision{}, nil
		case domain.CopyRecordUnknown:
			policy := domain.RetryPolicy{}
			if h.policies != nil && h.topics != nil {
				policy = h.policies(d.Channel())
			}
			provider := d.Calling() // the provider the dead worker called, failovers included
			if provider == "" {
				provider = cmd.Provider
			}
			unknown, err := d.RecordOutcome(attempt, domain.Outcome{
				Kind:     domain.OutcomeUnknown,
				Provider: provider,
				Err:      "worker stopped during the attempt; the provider may have received it",
			}, policy, now, rand.Float64())
			if err != nil {
				return decision{}, err
			}
			answer = StartRecordedUnknown
			var outbox []OutboxMessage
			if h.topics != nil {
				if outbox, err = followUp(ctx, h.topics, d, unknown[0].Key, now); err != nil {
					return decision{}, err
				}
			}
			// A taken key: another redelivered copy recorded the same unknown outcome.
			return decision{events: unknown, outbox: outbox, duplicateIsDone: true}, nil
		default:
			answer = StartSkip
			return decision{}, nil
		}
	})
	if err != nil {
		return "", nil, err
	}
	if answer == StartSuppressed && d.Suppression() != nil {
		h.Suppression.counted(d.Channel(), d.Suppression().By)
	}
	return answer, d, nil
}

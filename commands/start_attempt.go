package commands

import (
	"context"
	"errors"
	"fmt"

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
)

// StartAttemptHandler records "attempt started" (state processing) under the key
// (delivery, attempt), recording the queued transition first if the relay has not yet.
type StartAttemptHandler struct {
	store EventStore
	clock Clock
}

// NewStartAttemptHandler builds the command.
func NewStartAttemptHandler(store EventStore, clock Clock) *StartAttemptHandler {
	return &StartAttemptHandler{store: store, clock: clock}
}

// Handle decides whether the worker may call the provider, and records what it decided.
func (h *StartAttemptHandler) Handle(ctx context.Context, cmd StartAttempt) (StartDecision, *domain.Delivery, error) {
	id, attempt := cmd.Message.DeliveryID, cmd.Message.Attempt
	for range maxConflictRetries {
		events, err := h.store.Load(ctx, id)
		if err != nil {
			return "", nil, fmt.Errorf("start attempt %d of %s: %w", attempt, id, err)
		}
		d, err := domain.Rehydrate(events)
		if err != nil {
			return "", nil, err
		}
		now := h.clock.Now()
		var toAppend []domain.Event
		wouldStart := awaitsQueue(d, attempt) || (d.Attempt() == attempt && d.State() == domain.StateQueued) ||
			(d.Attempt() == attempt && d.State() == domain.StateProcessing && cmd.Redelivered && cmd.ProviderDeduplicates)
		if cmd.NoStart && wouldStart {
			return StartNotNow, d, nil
		}
		switch {
		case awaitsQueue(d, attempt):
			queued, err := d.Queue(now)
			if err != nil {
				return "", nil, err
			}
			started, err := d.StartAttempt(cmd.Provider, now)
			if err != nil {
				return "", nil, err
			}
			toAppend = append(queued, started...)
		case d.Attempt() == attempt && d.State() == domain.StateQueued:
			if toAppend, err = d.StartAttempt(cmd.Provider, now); err != nil {
				return "", nil, err
			}
		case d.Attempt() == attempt && d.State() == domain.StateProcessing:
			// Started and not closed. A fresh copy (a republished duplicate) means another
			// consumer owns the attempt: leave it to that one. A redelivered copy means the
			// consumer that started it is gone, and the provider may have acted.
			if !cmd.Redelivered {
				return StartSkip, d, nil
			}
			if cmd.ProviderDeduplicates {
				return StartProceed, d, nil
			}
			unknown, err := d.RecordOutcome(attempt, domain.Outcome{
				Kind:     domain.OutcomeUnknown,
				Provider: cmd.Provider,
				Err:      "worker stopped during the attempt; the provider may have received it",
			}, domain.RetryPolicy{}, now, 0)
			if err != nil {
				return "", nil, err
			}
			err = h.store.Append(ctx, unknown, nil)
			switch {
			case err == nil, errors.Is(err, ErrDuplicate):
				return StartRecordedUnknown, d, nil
			case errors.Is(err, ErrVersionConflict):
				continue
			default:
				return "", nil, fmt.Errorf("record unknown outcome of %s: %w", id, err)
			}
		default:
			return StartSkip, d, nil
		}
		err = h.store.Append(ctx, toAppend, nil)
		switch {
		case err == nil:
			return StartProceed, d, nil
		case errors.Is(err, ErrDuplicate), errors.Is(err, ErrVersionConflict):
			// Another copy or the relay got there first: decide again on the new history.
			continue
		default:
			return "", nil, fmt.Errorf("start attempt %d of %s: %w", attempt, id, err)
		}
	}
	return "", nil, fmt.Errorf("start attempt %d of %s: %w after %d tries", attempt, id, ErrVersionConflict, maxConflictRetries)
}

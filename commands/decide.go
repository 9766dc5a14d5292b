package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/deliveryledger/ledger/domain"
)

// maxConflictRetries bounds the reload-and-decide loop after a version conflict.
const maxConflictRetries = 8

// ErrContended: the delivery kept being moved by other writers through every one of decide's
// tries (a burst of concurrent requests about it); nothing was recorded, and the same request
// a moment later is decided on what they left.
var ErrContended = errors.New("delivery contended")

// decision is what a command decided about a delivery: the events to append and the messages
// that must travel with them. A decision with neither records nothing.
type decision struct {
	events []domain.Event
	outbox []OutboxMessage
	// duplicateIsDone says that a taken idempotency key means this very transition is already
	// recorded (by a copy of the same message), so it stands; otherwise a taken key is decided
	// again on the new history like a version conflict.
	duplicateIsDone bool
	// request, when set, is stored in the same transaction (requests.AppendRequest): a decision
	// made under an operator's Idempotency-Key. A key stored meanwhile by another request is
	// decided again, like a conflict, and the step then finds that request's answer.
	request  *StoredRequest
	requests RequestStore
}

// decide is the one load → decide → append loop of the commands. It folds the delivery's
// stream, or starts from known (the delivery as the caller last saw it, which saves a read),
// lets step decide on it, and appends what step decided. On a version conflict or a taken key
// (another writer moved the delivery meanwhile, or a repeat of this very decision won) it reads
// the stream again and decides again, so a repeat is decided on the state the first one left
// rather than recorded twice, and a stale known costs a retry, never a wrong record.
//
// It returns the delivery step saw last, with the decision folded in when it was recorded. A
// refusal by step is returned as it is, with that delivery; failures to read or write are
// wrapped with what.
func decide(ctx context.Context, store EventStore, id string, known *domain.Delivery, what string,
	step func(*domain.Delivery) (decision, error)) (*domain.Delivery, error) {
	for range maxConflictRetries {
		d := known
		known = nil
		if d == nil || d.ID() != id {
			events, err := store.Load(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			if d, err = domain.Rehydrate(events); err != nil {
				return nil, err
			}
		}
		dec, err := step(d)
		if err != nil {
			return d, err // refused: nothing was folded in
		}
		if len(dec.events) == 0 && len(dec.outbox) == 0 {
			return d, nil
		}
		if dec.request != nil {
			err = dec.requests.AppendRequest(ctx, *dec.request, dec.events, dec.outbox)
		} else {
			err = store.Append(ctx, dec.events, dec.outbox)
		}
		switch {
		case err == nil:
			return d, nil
		case errors.Is(err, ErrDuplicate) && dec.duplicateIsDone:
			return d, nil
		case errors.Is(err, ErrDuplicate), errors.Is(err, ErrVersionConflict), errors.Is(err, ErrRequestTaken):
			continue
		default:
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil, fmt.Errorf("%s: %w: %w after %d tries", what, ErrContended, ErrVersionConflict, maxConflictRetries)
}

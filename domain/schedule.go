package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MaxSendAhead is how far ahead a send_at may lie: a year and a day, so that a yearly reminder
// fits; further is refused at accept.
const MaxSendAhead = 366 * 24 * time.Hour

// Scheduled is the data of EventScheduled.
type Scheduled struct {
	SendAt time.Time `json:"send_at"`
}

// Cancelled is the data of EventCancelled: who cancelled, why, and the state it ended.
type Cancelled struct {
	Reason string `json:"reason,omitempty"`
	Actor  string `json:"actor,omitempty"`
	From   State  `json:"from"`
}

// KeyScheduled is the key of a delivery's one scheduled event.
func KeyScheduled(id string) string { return id + "/scheduled" }

// KeyCancelled is the key of a delivery's one cancel: a repeated cancel records nothing.
func KeyCancelled(id string) string { return id + "/cancelled" }

// ErrNotScheduled: the due pass asked to queue a delivery that is not scheduled, or before its
// time.
var ErrNotScheduled = errors.New("delivery is not scheduled, or not yet due")

// Schedule records that the just accepted delivery waits for sendAt. The accept calls it only for
// a sendAt after now; a sendAt at or before now is sent at once.
func (d *Delivery) Schedule(sendAt, now time.Time) ([]Event, error) {
	if !sendAt.After(now) {
		return nil, fmt.Errorf("%w: send_at %s is not after %s", ErrInvalidDelivery, sendAt.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	return d.record(now, EventScheduled, KeyScheduled(d.id), Scheduled{SendAt: sendAt.UTC()})
}

// Release queues a scheduled delivery whose send_at has come: attempt 1 is queued, and its work
// message must travel with the event.
func (d *Delivery) Release(now time.Time) ([]Event, error) {
	if d.state != StateScheduled || d.nextDueAt == nil || d.nextDueAt.After(now) {
		return nil, fmt.Errorf("%w: delivery %s is %s", ErrNotScheduled, d.id, d.state)
	}
	return d.Queue(now)
}

// SendAt returns the send_at a delivery was scheduled for, or nil.
func (d *Delivery) SendAt() *time.Time { return d.sendAt }

// CancelRefused is the answer to a cancel of a delivery an attempt has started for (or
// finished): it names the state and the latest attempt.
type CancelRefused struct {
	ID      string
	State   State
	Attempt int
}

// Error names the state and the attempt that keep the delivery from being cancelled.
func (e *CancelRefused) Error() string {
	return fmt.Sprintf("delivery %s is %s at attempt %d: an attempt has started, it cannot be cancelled", e.ID, e.State, e.Attempt)
}

// Cancel ends a delivery no attempt has started for: accepted, scheduled, or queued for its
// first attempt. It returns no events and no error for a delivery already cancelled (a repeated
// cancel), and a *CancelRefused once an attempt has started. Since every attempt's start is
// appended under the stream's expected version, a cancel that commits first makes the start
// fail, and a start that commits first makes the cancel be decided again and refused.
func (d *Delivery) Cancel(reason, actor string, now time.Time) ([]Event, error) {
	switch {
	case d.state == StateCancelled:
		return nil, nil
	case d.started || d.state != StateAccepted && d.state != StateScheduled && d.state != StateQueued:
		return nil, &CancelRefused{ID: d.id, State: d.state, Attempt: d.attempt}
	}
	return d.record(now, EventCancelled, KeyCancelled(d.id), Cancelled{Reason: reason, Actor: actor, From: d.state})
}

// Cancellation returns the cancel that ended the delivery, or nil.
func (d *Delivery) Cancellation() *Cancelled { return d.cancelled }

// DueKind names what a due time is for.
type DueKind string

// The due kinds: a scheduled send, a retry's next attempt, a deferral's until.
const (
	DueSend  DueKind = "send"
	DueRetry DueKind = "retry"
	DueDefer DueKind = "defer"
)

// Due is a time at which a delivery expects work, as an event records it: the ledger keeps it
// in PostgreSQL so that losing the broker's delayed copy loses nothing.
type Due struct {
	Kind DueKind
	At   time.Time
}

// DueOf returns the due time e records, if it records one: a scheduled send's send_at, a
// retry's next attempt, a deferral's until.
func DueOf(e Event) (Due, bool) {
	var at *time.Time
	var kind DueKind
	switch e.Type {
	case EventScheduled:
		var v Scheduled
		if json.Unmarshal(e.Data, &v) != nil {
			return Due{}, false
		}
		at, kind = &v.SendAt, DueSend
	case EventRetryScheduled:
		var v AttemptResult
		if json.Unmarshal(e.Data, &v) != nil {
			return Due{}, false
		}
		at, kind = v.NextAttemptAt, DueRetry
	case EventReconciledRetry:
		var v Resolution
		if json.Unmarshal(e.Data, &v) != nil {
			return Due{}, false
		}
		at, kind = v.NextAttemptAt, DueRetry
	case EventDeferred:
		var v Deferred
		if json.Unmarshal(e.Data, &v) != nil {
			return Due{}, false
		}
		at, kind = &v.Until, DueDefer
	}
	if at == nil {
		return Due{}, false
	}
	return Due{Kind: kind, At: at.UTC()}, true
}

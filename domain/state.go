// Package domain holds the delivery aggregate: its states, the events that move it between them,
// the transition table and the typed outcomes of a delivery attempt. It imports only the standard
// library, so the rules of the ledger can be read and tested without any infrastructure.
package domain

import "fmt"

// State is where a delivery stands. The names are part of the wire contract.
type State string

const (
	// StateNone is the state of a stream that has no events yet. Only EventAccepted leaves it.
	StateNone State = ""

	// StateAccepted: the accept command has committed the delivery and its outbox message.
	// The relay (after the broker confirmed the message) or a worker (if it saw the message
	// first) moves it to queued; the accept itself moves it on to scheduled when it asks for a
	// send_at ahead, and a cancel to cancelled.
	StateAccepted State = "accepted"

	// StateScheduled: the accept asked for a send_at ahead; no work message exists yet, only
	// a row with its due time in PostgreSQL. The due pass (commands.DuePass) moves it to queued
	// when that time comes, a cancel to cancelled.
	StateScheduled State = "scheduled"

	// StateQueued: the work message is on the broker. A worker moves it to processing when it
	// starts an attempt; a rate-limited message stays queued (EventDeferred). A cancel moves it
	// to cancelled while no attempt of it has ever started (Delivery.Cancel guards that).
	StateQueued State = "queued"

	// StateProcessing: a worker has started an attempt and is calling the provider. Only the
	// outcome of that attempt moves it on: delivered, retrying, dead or unknown.
	StateProcessing State = "processing"

	// StateRetrying: an attempt failed transiently and attempts are left; the retry message
	// waits in a delay tier. The worker that picks it up moves it back to queued.
	StateRetrying State = "retrying"

	// StateDelivered is terminal: the provider confirmed the delivery.
	StateDelivered State = "delivered"

	// StateDead is terminal until an operator replays the delivery (dead → queued): the failure
	// was permanent or the attempts ran out.
	StateDead State = "dead"

	// StateUnknown: the provider may have acted but we cannot know (timeout after the request
	// was written, a worker died mid-call). Only reconciliation moves it to delivered, dead or
	// retrying; no automatic resend happens, because a blind resend is how duplicates happen.
	StateUnknown State = "unknown"

	// StateCancelled is terminal: a caller's cancel came before any attempt started, and no
	// attempt ever will (a worker's start is refused from it, invariant 8).
	StateCancelled State = "cancelled"

	// StateSuppressed is terminal: the recipient is on the tenant's suppression list, or opted
	// out of the delivery's category, and the delivery is never sent. The accept records it
	// (the delivery is never queued), or a worker at the start of an attempt, when the
	// suppression came after the accept (Delivery.Suppress).
	StateSuppressed State = "suppressed"
)

// States lists every state a delivery can be in, in lifecycle order.
var States = []State{
	StateAccepted, StateScheduled, StateQueued, StateProcessing, StateRetrying,
	StateDelivered, StateDead, StateUnknown, StateCancelled, StateSuppressed,
}

// Terminal reports whether no automatic step moves a delivery out of s. Unknown is not terminal:
// it waits for reconciliation, but no worker acts on it.
func (s State) Terminal() bool {
	return s == StateDelivered || s == StateDead || s == StateCancelled || s == StateSuppressed
}

// Valid reports whether s names a state of the contract.
func (s State) Valid() bool {
	for _, known := range States {
		if s == known {
			return true
		}
	}
	return false
}

// EventType is the stored name of an event. The names are explicit constants, never derived from
// Go type names: renaming a type must not orphan history.
type EventType string

const (
	// EventAccepted opens a stream: the delivery and what its attempts need.
	EventAccepted EventType = "delivery.accepted"
	// EventQueued records that the work message is on the broker, for the attempt it names.
	EventQueued EventType = "delivery.queued"
	// EventDeferred records that a rate limit or concurrency cap held a queued attempt back; the
	// message waits in a delay tier and no attempt is consumed.
	EventDeferred EventType = "delivery.deferred"
	// EventAttemptStarted records that a worker is about to call the provider.
	EventAttemptStarted EventType = "delivery.attempt_started"
	// EventDelivered records the provider's confirmation of an attempt.
	EventDelivered EventType = "delivery.delivered"
	// EventRetryScheduled records a transient failure and when the next attempt is due.
	EventRetryScheduled EventType = "delivery.retry_scheduled"
	// EventDeadLettered records a permanent failure or exhausted attempts.
	EventDeadLettered EventType = "delivery.dead_lettered"
	// EventOutcomeUnknown records that an attempt's outcome cannot be known.
	EventOutcomeUnknown EventType = "delivery.outcome_unknown"
	// EventReconciledDelivered resolves an unknown outcome as delivered, with evidence.
	EventReconciledDelivered EventType = "delivery.reconciled_delivered"
	// EventReconciledDead resolves an unknown outcome as failed for good, with evidence.
	EventReconciledDead EventType = "delivery.reconciled_dead"
	// EventReconciledRetry resolves an unknown outcome as not sent, so another attempt is safe.
	EventReconciledRetry EventType = "delivery.reconciled_retry"
	// EventReplayed starts a new attempt cycle for a dead delivery, keeping its history.
	EventReplayed EventType = "delivery.replayed"
	// EventProviderAccepted records that the provider took the attempt's message and will
	// confirm delivery later (an SMS receipt): the delivery stays processing, no worker holds
	// it, until a receipt, a status lookup or a deadline decides the attempt.
	EventProviderAccepted EventType = "delivery.provider_accepted"
	// EventReceiptRecorded records a provider's receipt or status lookup: a status on the way
	// (sent, buffered), the word that decides an accepted attempt (recorded together with that
	// outcome), or word on an attempt already decided, kept as evidence. It changes no state, in
	// any state.
	EventReceiptRecorded EventType = "delivery.receipt_recorded"
	// EventFailedOver records that the attempt's call never reached its provider and moves on to
	// the next one, before that one is called: the history always names the provider a call
	// went to, also when the worker dies during it.
	EventFailedOver EventType = "delivery.failed_over"
	// EventScheduled records that the delivery waits for its send_at; it carries that time.
	EventScheduled EventType = "delivery.scheduled"
	// EventCancelled records a caller's cancel, with its reason and actor, before any attempt
	// started.
	EventCancelled EventType = "delivery.cancelled"
	// EventSuppressed records that the delivery will not be sent because its recipient is
	// suppressed (a suppression list entry, with its evidence) or opted out of its category.
	EventSuppressed EventType = "delivery.suppressed"
)

// EventTypes lists every event type.
var EventTypes = []EventType{
	EventAccepted, EventQueued, EventDeferred, EventAttemptStarted, EventDelivered, EventRetryScheduled,
	EventDeadLettered, EventOutcomeUnknown, EventReconciledDelivered, EventReconciledDead,
	EventReconciledRetry, EventReplayed, EventProviderAccepted, EventReceiptRecorded, EventFailedOver,
	EventScheduled, EventCancelled, EventSuppressed,
}

// Preserving reports whether an event of type t keeps whatever state the delivery is in: it
// adds evidence, not a transition.
func Preserving(t EventType) bool { return t == EventReceiptRecorded }

// transitions is the whole state machine, written once: from state, event type → next state.
// A pair that is not here is refused.
var transitions = map[State]map[EventType]State{
	StateNone: {EventAccepted: StateAccepted},
	StateAccepted: {
		EventQueued:          StateQueued,
		EventScheduled:       StateScheduled,
		EventCancelled:       StateCancelled,
		EventSuppressed:      StateSuppressed,
		EventReceiptRecorded: StateAccepted,
	},
	StateScheduled: {
		EventQueued:          StateQueued,
		EventCancelled:       StateCancelled,
		EventSuppressed:      StateSuppressed,
		EventReceiptRecorded: StateScheduled,
	},
	StateQueued: {
		EventAttemptStarted:  StateProcessing,
		EventDeferred:        StateQueued,
		EventCancelled:       StateCancelled,
		EventSuppressed:      StateSuppressed,
		EventReceiptRecorded: StateQueued,
	},
	StateProcessing: {
		EventDelivered:        StateDelivered,
		EventRetryScheduled:   StateRetrying,
		EventDeadLettered:     StateDead,
		EventOutcomeUnknown:   StateUnknown,
		EventProviderAccepted: StateProcessing,
		EventReceiptRecorded:  StateProcessing,
		EventFailedOver:       StateProcessing,
	},
	StateRetrying: {EventQueued: StateQueued, EventReceiptRecorded: StateRetrying},
	StateDead:     {EventReplayed: StateQueued, EventReceiptRecorded: StateDead},
	StateUnknown: {
		EventReconciledDelivered: StateDelivered,
		EventReconciledDead:      StateDead,
		EventReconciledRetry:     StateRetrying,
		EventReceiptRecorded:     StateUnknown,
		EventReplayed:            StateQueued,
	},
	StateDelivered:  {EventReceiptRecorded: StateDelivered},
	StateCancelled:  {EventReceiptRecorded: StateCancelled},
	StateSuppressed: {EventReceiptRecorded: StateSuppressed},
}

// TransitionError is returned when an event is not allowed in a state.
type TransitionError struct {
	From  State
	Event EventType
}

// Error names the refused pair.
func (e *TransitionError) Error() string {
	from := string(e.From)
	if from == "" {
		from = "(new)"
	}
	return fmt.Sprintf("event %s is not allowed in state %s", e.Event, from)
}

// Next returns the state that event leads to from state, or a *TransitionError.
func Next(from State, event EventType) (State, error) {
	if to, ok := transitions[from][event]; ok {
		return to, nil
	}
	return "", &TransitionError{From: from, Event: event}
}

package domain

import (
	"encoding/json"
	"fmt"
	"time"
)

// Event is one recorded transition of a delivery. Data holds the JSON of the event's payload
// type (Accepted, Queued, ...); the store keeps it as it is.
type Event struct {
	DeliveryID string
	Tenant     string
	// Version is the event's place in its delivery's stream, starting at 1.
	Version int
	Type    EventType
	// Key is the event's idempotency key: appending an event whose key exists is a no-op that
	// returns the earlier event. Keys name the operation (the outcome of attempt 2 of delivery X),
	// so a redelivered message cannot record the same transition twice.
	Key        string
	Data       json.RawMessage
	RecordedAt time.Time
	// Position is the event's place in the global log, set by the store.
	Position int64
}

// Priority orders work within a channel.
type Priority string

// Priorities of the contract; PriorityNormal is the default.
const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// Valid reports whether p is one of the contract's priorities.
func (p Priority) Valid() bool {
	return p == PriorityHigh || p == PriorityNormal || p == PriorityLow
}

// Accepted is the data of EventAccepted: everything an attempt needs, fixed at acceptance.
type Accepted struct {
	NotificationID string `json:"notification_id"`
	Channel        string `json:"channel"`
	Recipient      string `json:"recipient"`
	// Payload is the notification's payload. A store may keep it once per notification rather
	// than in every delivery's event (see WithPayloadApart): the stored data then lacks it and
	// names it by PayloadSHA256, and the store puts it back when it loads the stream.
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadSHA256 string          `json:"payload_sha256,omitempty"`
	Priority      Priority        `json:"priority"`
	MaxAttempts   int             `json:"max_attempts"`
	// RequestKey is the caller's Idempotency-Key, for audit lookups.
	RequestKey string `json:"idempotency_key"`
	// Trace is the W3C traceparent of the accept request's span, when it was traced.
	Trace string `json:"trace,omitempty"`
	// Window is when the delivery may be attempted, when the request gave one.
	Window *Window `json:"window,omitempty"`
	// RecipientKey is the recipient in its channel's normal form (a lower-cased address, a
	// URL without its fragment): what the suppression list and the preferences are keyed by.
	// Empty in deliveries accepted before it was recorded; the recipient then stands for it.
	RecipientKey string `json:"recipient_key,omitempty"`
	// Category is the notification's category (a name the configuration declares), when the
	// request gave one: what a recipient's preferences opt out of.
	Category string `json:"category,omitempty"`
	// PayloadExpired: the payload's body left after the retention's payloads period; only its
	// SHA-256 (PayloadSHA256) and size (PayloadSize, bytes of its JSON) stay, so the history
	// still proves what was sent. Never stored: the store sets it when it loads such an event.
	PayloadExpired bool `json:"payload_expired,omitempty"`
	PayloadSize    int  `json:"payload_size,omitempty"`
}

// Queued is the data of EventQueued.
type Queued struct {
	// Attempt is the number of the attempt the queued message is for.
	Attempt int `json:"attempt"`
}

// Deferred is the data of EventDeferred.
type Deferred struct {
	Attempt int       `json:"attempt"`
	Reason  string    `json:"reason"`
	Until   time.Time `json:"until"`
}

// AttemptStarted is the data of EventAttemptStarted.
type AttemptStarted struct {
	Attempt  int    `json:"attempt"`
	Provider string `json:"provider"`
}

// AttemptResult is the data of the events that close an attempt: EventDelivered,
// EventRetryScheduled, EventDeadLettered and EventOutcomeUnknown.
type AttemptResult struct {
	Attempt             int        `json:"attempt"`
	Provider            string     `json:"provider,omitempty"`
	Class               ErrorClass `json:"error_class,omitempty"`
	Error               string     `json:"error,omitempty"`
	StatusCode          int        `json:"status_code,omitempty"`
	LatencyMS           float64    `json:"latency_ms"`
	ProviderOperationID string     `json:"provider_operation_id,omitempty"`
	// ProviderCode is the provider's own code for its answer (see Outcome.ProviderCode).
	ProviderCode string `json:"provider_code,omitempty"`
	// Source says what decided an attempt the provider accepted: "receipt" (its callback),
	// "lookup" (a status query), "deadline" (no word in time); empty for the call's own answer.
	Source string `json:"source,omitempty"`
	// PossibleDuplicate marks a retry scheduled after an unknown outcome (a channel whose
	// receivers deduplicate, unknown: retry): the provider may have acted on this attempt.
	PossibleDuplicate bool `json:"possible_duplicate,omitempty"`
	// FailedOver lists the providers tried before Provider, whose calls never reached them.
	FailedOver []ProviderTry `json:"failed_over,omitempty"`
	// Suppresses is set on EventDeadLettered when the provider's answer is hard evidence that the
	// recipient takes no more messages (Outcome.Suppress): the event is the evidence of the
	// suppression it adds.
	Suppresses bool `json:"suppresses,omitempty"`
	// Exhausted is set on EventDeadLettered when the attempts ran out.
	Exhausted bool `json:"exhausted,omitempty"`
	// NextAttemptAt is set on EventRetryScheduled.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

// Resolution is the data of the reconciliation events: who decided, on what evidence.
type Resolution struct {
	Attempt  int    `json:"attempt"`
	Evidence string `json:"evidence"`
	Actor    string `json:"actor,omitempty"`
	// StatusCode and ProviderOperationID carry the provider's answer when the evidence has one.
	StatusCode          int    `json:"status_code,omitempty"`
	ProviderOperationID string `json:"provider_operation_id,omitempty"`
	Exhausted           bool   `json:"exhausted,omitempty"`
	// NextAttemptAt is set on EventReconciledRetry.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

// ProviderAcceptance is the data of EventProviderAccepted: which provider took the attempt's
// message under which id, and when the ledger will ask it (CheckAt) and give up waiting
// (GiveUpAt, the outcome is then unknown) if no receipt has decided the attempt.
type ProviderAcceptance struct {
	Attempt             int     `json:"attempt"`
	Provider            string  `json:"provider"`
	ProviderOperationID string  `json:"provider_operation_id"`
	StatusCode          int     `json:"status_code,omitempty"`
	ProviderCode        string  `json:"provider_code,omitempty"`
	LatencyMS           float64 `json:"latency_ms"`
	// FailedOver lists the providers tried before Provider, whose calls never reached them.
	FailedOver []ProviderTry `json:"failed_over,omitempty"`
	CheckAt    time.Time     `json:"check_at"`
	GiveUpAt   time.Time     `json:"give_up_at"`
}

// ReceiptData is the data of EventReceiptRecorded: a provider's word on one of its messages.
type ReceiptData struct {
	// Attempt is the attempt the word is about, 0 when it names none the ledger knows.
	Attempt             int    `json:"attempt,omitempty"`
	Provider            string `json:"provider"`
	ProviderOperationID string `json:"provider_operation_id,omitempty"`
	// Status is the ledger's reading: pending, delivered, failed, retry, not_found.
	Status string `json:"status"`
	// ProviderStatus, Code and Detail are the provider's own words.
	ProviderStatus string `json:"provider_status,omitempty"`
	Code           string `json:"code,omitempty"`
	Detail         string `json:"detail,omitempty"`
	// Source is "receipt" (a callback) or "lookup" (a status query).
	Source string     `json:"source"`
	At     *time.Time `json:"at,omitempty"`
	// Evidence says why the word changed nothing, when it did not ("the attempt is decided").
	Evidence string `json:"evidence,omitempty"`
	// NextCheckAt (a lookup that found the message on its way) is when to ask again.
	NextCheckAt *time.Time `json:"next_check_at,omitempty"`
}

// FailOver is the data of EventFailedOver: the call of the attempt to From never reached it
// (Error says why), and the attempt goes to To.
type FailOver struct {
	Attempt int    `json:"attempt"`
	From    string `json:"from"`
	To      string `json:"to"`
	Error   string `json:"error"`
}

// Replayed is the data of EventReplayed.
type Replayed struct {
	// Attempt is the number of the first attempt of the new cycle.
	Attempt int    `json:"attempt"`
	Cycle   int    `json:"cycle"`
	Reason  string `json:"reason,omitempty"`
	Actor   string `json:"actor,omitempty"`
	// FromUnknown marks the replay of a delivery whose outcome was unknown: the provider may
	// have acted on the last cycle, so this one may send it again.
	FromUnknown bool `json:"from_unknown,omitempty"`
	// Of is the version of the dead (or unknown) delivery this replay replays: the history says
	// which death each replay answers (absent in replays recorded before it was kept).
	Of int `json:"of_version,omitempty"`
	// Job is the replay job that made the replay, if one did.
	Job string `json:"job,omitempty"`
}

// Key helpers: one place that spells the idempotency keys of a delivery's events.

// KeyAccepted is the idempotency key of a delivery's EventAccepted.
func KeyAccepted(id string) string { return id + "/accepted" }

// KeyQueued is the key of the EventQueued for an attempt: the relay and a worker that both try
// to record it write the same key, so it is recorded once.
func KeyQueued(id string, attempt int) string { return fmt.Sprintf("%s/queued/%d", id, attempt) }

// KeyDeferred is the key of the n-th deferral (from 1) of an attempt.
func KeyDeferred(id string, attempt, n int) string {
	return fmt.Sprintf("%s/queued/%d/deferred/%d", id, attempt, n)
}

// KeyReconciled is the key of the resolution of an attempt's unknown outcome: one per attempt.
func KeyReconciled(id string, attempt int) string {
	return fmt.Sprintf("%s/attempt/%d/reconciled", id, attempt)
}

// KeyReplayed is the key of the replay that opens a cycle (from 1): one replay per cycle, however
// many operators ask at once.
func KeyReplayed(id string, cycle int) string {
	return fmt.Sprintf("%s/cycle/%d/replayed", id, cycle)
}

// KeyProviderAccepted is the key of an attempt's EventProviderAccepted.
func KeyProviderAccepted(id string, attempt int) string {
	return fmt.Sprintf("%s/attempt/%d/accepted", id, attempt)
}

// KeyReceipt is the key of a provider's word: one per (operation, status, code), so a callback
// sent twice, or a lookup that says what a receipt said, is recorded once.
func KeyReceipt(id, provider, operation, status, code string) string {
	return fmt.Sprintf("%s/receipt/%s/%s/%s/%s", id, provider, operation, status, code)
}

// KeyLookup is the key of the n-th lookup of an attempt that found its message still on its way.
func KeyLookup(id string, attempt, n int) string {
	return fmt.Sprintf("%s/attempt/%d/lookup/%d", id, attempt, n)
}

// KeyFailedOver is the key of an attempt's n-th failover.
func KeyFailedOver(id string, attempt, n int) string {
	return fmt.Sprintf("%s/attempt/%d/failover/%d", id, attempt, n)
}

// KeyAttemptStarted is the key of an attempt's EventAttemptStarted.
func KeyAttemptStarted(id string, attempt int) string {
	return fmt.Sprintf("%s/attempt/%d/started", id, attempt)
}

// KeyAttemptOutcome is the one key shared by every event that closes an attempt, so an attempt
// has at most one outcome whatever the number of workers that saw its message.
func KeyAttemptOutcome(id string, attempt int) string {
	return fmt.Sprintf("%s/attempt/%d/outcome", id, attempt)
}

// WithPayloadApart returns the accepted event e with its payload left out of the data and named
// by sha256 (hex) instead, for a store that keeps the payload once per notification. Every other
// field stays as it was.
func WithPayloadApart(e Event, sha256 string) (Event, error) {
	if e.Type != EventAccepted {
		return e, fmt.Errorf("event %d of %s is %s, not %s", e.Version, e.DeliveryID, e.Type, EventAccepted)
	}
	var a Accepted
	if err := json.Unmarshal(e.Data, &a); err != nil {
		return e, fmt.Errorf("event %d of %s: %w", e.Version, e.DeliveryID, err)
	}
	a.Payload, a.PayloadSHA256 = nil, sha256
	e.Data = encode(a)
	return e, nil
}

// WithPayloadInline is the inverse of WithPayloadApart: the accepted event e with payload back in
// its data.
func WithPayloadInline(e Event, payload json.RawMessage) (Event, error) {
	if e.Type != EventAccepted {
		return e, fmt.Errorf("event %d of %s is %s, not %s", e.Version, e.DeliveryID, e.Type, EventAccepted)
	}
	var a Accepted
	if err := json.Unmarshal(e.Data, &a); err != nil {
		return e, fmt.Errorf("event %d of %s: %w", e.Version, e.DeliveryID, err)
	}
	a.Payload, a.PayloadSHA256 = payload, ""
	e.Data = encode(a)
	return e, nil
}

// WithPayloadExpired is an accepted event that keeps its payload apart, as loaded once the
// payload's body expired: it keeps its payload_sha256 and says payload_expired, with the size
// the body had.
func WithPayloadExpired(e Event, size int) (Event, error) {
	if e.Type != EventAccepted {
		return e, fmt.Errorf("event %d of %s is %s, not %s", e.Version, e.DeliveryID, e.Type, EventAccepted)
	}
	var a Accepted
	if err := json.Unmarshal(e.Data, &a); err != nil {
		return e, fmt.Errorf("event %d of %s: %w", e.Version, e.DeliveryID, err)
	}
	a.Payload, a.PayloadExpired, a.PayloadSize = nil, true, size
	e.Data = encode(a)
	return e, nil
}

func encode(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// The data types above marshal by construction; a failure is a programming error.
		panic(fmt.Sprintf("encode event data: %v", err))
	}
	return b
}

// DecodeData decodes an event's data into the payload type of its event type.
func DecodeData(e Event) (any, error) {
	var v any
	switch e.Type {
	case EventAccepted:
		v = &Accepted{}
	case EventQueued:
		v = &Queued{}
	case EventDeferred:
		v = &Deferred{}
	case EventAttemptStarted:
		v = &AttemptStarted{}
	case EventDelivered, EventRetryScheduled, EventDeadLettered, EventOutcomeUnknown:
		v = &AttemptResult{}
	case EventReconciledDelivered, EventReconciledDead, EventReconciledRetry:
		v = &Resolution{}
	case EventReplayed:
		v = &Replayed{}
	case EventProviderAccepted:
		v = &ProviderAcceptance{}
	case EventReceiptRecorded:
		v = &ReceiptData{}
	case EventFailedOver:
		v = &FailOver{}
	case EventScheduled:
		v = &Scheduled{}
	case EventCancelled:
		v = &Cancelled{}
	case EventSuppressed:
		v = &Suppressed{}
	default:
		return nil, fmt.Errorf("event %d of %s: unknown type %q", e.Version, e.DeliveryID, e.Type)
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return nil, fmt.Errorf("event %d of %s (%s): %w", e.Version, e.DeliveryID, e.Type, err)
	}
	return v, nil
}

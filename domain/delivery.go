package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors returned by the aggregate's methods.
var (
	// ErrStaleAttempt: the message is for an attempt the delivery has already moved past.
	ErrStaleAttempt = errors.New("attempt already closed")
	// ErrInvalidDelivery: the accept request breaks a rule of the aggregate.
	ErrInvalidDelivery = errors.New("invalid delivery")
)

// AcceptSpec is what the accept command decided about a new delivery.
type AcceptSpec struct {
	ID             string
	Tenant         string
	NotificationID string
	Channel        string
	Recipient      string
	Payload        json.RawMessage
	Priority       Priority
	MaxAttempts    int
	RequestKey     string
	// Trace is the W3C traceparent of the request that accepted it, when that request was
	// traced: later attempts and replays continue its trace.
	Trace string
	// Window, when set, is when the delivery may be attempted.
	Window *Window
	// RecipientKey is the recipient in its channel's normal form (Accepted.RecipientKey);
	// empty means the recipient as given.
	RecipientKey string
	// Category is the notification's category, when it has one.
	Category string
}

// Delivery is the aggregate: one notification to one recipient over one channel. Its fields
// change only by folding events (apply), so the stream is the only truth.
type Delivery struct {
	id             string
	tenant         string
	notificationID string
	channel        string
	recipient      string
	payload        json.RawMessage
	payloadExpired bool
	priority       Priority
	maxAttempts    int
	requestKey     string
	trace          string
	window         *Window

	state   State
	version int
	// attempt is the number of the latest attempt queued or started (0 before the first).
	attempt int
	// cycleStart is the first attempt number of the current cycle (1, or the replay's).
	cycleStart int
	cycle      int
	// replays are the replays recorded, oldest first, so that an ask to replay the delivery as
	// it was at some version can tell whether someone replayed that cycle since.
	replays []replayMark
	// deferrals counts the deferrals of the current attempt (they name their keys).
	deferrals  int
	lastResult *AttemptResult
	nextDueAt  *time.Time
	// awaiting is the provider's acceptance of the current attempt while no receipt, lookup or
	// deadline has decided it.
	awaiting *ProviderAcceptance
	// receipts holds the keys of the provider words recorded, so a repeat records nothing;
	// lookups counts the lookups of the current attempt that found its message on the way.
	receipts map[string]bool
	lookups  int
	// accepted holds the messages (messageKey) a provider accepted for one of the delivery's
	// attempts: the only ones a callback may speak of. heard holds the words recorded about
	// them (wordKey), so that a known status said again (with another code, say) records
	// nothing; callbacks counts the callbacks recorded per message, which maxCallbackWords
	// bounds for those that decide nothing.
	accepted  map[string]bool
	heard     map[string]bool
	callbacks map[string]int
	// calling is the provider the current attempt's call went to (the one it started with, or
	// the last it failed over to); failovers counts the attempt's failovers.
	calling   string
	failovers int
	// started is set once any attempt has started: from then on a cancel is refused.
	started bool
	// sendAt is the scheduled send_at; cancelled the cancel that ended the delivery.
	sendAt    *time.Time
	cancelled *Cancelled
	// recipientKey and category are the accept's (Accepted); suppressed the suppression that
	// ended the delivery.
	recipientKey string
	category     string
	suppressed   *Suppressed

	acceptedAt time.Time
	updatedAt  time.Time
}

// Accept validates spec and opens a new delivery stream.
func Accept(spec AcceptSpec, now time.Time) (*Delivery, []Event, error) {
	var problems []error
	if spec.ID == "" {
		problems = append(problems, errors.New("id is empty"))
	}
	if spec.Tenant == "" {
		problems = append(problems, errors.New("tenant is empty"))
	}
	if spec.Channel == "" {
		problems = append(problems, errors.New("channel is empty"))
	}
	if spec.Recipient == "" {
		problems = append(problems, errors.New("recipient is empty"))
	}
	if !spec.Priority.Valid() {
		problems = append(problems, fmt.Errorf("priority %q is not high, normal or low", spec.Priority))
	}
	if spec.MaxAttempts < 1 {
		problems = append(problems, fmt.Errorf("max attempts %d is below 1", spec.MaxAttempts))
	}
	if !json.Valid(spec.Payload) {
		problems = append(problems, errors.New("payload is not JSON"))
	}
	if spec.Window != nil {
		if err := spec.Window.Validate(); err != nil {
			problems = append(problems, err)
		}
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidDelivery, errors.Join(problems...))
	}
	d := &Delivery{id: spec.ID, tenant: spec.Tenant}
	events, err := d.record(now, EventAccepted, KeyAccepted(spec.ID), Accepted{
		NotificationID: spec.NotificationID,
		Channel:        spec.Channel,
		Recipient:      spec.Recipient,
		Payload:        spec.Payload,
		Priority:       spec.Priority,
		MaxAttempts:    spec.MaxAttempts,
		RequestKey:     spec.RequestKey,
		Trace:          spec.Trace,
		Window:         spec.Window,
		RecipientKey:   spec.RecipientKey,
		Category:       spec.Category,
	})
	if err != nil {
		return nil, nil, err
	}
	return d, events, nil
}

// Rehydrate folds a stream, oldest first, into the delivery it describes. It fails on a stream
// that is empty, out of order, or that breaks the transition table: history is never repaired
// silently.
func Rehydrate(events []Event) (*Delivery, error) {
	if len(events) == 0 {
		return nil, errors.New("rehydrate: empty stream")
	}
	d := &Delivery{id: events[0].DeliveryID, tenant: events[0].Tenant}
	for _, e := range events {
		if e.Version != d.version+1 {
			return nil, fmt.Errorf("rehydrate %s: version %d follows %d", d.id, e.Version, d.version)
		}
		next, err := Next(d.state, e.Type)
		if err != nil {
			return nil, fmt.Errorf("rehydrate %s at version %d: %w", d.id, e.Version, err)
		}
		data, err := DecodeData(e)
		if err != nil {
			return nil, fmt.Errorf("rehydrate: %w", err)
		}
		d.apply(e, next, data)
	}
	return d, nil
}

// record checks the transition, builds the event and folds it in.
func (d *Delivery) record(now time.Time, t EventType, key string, data any) ([]Event, error) {
	next, err := Next(d.state, t)
	if err != nil {
		return nil, err
	}
	e := Event{
		DeliveryID: d.id,
		Tenant:     d.tenant,
		Version:    d.version + 1,
		Type:       t,
		Key:        key,
		Data:       encode(data),
		RecordedAt: now,
	}
	d.apply(e, next, ptrTo(data))
	return []Event{e}, nil
}

func ptrTo(data any) any {
	switch v := data.(type) {
	case Accepted:
		return &v
	case Queued:
		return &v
	case AttemptStarted:
		return &v
	case Deferred:
		return &v
	case AttemptResult:
		return &v
	case Resolution:
		return &v
	case Replayed:
		return &v
	case ProviderAcceptance:
		return &v
	case ReceiptData:
		return &v
	case FailOver:
		return &v
	case Scheduled:
		return &v
	case Cancelled:
		return &v
	case Suppressed:
		return &v
	}
	return data
}

// apply folds one event. It cannot fail: the event was checked against the transition table.
func (d *Delivery) apply(e Event, next State, data any) {
	d.state = next
	d.version = e.Version
	d.updatedAt = e.RecordedAt
	switch v := data.(type) {
	case *Accepted:
		d.notificationID = v.NotificationID
		d.channel = v.Channel
		d.recipient = v.Recipient
		d.payload = v.Payload
		d.payloadExpired = v.PayloadExpired
		d.priority = v.Priority
		d.maxAttempts = v.MaxAttempts
		d.requestKey = v.RequestKey
		d.trace = v.Trace
		d.window = v.Window
		d.recipientKey, d.category = v.RecipientKey, v.Category
		d.cycleStart = 1
		d.acceptedAt = e.RecordedAt
	case *Queued:
		d.attempt = v.Attempt
		d.nextDueAt = nil
		d.deferrals = 0
	case *Deferred:
		d.deferrals++
		until := v.Until
		d.nextDueAt = &until
	case *AttemptStarted:
		d.attempt = v.Attempt
		d.lookups = 0
		d.calling, d.failovers = v.Provider, 0
		d.started = true
	case *Scheduled:
		sendAt := v.SendAt
		d.sendAt, d.nextDueAt = &sendAt, &sendAt
	case *Cancelled:
		d.cancelled = v
		d.nextDueAt = nil
	case *Suppressed:
		d.suppressed = v
		d.nextDueAt = nil
	case *FailOver:
		d.calling = v.To
		d.failovers++
	case *AttemptResult:
		d.lastResult = v
		d.nextDueAt = v.NextAttemptAt
		d.awaiting = nil
	case *ProviderAcceptance:
		d.awaiting = v
		d.lookups = 0
		if d.accepted == nil {
			d.accepted = map[string]bool{}
		}
		d.accepted[messageKey(v.Provider, v.ProviderOperationID)] = true
	case *ReceiptData:
		if d.receipts == nil {
			d.receipts, d.heard, d.callbacks = map[string]bool{}, map[string]bool{}, map[string]int{}
		}
		d.receipts[e.Key] = true
		if strings.Contains(e.Key, "/lookup/") {
			d.lookups++
		} else {
			d.heard[wordKey(v.Provider, v.ProviderOperationID, v.Status, v.ProviderStatus)] = true
		}
		if v.Source == "receipt" {
			d.callbacks[messageKey(v.Provider, v.ProviderOperationID)]++
		}
	case *Resolution:
		d.nextDueAt = v.NextAttemptAt
	case *Replayed:
		d.attempt = v.Attempt
		d.cycleStart = v.Attempt
		d.cycle = v.Cycle
		d.lastResult = nil
		d.replays = append(d.replays, replayMark{version: e.Version, job: v.Job, actor: v.Actor})
	}
}

// Queue records that the work message for the next attempt is on the broker. It is allowed from
// accepted (the first attempt) and retrying (the next one).
func (d *Delivery) Queue(now time.Time) ([]Event, error) {
	attempt := d.attempt + 1
	return d.record(now, EventQueued, KeyQueued(d.id, attempt), Queued{Attempt: attempt})
}

// FirstQueued is the event Queue records for a delivery that holds only its accepted event: the
// queued transition of attempt 1, at version 2. Accepted leads only to queued, so attempt 1 is
// always queued at version 2, and a writer that knows the attempt can record it without loading
// the stream: the store's version constraint refuses it if anything was recorded after the
// accepted event meanwhile (a test holds it equal to Queue's event).
func FirstQueued(id, tenant string, now time.Time) Event {
	return Event{
		DeliveryID: id,
		Tenant:     tenant,
		Version:    2,
		Type:       EventQueued,
		Key:        KeyQueued(id, 1),
		Data:       encode(Queued{Attempt: 1}),
		RecordedAt: now,
	}
}

// Defer records that a rate limit or concurrency cap holds the queued attempt back until until.
// It consumes no attempt.
func (d *Delivery) Defer(reason string, until, now time.Time) ([]Event, error) {
	return d.record(now, EventDeferred, KeyDeferred(d.id, d.attempt, d.deferrals+1),
		Deferred{Attempt: d.attempt, Reason: reason, Until: until.UTC()})
}

// StartAttempt records that a worker is calling the provider for the queued attempt.
func (d *Delivery) StartAttempt(provider string, now time.Time) ([]Event, error) {
	return d.record(now, EventAttemptStarted, KeyAttemptStarted(d.id, d.attempt),
		AttemptStarted{Attempt: d.attempt, Provider: provider})
}

// FailOver records that the current attempt's call to from never reached it, and that the
// attempt goes to to: recorded before to is called.
func (d *Delivery) FailOver(from, to, reason string, now time.Time) ([]Event, error) {
	if d.state != StateProcessing || d.awaiting != nil || d.calling != from {
		return nil, fmt.Errorf("%w: delivery %s is %s with %q, not calling %s", ErrStaleAttempt, d.id, d.state, d.calling, from)
	}
	return d.record(now, EventFailedOver, KeyFailedOver(d.id, d.attempt, d.failovers+1),
		FailOver{Attempt: d.attempt, From: from, To: to, Error: reason})
}

// Calling returns the provider the current attempt's call went to: the one it started with, or
// the last one it failed over to.
func (d *Delivery) Calling() string { return d.calling }

// RecordOutcome is the one mapping from a typed outcome to the next state. jitter in [0,1) feeds
// the retry schedule.
func (d *Delivery) RecordOutcome(attempt int, o Outcome, policy RetryPolicy, now time.Time, jitter float64) ([]Event, error) {
	if attempt != d.attempt || d.state != StateProcessing {
		return nil, fmt.Errorf("%w: delivery %s is %s at attempt %d, outcome is for attempt %d",
			ErrStaleAttempt, d.id, d.state, d.attempt, attempt)
	}
	res := AttemptResult{
		Attempt:             attempt,
		Provider:            o.Provider,
		Class:               o.Class,
		Error:               o.Err,
		StatusCode:          o.StatusCode,
		LatencyMS:           float64(o.Latency.Microseconds()) / 1000,
		ProviderOperationID: o.ProviderOperationID,
		ProviderCode:        o.ProviderCode,
		FailedOver:          o.FailedOver,
	}
	key := KeyAttemptOutcome(d.id, attempt)
	switch o.Kind {
	case OutcomeAccepted:
		if d.awaiting != nil {
			return nil, fmt.Errorf("%w: delivery %s attempt %d is already accepted by %s", ErrStaleAttempt, d.id, attempt, d.awaiting.Provider)
		}
		timeout, maxWait := o.ReceiptTimeout, o.ReceiptMaxWait
		if timeout <= 0 {
			timeout = DefaultReceiptTimeout
		}
		if maxWait <= 0 {
			maxWait = DefaultReceiptMaxWait
		}
		return d.record(now, EventProviderAccepted, KeyProviderAccepted(d.id, attempt), ProviderAcceptance{
			Attempt: attempt, Provider: o.Provider, ProviderOperationID: o.ProviderOperationID, StatusCode: o.StatusCode,
			ProviderCode: o.ProviderCode, LatencyMS: res.LatencyMS, FailedOver: o.FailedOver,
			CheckAt: now.Add(timeout).UTC(), GiveUpAt: now.Add(maxWait).UTC(),
		})
	case OutcomeDelivered:
		res.Class = ""
		return d.record(now, EventDelivered, key, res)
	case OutcomeUnknown:
		if res.Class == "" {
			res.Class = ClassUnknown
		}
		if !policy.RetryUnknown {
			return d.record(now, EventOutcomeUnknown, key, res)
		}
		// The receivers drop duplicates on the delivery id: another attempt is safe, and the
		// history says it may be one.
		res.PossibleDuplicate = true
		if d.AttemptsInCycle() >= d.maxAttempts {
			res.Exhausted = true
			return d.record(now, EventDeadLettered, key, res)
		}
		next := policy.NextAttemptAt(d.AttemptsInCycle(), now, jitter, o.RetryAfter).UTC()
		res.NextAttemptAt = &next
		return d.record(now, EventRetryScheduled, key, res)
	case OutcomeTransient:
		if res.Class == "" {
			res.Class = ClassTransient
		}
		if d.AttemptsInCycle() >= d.maxAttempts {
			res.Exhausted = true
			return d.record(now, EventDeadLettered, key, res)
		}
		next := policy.NextAttemptAt(d.AttemptsInCycle(), now, jitter, o.RetryAfter).UTC()
		res.NextAttemptAt = &next
		return d.record(now, EventRetryScheduled, key, res)
	case OutcomePermanent:
		if res.Class == "" {
			res.Class = ClassPermanent
		}
		res.Suppresses = o.Suppress
		return d.record(now, EventDeadLettered, key, res)
	}
	return nil, fmt.Errorf("record outcome of %s: unknown outcome kind %q", d.id, o.Kind)
}

// ReceiptWord is a provider's word on one of its messages, as RecordReceipt takes it.
type ReceiptWord struct {
	Provider            string
	ProviderOperationID string
	// Status is the ledger's reading: pending, delivered, failed, retry, not_found.
	Status         string
	ProviderStatus string
	Code           string
	Detail         string
	// Source is "receipt" or "lookup".
	Source string
	At     time.Time
	// NextCheck (a pending lookup) is when to ask the provider again.
	NextCheck time.Time
	// Suppress (a failed word) says the code is hard evidence that the recipient takes no more
	// messages (see Outcome.Suppress).
	Suppress bool
}

// Receipt statuses, as ReceiptWord.Status spells them.
const (
	ReceiptPending   = "pending"
	ReceiptDelivered = "delivered"
	ReceiptFailed    = "failed"
	ReceiptRetry     = "retry"
	ReceiptNotFound  = "not_found"
)

// ErrReceiptSeen: this very word was recorded before (the same status of the same message,
// whatever its code), or the message has had its fill of words that decide nothing; nothing is
// recorded again.
var ErrReceiptSeen = errors.New("receipt already recorded")

// ErrReceiptEarly: a call of the delivery's current attempt is in flight, and its acceptance
// is not recorded yet (the callback beat the provider's answer); nothing is recorded,
// and the provider should send it again.
var ErrReceiptEarly = errors.New("receipt ahead of the provider's acceptance")

// ErrReceiptForeign: a callback about a message the delivery's history does not record its
// provider accepting. Whoever can post callbacks could otherwise write on any delivery by
// naming it; nothing is recorded.
var ErrReceiptForeign = errors.New("receipt about a message the delivery was not given")

// maxCallbackWords bounds the callbacks recorded about one message that decide nothing: a
// provider says a handful (Twilio's queued, sent, delivered; Vonage's accepted, buffered), and
// whoever holds a provider's callback secret must not grow a history without end by inventing
// statuses. A word that decides the attempt is always recorded.
const maxCallbackWords = 16

// messageKey names one message of one provider.
func messageKey(provider, operationID string) string { return provider + "\x00" + operationID }

// wordKey names one status of one message.
func wordKey(provider, operationID, status, providerStatus string) string {
	return messageKey(provider, operationID) + "\x00" + status + "\x00" + providerStatus
}

// RecordReceipt records a provider's word on one of its messages, and the decision it carries:
//
//   - for the attempt the provider accepted under that id and that nothing decided yet, a final
//     word decides it (delivered; failed: dead; retry or not found: retrying, or dead when the
//     attempts are used up), recorded together with the word; a pending one is recorded alone;
//   - for an unknown outcome of the provider's latest attempt, a final word resolves it, like
//     an operator's reconciliation with the word as evidence: a callback when it names the
//     message that attempt was given, a lookup (the reconciler's own question) also when the
//     call timed out before the provider named it;
//   - any other word (an attempt already decided, a delivery replayed since) is evidence only.
//
// A callback (Source "receipt") must be about a message the history records the provider
// accepting for one of the delivery's attempts, or it is refused (ErrReceiptForeign). The same
// status of the same message twice is recorded once, whatever its code (ErrReceiptSeen), and
// a message's callbacks that decide nothing are recorded up to maxCallbackWords.
func (d *Delivery) RecordReceipt(w ReceiptWord, policy RetryPolicy, now time.Time, jitter float64) ([]Event, error) {
	final := w.Status != ReceiptPending
	callback := w.Source == "receipt"
	message := messageKey(w.Provider, w.ProviderOperationID)
	if callback && !d.accepted[message] {
		return nil, fmt.Errorf("%w: delivery %s", ErrReceiptForeign, d.id)
	}
	awaited := d.state == StateProcessing && d.awaiting != nil && d.awaiting.Provider == w.Provider &&
		d.awaiting.ProviderOperationID == w.ProviderOperationID
	resolves := d.state == StateUnknown && final && d.lastResult != nil && d.lastResult.Provider == w.Provider &&
		d.lastResult.Attempt == d.attempt && (d.lastResult.ProviderOperationID == w.ProviderOperationID ||
		!callback && d.lastResult.ProviderOperationID == "")
	key := KeyReceipt(d.id, w.Provider, w.ProviderOperationID, w.ProviderStatus, w.Code)
	lookup := !final && w.Source == "lookup" && (awaited || d.state == StateUnknown)
	if lookup {
		// Each lookup that finds the message still on its way is recorded, with when to ask
		// again; two reconcilers asking at once make one.
		key = KeyLookup(d.id, d.attempt, d.lookups+1)
	}
	if d.receipts[key] || !lookup && d.heard[wordKey(w.Provider, w.ProviderOperationID, w.Status, w.ProviderStatus)] {
		return nil, ErrReceiptSeen
	}
	if callback && !(awaited && final) && !resolves && d.callbacks[message] >= maxCallbackWords {
		return nil, fmt.Errorf("%w: %d callbacks about the message are recorded already", ErrReceiptSeen, d.callbacks[message])
	}
	if d.state == StateProcessing && d.awaiting == nil && !d.accepted[message] && !d.aboutEarlierAttempt(w) {
		// A call is in flight (with this provider or, after a failover, another): its answer
		// may be the acceptance this word is about.
		return nil, fmt.Errorf("%w: delivery %s attempt %d", ErrReceiptEarly, d.id, d.attempt)
	}
	data := ReceiptData{Provider: w.Provider, ProviderOperationID: w.ProviderOperationID, Status: w.Status,
		ProviderStatus: w.ProviderStatus, Code: w.Code, Detail: w.Detail, Source: w.Source}
	if !w.At.IsZero() {
		at := w.At.UTC()
		data.At = &at
	}
	switch {
	case awaited:
		data.Attempt = d.attempt
		if !final && !w.NextCheck.IsZero() {
			next := w.NextCheck.UTC()
			data.NextCheckAt = &next
		}
		events, err := d.record(now, EventReceiptRecorded, key, data)
		if err != nil || !final {
			return events, err
		}
		o := Outcome{Provider: w.Provider, ProviderOperationID: w.ProviderOperationID, ProviderCode: w.Code,
			Err: receiptText(w), Suppress: w.Suppress && w.Status == ReceiptFailed}
		o.Kind = map[string]OutcomeKind{ReceiptDelivered: OutcomeDelivered, ReceiptFailed: OutcomePermanent}[w.Status]
		if o.Kind == "" {
			o.Kind = OutcomeTransient
		}
		if o.Kind == OutcomeDelivered {
			o.Err = ""
		}
		decided, err := d.decideAccepted(o, w.Source, policy, now, jitter)
		return append(events, decided...), err
	case resolves:
		data.Attempt = d.attempt
		events, err := d.record(now, EventReceiptRecorded, key, data)
		if err != nil {
			return nil, err
		}
		kind := map[string]OutcomeKind{ReceiptDelivered: OutcomeDelivered, ReceiptFailed: OutcomePermanent}[w.Status]
		if kind == "" {
			kind = OutcomeTransient // retry or not found: it was not delivered, another attempt is safe
		}
		resolved, err := d.Reconcile(Outcome{Kind: kind, ProviderOperationID: w.ProviderOperationID},
			w.Source+" from "+w.Provider+": "+receiptText(w), w.Source, policy, now, jitter)
		return append(events, resolved...), err
	default:
		if !final && !w.NextCheck.IsZero() && d.state == StateUnknown {
			next := w.NextCheck.UTC()
			data.NextCheckAt = &next
		}
		if final {
			data.Evidence = "changes nothing: the attempt it is about is decided, or the message is not the delivery's current attempt"
		}
		return d.record(now, EventReceiptRecorded, key, data)
	}
}

// aboutEarlierAttempt reports whether w names the message of the attempt before the current
// one (its provider's id for it, kept in the result that closed it): a late or repeated word
// about it cannot be the acceptance the call in flight waits for, so it is evidence now rather
// than refused until the call ends (a provider that does not resend would lose it).
func (d *Delivery) aboutEarlierAttempt(w ReceiptWord) bool {
	r := d.lastResult
	return w.ProviderOperationID != "" && r != nil && r.Attempt < d.attempt && r.Provider == w.Provider &&
		r.ProviderOperationID == w.ProviderOperationID
}

// decideAccepted records the outcome that decides an attempt the provider accepted.
func (d *Delivery) decideAccepted(o Outcome, source string, policy RetryPolicy, now time.Time, jitter float64) ([]Event, error) {
	acc := d.awaiting
	events, err := d.RecordOutcome(d.attempt, o, policy, now, jitter)
	if err != nil {
		return nil, err
	}
	// The outcome's data says what decided it, and which provider took the message.
	var res AttemptResult
	_ = json.Unmarshal(events[0].Data, &res)
	res.Source, res.StatusCode = source, acc.StatusCode
	events[0].Data = encode(res)
	d.lastResult = &res
	return events, nil
}

// GiveUpWaiting records that no receipt or lookup decided an accepted attempt by its deadline:
// the outcome is unknown (the provider took the message, and no one says whether it arrived).
func (d *Delivery) GiveUpWaiting(evidence string, policy RetryPolicy, now time.Time) ([]Event, error) {
	if d.state != StateProcessing || d.awaiting == nil {
		return nil, fmt.Errorf("%w: delivery %s is %s and not waiting for a receipt", ErrStaleAttempt, d.id, d.state)
	}
	o := Outcome{Kind: OutcomeUnknown, Provider: d.awaiting.Provider, ProviderOperationID: d.awaiting.ProviderOperationID, Err: evidence}
	policy.RetryUnknown = false // a message the provider took is not resent on a deadline
	return d.decideAccepted(o, "deadline", policy, now, 0)
}

// receiptText renders a provider's word for the history.
func receiptText(w ReceiptWord) string {
	text := w.ProviderStatus
	if w.Code != "" {
		text += " (code " + w.Code + ")"
	}
	if w.Detail != "" {
		text += ": " + w.Detail
	}
	return text
}

// ErrNotUnknown: only an unknown outcome can be reconciled.
var ErrNotUnknown = errors.New("delivery outcome is not unknown")

// Reconcile resolves the unknown outcome of the latest attempt with evidence: delivered, failed
// for good (dead), or not sent (retrying, if attempts are left; dead otherwise). An unknown
// outcome cannot resolve anything.
func (d *Delivery) Reconcile(o Outcome, evidence, actor string, policy RetryPolicy, now time.Time, jitter float64) ([]Event, error) {
	if d.state != StateUnknown {
		return nil, fmt.Errorf("%w: delivery %s is %s", ErrNotUnknown, d.id, d.state)
	}
	res := Resolution{Attempt: d.attempt, Evidence: evidence, Actor: actor, StatusCode: o.StatusCode, ProviderOperationID: o.ProviderOperationID}
	key := KeyReconciled(d.id, d.attempt)
	switch o.Kind {
	case OutcomeDelivered:
		return d.record(now, EventReconciledDelivered, key, res)
	case OutcomePermanent:
		return d.record(now, EventReconciledDead, key, res)
	case OutcomeTransient:
		if d.AttemptsInCycle() >= d.maxAttempts {
			res.Exhausted = true
			return d.record(now, EventReconciledDead, key, res)
		}
		next := policy.NextAttemptAt(d.AttemptsInCycle(), now, jitter, o.RetryAfter).UTC()
		res.NextAttemptAt = &next
		return d.record(now, EventReconciledRetry, key, res)
	}
	return nil, fmt.Errorf("reconcile %s: outcome %q resolves nothing", d.id, o.Kind)
}

// ErrNotDead: only a dead delivery can be replayed.
var ErrNotDead = errors.New("delivery is not dead")

// ErrAlreadyReplayed: the dead cycle a replay asked for was replayed by someone else first.
// The error returned is an *AlreadyReplayedError naming that replay.
var ErrAlreadyReplayed = errors.New("delivery already replayed")

// AlreadyReplayedError is the refusal of a replay asked of a delivery as it was at Of, when
// another replay (at Version, by Job or Actor) took that cycle first: one replay per dead cycle,
// however many operators or jobs ask at once.
type AlreadyReplayedError struct {
	DeliveryID string
	Of         int
	// Version is the version of the replay that took the cycle; Job the replay job that made it
	// ("" when an operator replayed it alone), Actor who asked.
	Version    int
	Job, Actor string
}

func (e *AlreadyReplayedError) Error() string {
	return fmt.Sprintf("%v: delivery %s as of version %d was replayed at version %d by %s", ErrAlreadyReplayed,
		e.DeliveryID, e.Of, e.Version, e.By())
}

// Is makes errors.Is(err, ErrAlreadyReplayed) hold.
func (e *AlreadyReplayedError) Is(target error) bool { return target == ErrAlreadyReplayed }

// By names who replayed the cycle: "job <id>", or the actor.
func (e *AlreadyReplayedError) By() string {
	switch {
	case e.Job != "":
		return "job " + e.Job
	case e.Actor != "":
		return e.Actor
	}
	return "an operator"
}

// replayMark is one replay of the history: its version, and who made it.
type replayMark struct {
	version    int
	job, actor string
}

// Replay starts a new attempt cycle for a dead delivery (dead → queued): the same delivery, its
// history kept, its next attempt numbered on from the last one and allowed the full number of
// attempts again. The work message of that attempt must travel with the event.
func (d *Delivery) Replay(reason string, now time.Time) ([]Event, error) {
	return d.ReplayAs(ReplayAsk{Reason: reason}, now)
}

// ReplayAsk is an operator's replay: why, by whom, and whether an unknown outcome may be replayed.
type ReplayAsk struct {
	Reason string
	// Actor names who asked (recorded with the replay).
	Actor string
	// Unknown allows replaying a delivery whose outcome is unknown: its provider may have acted,
	// so the new cycle may send it a second time, and the event says so.
	Unknown bool
	// Of is the version at which the asker saw the delivery dead (or unknown): the cycle it asks
	// to replay. If a replay was recorded after Of, that cycle is someone else's to have
	// replayed, whatever the delivery's state now (it may have died again: a cycle this ask
	// never saw), and the ask is refused with *AlreadyReplayedError. 0 asks of the delivery as
	// it is.
	Of int
	// Job names the replay job that asks, recorded with the replay ("" for an operator's own).
	Job string
}

// ReplayAs is Replay with the whole ask: a dead delivery, or with ask.Unknown an unknown one,
// starts a new attempt cycle, unless the cycle ask.Of names was replayed already.
func (d *Delivery) ReplayAs(ask ReplayAsk, now time.Time) ([]Event, error) {
	if ask.Of > 0 {
		for _, r := range d.replays {
			if r.version > ask.Of {
				return nil, &AlreadyReplayedError{DeliveryID: d.id, Of: ask.Of, Version: r.version, Job: r.job, Actor: r.actor}
			}
		}
	}
	fromUnknown := d.state == StateUnknown && ask.Unknown
	if d.state != StateDead && !fromUnknown {
		return nil, fmt.Errorf("%w: delivery %s is %s", ErrNotDead, d.id, d.state)
	}
	// The key names the cycle: a second replay of the same dead cycle, made on the same history
	// by a writer that raced this one, meets the unique key instead of opening another cycle.
	cycle := d.cycle + 1
	return d.record(now, EventReplayed, KeyReplayed(d.id, cycle), Replayed{Attempt: d.attempt + 1, Cycle: cycle,
		Reason: ask.Reason, Actor: ask.Actor, FromUnknown: fromUnknown, Of: d.version, Job: ask.Job})
}

// ID returns the delivery's id.
func (d *Delivery) ID() string { return d.id }

// Tenant returns the tenant that owns the delivery.
func (d *Delivery) Tenant() string { return d.tenant }

// NotificationID returns the notification the delivery belongs to.
func (d *Delivery) NotificationID() string { return d.notificationID }

// Channel returns the delivery's channel (webhook, email, ...).
func (d *Delivery) Channel() string { return d.channel }

// Recipient returns the channel-specific address.
func (d *Delivery) Recipient() string { return d.recipient }

// Payload returns the JSON payload fixed at acceptance.
func (d *Delivery) Payload() json.RawMessage { return d.payload }

// PayloadExpired reports whether the payload's body left after the retention's payloads period:
// the delivery can no longer be sent (nor replayed).
func (d *Delivery) PayloadExpired() bool { return d.payloadExpired }

// Priority returns the delivery's priority class.
func (d *Delivery) Priority() Priority { return d.priority }

// MaxAttempts returns the number of attempts allowed in one cycle.
func (d *Delivery) MaxAttempts() int { return d.maxAttempts }

// RequestKey returns the caller's Idempotency-Key of the accept request.
func (d *Delivery) RequestKey() string { return d.requestKey }

// Trace returns the W3C traceparent of the request that accepted the delivery ("" when it was
// not traced).
func (d *Delivery) Trace() string { return d.trace }

// State returns the current state.
func (d *Delivery) State() State { return d.state }

// Version returns the version of the latest event.
func (d *Delivery) Version() int { return d.version }

// Attempt returns the number of the latest attempt queued or started.
func (d *Delivery) Attempt() int { return d.attempt }

// AttemptsInCycle returns how many attempts the current cycle has queued or started.
func (d *Delivery) AttemptsInCycle() int {
	if d.attempt < d.cycleStart {
		return 0
	}
	return d.attempt - d.cycleStart + 1
}

// Awaiting returns the provider's acceptance of the current attempt while no receipt, lookup or
// deadline has decided it, or nil.
func (d *Delivery) Awaiting() *ProviderAcceptance { return d.awaiting }

// LastResult returns the result of the latest closed attempt, or nil.
func (d *Delivery) LastResult() *AttemptResult { return d.lastResult }

// NextAttemptAt returns when the next attempt is due: for a retrying delivery, a deferred one,
// or a scheduled one (its send_at).
func (d *Delivery) NextAttemptAt() *time.Time { return d.nextDueAt }

// AcceptedAt returns when the delivery was accepted.
func (d *Delivery) AcceptedAt() time.Time { return d.acceptedAt }

// UpdatedAt returns when the latest event was recorded.
func (d *Delivery) UpdatedAt() time.Time { return d.updatedAt }

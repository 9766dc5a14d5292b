// Package commands holds the use cases of the ledger, one file each: accept (accept.go), record
// queued (record_queued.go), the attempt (attempt.go: start it, start_attempt.go; call the
// channel's providers with failover and breakers; record its outcome, record_outcome.go), defer
// and reroute (defer_attempt.go), receipts (receipts.go), the reconciler's lookups
// (reconciler.go), reconcile by an operator (reconcile.go), replay one or a page of deliveries
// (replay.go), replay jobs (replay_jobs.go), the redrive of held work (redrive.go) and the
// operators' reads (operator.go). Each decides with the domain aggregate (decide.go) and appends
// the resulting events through the ports declared here (ports.go); only the attempt and the reconciler
// talk to a network peer (a provider), and never inside a transaction.
package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// ArchivedError: the delivery's history has left the hot store for the archive (retention). It
// is also ErrNotFound, so that what only asks "is it here" goes on as before; what answers a
// caller names the segment.
type ArchivedError struct {
	DeliveryID string
	// Segment is the archive segment that holds the history (`ledger archive show ID`).
	Segment string
}

func (e *ArchivedError) Error() string {
	return fmt.Sprintf("delivery %s is archived in segment %s", e.DeliveryID, e.Segment)
}

// Is makes an archived delivery not found in the hot store.
func (e *ArchivedError) Is(target error) bool { return target == ErrNotFound }

// Errors of the EventStore contract. Adapters translate driver errors into them.
var (
	// ErrNotFound: no stream with that id (or not visible to the tenant).
	ErrNotFound = errors.New("delivery not found")
	// ErrVersionConflict: another writer appended to the stream first.
	ErrVersionConflict = errors.New("version conflict")
	// ErrDuplicate: every event of the append was recorded before under the same idempotency
	// keys; nothing was written. The earlier events are the result.
	ErrDuplicate = errors.New("events already recorded")
	// ErrRequestInFlight: a request with the same Idempotency-Key is still being processed.
	ErrRequestInFlight = errors.New("a request with this idempotency key is in flight")
	// ErrRecipientBlocked: a store checking an AcceptRecord's Guard found a recipient
	// suppressed or opted out; nothing was written.
	ErrRecipientBlocked = errors.New("a recipient of the accept is suppressed or opted out")
	// ErrRequestMismatch: the Idempotency-Key was used before with a different request body.
	ErrRequestMismatch = errors.New("idempotency key reused with a different request")
	// ErrRequestTaken: another request stored its answer under the same Idempotency-Key first;
	// nothing was written. The caller reads that answer.
	ErrRequestTaken = errors.New("a request with this idempotency key was recorded meanwhile")
)

// OutboxMessage is a message that must reach the broker if and only if the transaction that
// appends its events commits.
type OutboxMessage struct {
	// ID is the message's unique id (consumers may dedupe on it).
	ID string
	// Topic is the broker destination (a work queue or a delay tier).
	Topic string
	// PartitionKey keeps related messages on one outbox shard (the delivery id).
	PartitionKey string
	Payload      []byte
	Metadata     map[string]string
}

// EventStore appends to and reads delivery streams.
type EventStore interface {
	// Load returns a delivery's events in version order, or ErrNotFound. An accepted event
	// carries its payload, however the store keeps it.
	Load(ctx context.Context, deliveryID string) ([]domain.Event, error)
	// Append writes the events (each Version is the next version of its stream) and the outbox
	// messages in one transaction: all or nothing. With no events it writes only the messages. It returns ErrDuplicate when every event's
	// key was already recorded, ErrVersionConflict when a version is taken by another event.
	Append(ctx context.Context, events []domain.Event, outbox []OutboxMessage) error
}

// AcceptRecord is one accept request to be recorded exactly once per (tenant, request key).
type AcceptRecord struct {
	Tenant      string
	RequestKey  string
	RequestHash []byte
	// NotificationID and Payload are the notification every event of the record belongs to and
	// its payload, which a store may keep once rather than in each accepted event (see
	// domain.WithPayloadApart); Load must then give the events back with their payload.
	NotificationID string
	Payload        []byte
	// PayloadApart asks the store to keep the payload apart even for a single delivery: its
	// tenant's payloads expire (retention.payloads), and only a payload kept apart can lose its
	// body while the history keeps its SHA-256.
	PayloadApart bool
	Events       []domain.Event
	Outbox       []OutboxMessage
	// Response is the answer to store and to give again to a repeat of the same request, as
	// EncodeAcceptAnswer gives it (DecodeAcceptAnswer reads it). The store keeps its bytes as
	// they are.
	Response []byte
	// Guard, when set, asks the store to check within the accept's transaction that none of
	// these recipients is blocked, and to refuse the record with ErrRecipientBlocked, writing
	// nothing, when one is: the record was built as if none were (a store that GuardsRecipients).
	Guard *RecipientGuard
}

// RecipientGuard is the probe an accept leaves to its store's transaction: the tenant's
// recipients under the category whose opt-outs apply ("" for none).
type RecipientGuard struct {
	Tenant, Category string
	Refs             []RecipientRef
}

// RecipientGuarding is an AcceptStore that checks AcceptRecord.Guard in the accept's own
// transaction, so the common accept (no recipient blocked) needs no probe of its own.
type RecipientGuarding interface {
	GuardsRecipients() bool
}

// AcceptStore records accept requests under the caller's Idempotency-Key.
type AcceptStore interface {
	// RecordAccept commits the record's events, outbox messages and response in one
	// transaction, unless the key was used before: then it returns the stored response and
	// replayed=true (same hash), or ErrRequestMismatch (other hash). A concurrent request with
	// the same key gets ErrRequestInFlight.
	RecordAccept(ctx context.Context, rec AcceptRecord) (response []byte, replayed bool, err error)
}

// StoredRequest is an operator's request under an Idempotency-Key and the answer a repeat of it
// gets.
type StoredRequest struct {
	Tenant   string
	Key      string
	Hash     []byte
	Response []byte
}

// RequestStore keeps operators' requests under their Idempotency-Key, so a repeated request is
// answered with the first one's answer instead of being carried out again.
type RequestStore interface {
	// RequestGet returns the request stored under (tenant, key), or ErrNotFound.
	RequestGet(ctx context.Context, tenant, key string) (StoredRequest, error)
	// RequestPut stores a request's answer; a key already stored gives ErrRequestTaken.
	RequestPut(ctx context.Context, r StoredRequest) error
	// AppendRequest is EventStore.Append that also stores r in the same transaction: all or
	// nothing. A key already stored gives ErrRequestTaken (and nothing is written).
	AppendRequest(ctx context.Context, r StoredRequest, events []domain.Event, outbox []OutboxMessage) error
}

// Topics names the broker destinations of work messages.
type Topics interface {
	// Work is the queue a channel's attempts are consumed from.
	Work(channel string, priority domain.Priority) string
	// Retry is the delay tier that holds a message for at least delay (or the largest tier).
	Retry(channel string, delay time.Duration) string
	// Hop is the delay queue a message due in delay takes next, and how long it holds it: the
	// longest of the channel's waits (its retry tiers and the deferral waits) not longer than
	// delay, or the shortest wait. A message hops until it is due (Reroute), so it comes back at
	// its due time, however long, and at most the shortest wait after it.
	Hop(channel string, delay time.Duration) (topic string, holds time.Duration)
	// Dead is the queue that receives a channel's dead letters.
	Dead(channel string) string
}

// Clock tells the time; tests inject their own.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns the current UTC time at microsecond precision, PostgreSQL's, so an answer given
// before a round trip through the database shows the same instant as the stored event.
func (SystemClock) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// Sender is a provider adapter: it performs one attempt and reports a typed outcome. It never
// returns an error: every failure is an outcome (transient, permanent or unknown).
//
// The contract every implementation keeps (docs/design.md, "The Sender contract"; the
// conformance suite adapters/providers/provider/providertest checks it against each one's fake):
//
//   - Kind is unknown whenever the provider may have acted: a reset, EOF or timeout after the
//     whole request was written (SMTP: after the final "."), an answer that cannot be read as
//     proof. A duplicate send is only ever possible after such an outcome.
//   - NotSent (the adapter sets it) says the provider cannot have acted: the call failed before
//     the request was written (refused, DNS, TLS; SMTP before RCPT TO). Only a transient outcome
//     carries it. The attempt then moves to the channel's next provider whose breaker admits
//     it, at once and in the same attempt, recording a failover; after any other outcome the
//     attempt stays with the provider that answered.
//   - ProviderFault (the adapter sets it) says the outcome counts against the provider's
//     health: connection failures, timeouts, 5xx, refused credentials or setup. The attempt
//     reports it to the provider's breaker as BreakerFault, everything else as BreakerSuccess;
//     a refusal of one recipient or message is never a fault, nor is the end of ctx (the
//     worker's deadline or shutdown).
//   - FailedOver is the attempt's to set, never the adapter's.
//
// The kit (adapters/providers/provider: Exchange, Unanswered) draws these lines for HTTP
// providers, so that no adapter writes them again.
type Sender interface {
	// Provider names the provider in the history and in metrics ("webhook", "smtp", ...).
	Provider() string
	// Deduplicates reports whether the provider honours the idempotency key we pass, which makes
	// a repeated call for an attempt with an unknown outcome safe: StartAttempt then retries a
	// call a dead worker left without an outcome instead of recording unknown. It is a promise
	// of the provider's API, not of the receivers: none of the five senders can make it today
	// (Twilio's and Vonage's SMS APIs and Telegram's sendMessage take no idempotency key, an
	// SMTP relay queues whatever it is given, a webhook receiver may or may not drop a repeated
	// webhook-id), so all of them say false.
	Deduplicates() bool
	// Send performs the attempt. ctx carries the attempt's deadline.
	Send(ctx context.Context, msg WorkMessage) domain.Outcome
}

package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// WorkMessage is the body of a broker message: a snapshot of everything one attempt needs, so
// configuration changes after acceptance do not affect messages in flight.
type WorkMessage struct {
	DeliveryID  string          `json:"delivery_id"`
	Tenant      string          `json:"tenant"`
	Channel     string          `json:"channel"`
	Recipient   string          `json:"recipient"`
	Payload     json.RawMessage `json:"payload"`
	Priority    domain.Priority `json:"priority"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	// DueAt is when the attempt may start; a message that arrives earlier waits again.
	DueAt time.Time `json:"due_at"`
	// AcceptedAt is when the delivery was accepted (for accept → delivered latency).
	AcceptedAt time.Time `json:"accepted_at"`
	// RequestKey is the caller's Idempotency-Key, passed to providers that deduplicate.
	RequestKey string `json:"idempotency_key,omitempty"`
	// Window is when the attempt may start (the delivery's, fixed at acceptance); nil: always.
	Window *domain.Window `json:"window,omitempty"`
	// Category is the notification's category, when it has one; RecipientKey the recipient in
	// its channel's normal form, when that differs from Recipient. The email channel signs an
	// unsubscribe link over both (List-Unsubscribe, RFC 8058).
	Category     string `json:"category,omitempty"`
	RecipientKey string `json:"recipient_key,omitempty"`
}

// DeadLetter is the body of a dead queue message: the attempt snapshot and why it died, so an
// operator reading the queue can decide on replay without joining the ledger.
type DeadLetter struct {
	WorkMessage
	State    domain.State      `json:"state"`
	Class    domain.ErrorClass `json:"error_class"`
	Error    string            `json:"error,omitempty"`
	Attempts int               `json:"attempts"`
	DeadAt   time.Time         `json:"dead_at"`
}

// Metadata keys set on outbox messages.
const (
	// MetaMarkQueued tells the relay to record EventQueued once the broker confirmed the message.
	MetaMarkQueued = "ledger_mark_queued"
	// MetaPriority carries the message priority class; the delay tiers' return exchange routes
	// on it.
	MetaPriority = "ledger_priority"
	// MetaEnqueuedAt is when the message was written to the outbox (for relay lag).
	MetaEnqueuedAt = "ledger_enqueued_at"
)

// messageNamespace derives message ids from event keys, so a republished event keeps its id.
var messageNamespace = uuid.MustParse("6b1f0d5e-4c43-4b8e-9a55-1f5a3c2e7d10")

// snapshot is the attempt snapshot of d.
func snapshot(d *domain.Delivery, attempt int, dueAt time.Time) WorkMessage {
	m := WorkMessage{
		DeliveryID:  d.ID(),
		Tenant:      d.Tenant(),
		Channel:     d.Channel(),
		Recipient:   d.Recipient(),
		Payload:     d.Payload(),
		Priority:    d.Priority(),
		Attempt:     attempt,
		MaxAttempts: d.MaxAttempts(),
		DueAt:       dueAt,
		AcceptedAt:  d.AcceptedAt(),
		RequestKey:  d.RequestKey(),
		Window:      d.Window(),
		Category:    d.Category(),
	}
	if key := d.RecipientKey(); key != d.Recipient() {
		m.RecipientKey = key
	}
	return m
}

// workMessageFor builds the outbox message that carries the next attempt of d, with ctx's trace
// context in its metadata (the relay's publish continues it).
func workMessageFor(ctx context.Context, d *domain.Delivery, topic string, attempt int, dueAt time.Time, eventKey string, markQueued bool) (OutboxMessage, error) {
	body, err := encodeWork(snapshot(d, attempt, dueAt))
	if err != nil {
		return OutboxMessage{}, err
	}
	meta := map[string]string{MetaPriority: string(d.Priority()), MetaEnqueuedAt: time.Now().UTC().Format(time.RFC3339Nano)}
	if markQueued {
		meta[MetaMarkQueued] = "true"
	}
	tracing.Inject(ctx, meta)
	return OutboxMessage{
		ID:           uuid.NewSHA1(messageNamespace, []byte(eventKey)).String(),
		Topic:        topic,
		PartitionKey: d.ID(),
		Payload:      body,
		Metadata:     meta,
	}, nil
}

// deadLetterFor builds the dead queue message of a delivery that just died.
func deadLetterFor(ctx context.Context, d *domain.Delivery, topic, eventKey string, now time.Time) (OutboxMessage, error) {
	dl := DeadLetter{WorkMessage: snapshot(d, d.Attempt(), now), State: d.State(), Attempts: d.AttemptsInCycle(), DeadAt: now}
	if r := d.LastResult(); r != nil {
		dl.Class, dl.Error = r.Class, r.Error
	}
	body, err := json.Marshal(dl)
	if err != nil {
		return OutboxMessage{}, fmt.Errorf("encode dead letter for %s: %w", d.ID(), err)
	}
	meta := map[string]string{MetaPriority: string(d.Priority())}
	tracing.Inject(ctx, meta)
	return OutboxMessage{
		ID:           uuid.NewSHA1(messageNamespace, []byte(eventKey)).String(),
		Topic:        topic,
		PartitionKey: d.ID(),
		Payload:      body,
		Metadata:     meta,
	}, nil
}

// ticket names the message's attempt to the limiter, which keeps a rate's next slot for it.
func (m WorkMessage) ticket() string { return m.DeliveryID + "/" + strconv.Itoa(m.Attempt) }

func encodeWork(m WorkMessage) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode work message for %s: %w", m.DeliveryID, err)
	}
	return body, nil
}

// DecodeWorkMessage parses a broker message body.
func DecodeWorkMessage(body []byte) (WorkMessage, error) {
	var m WorkMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return WorkMessage{}, fmt.Errorf("decode work message: %w", err)
	}
	if m.DeliveryID == "" || m.Attempt < 1 {
		return WorkMessage{}, fmt.Errorf("decode work message: missing delivery id or attempt")
	}
	return m, nil
}

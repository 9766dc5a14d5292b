package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// Recipient is one (channel, address) pair of a notification.
type Recipient struct {
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	// Window, when set, is when its delivery may be attempted (the recipient's own, or the
	// notification's).
	Window *domain.Window `json:"-"`
}

// AcceptNotification asks to accept a notification for one or more recipients, atomically.
type AcceptNotification struct {
	Tenant string
	// RequestKey is the caller's Idempotency-Key; RequestHash identifies the request body.
	RequestKey  string
	RequestHash []byte
	Payload     json.RawMessage
	Priority    domain.Priority
	// MaxAttempts of zero takes the server's policy.
	MaxAttempts int
	Recipients  []Recipient
	// SendAt, when after the accept's now, schedules every delivery for that time (at most
	// domain.MaxSendAhead ahead); at or before it, they are sent at once.
	SendAt *time.Time
	// Category, when set, is a category the configuration declares: what the recipients'
	// preferences may opt out of.
	Category string
}

// AcceptedDelivery is one delivery of an accepted notification.
type AcceptedDelivery struct {
	ID        string `json:"id"`
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	// State is the state the accept left it in: accepted, scheduled or suppressed (empty in
	// the stored answers of accepts from before it was recorded).
	State domain.State `json:"state,omitempty"`
	// Suppression says what suppressed it (state suppressed).
	Suppression *domain.Suppressed `json:"suppression,omitempty"`
}

// AcceptResult is what the caller is told, first and on every repeat of the same request.
type AcceptResult struct {
	NotificationID string             `json:"notification_id"`
	Deliveries     []AcceptedDelivery `json:"deliveries"`
	AcceptedAt     time.Time          `json:"accepted_at"`
	// SendAt is set when the deliveries were scheduled: they are scheduled, not accepted.
	SendAt *time.Time `json:"send_at,omitempty"`
	// Replayed is true when the answer is the stored one of an earlier identical request.
	Replayed bool `json:"-"`
}

// AcceptHandler accepts notifications: the events, their work messages and the stored answer
// commit in one transaction, so a 2xx means durable.
type AcceptHandler struct {
	// OnAccepted, when set, is told of every newly accepted delivery (metrics).
	OnAccepted func(channel, priority string, n int)
	// MaxFanOutBytes bounds what one request may write: its payload's size times its
	// recipients, since every delivery's work message carries the payload. Zero means
	// DefaultMaxFanOutBytes.
	MaxFanOutBytes int
	// Suppression, when set, is probed for every recipient before the accept: a suppressed
	// recipient's delivery is recorded suppressed and never queued. Nil suppresses nothing and
	// declares no category.
	Suppression *SuppressionCheck
	// Normalize gives a recipient's normal form on its channel (Channels.Normalize), the key of
	// the suppression list; nil keeps the recipient as given.
	Normalize func(channel, recipient string) string
	// PayloadsExpire, when set, says whether a tenant's payload bodies expire: its accepts keep
	// the payload apart (AcceptRecord.PayloadApart).
	PayloadsExpire func(tenant string) bool

	store    AcceptStore
	topics   Topics
	clock    Clock
	policies Policies
}

// NewAcceptHandler builds the accept command. The MaxAttempts of a channel's retry policy is the
// default and the maximum of its deliveries' attempts.
func NewAcceptHandler(store AcceptStore, topics Topics, clock Clock, policies Policies) *AcceptHandler {
	return &AcceptHandler{store: store, topics: topics, clock: clock, policies: policies}
}

// DefaultMaxFanOutBytes is the default bound of a payload's size times its recipients: 16 MiB,
// a 16 KiB payload to the maximum of 1000 recipients, or a 1 MiB one to 16. It keeps one request
// from writing a gigabyte (a 1 MiB body to 1000 recipients) through one transaction.
const DefaultMaxFanOutBytes = 16 << 20

// ErrFanOutTooLarge: the payload times the recipients is more than one request may write.
var ErrFanOutTooLarge = errors.New("payload times recipients is too large")

// idNamespace derives notification ids and the random part of delivery ids from the caller's
// key and the recipient.
var idNamespace = uuid.MustParse("a4a3c6f2-8d0e-4f0e-b3f4-8b2c1d9e7a61")

// NotificationID is the id of the notification a tenant accepted under a request key.
func NotificationID(tenant, requestKey string) string {
	return uuid.NewSHA1(idNamespace, []byte(tenant+"\x00"+requestKey)).String()
}

// DeliveryID is the id of one recipient's delivery within a notification accepted at at: a
// version 7 UUID, whose first 48 bits are at in Unix milliseconds and whose other 74 bits come
// from a hash of the notification and the recipient.
//
// Time order is what makes the ledger's writes cheap: every index that starts with the delivery
// id (the events' stream and idempotency-key indexes, the status view's key) takes new entries
// at its right edge instead of at random pages, which keeps inserts cheap as the log grows
// (docs/benchmarks.md, "Figures once kept in code comments"). A repeated request does not derive the id again: it gets
// the stored answer of the first (accept_requests), so the same intent still names the same
// deliveries.
func DeliveryID(notificationID string, r Recipient, at time.Time) string {
	id := uuid.NewSHA1(idNamespace, []byte(notificationID+"\x00"+r.Channel+"\x00"+r.Recipient))
	ms := uint64(at.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	id[6] = 0x70 | id[6]&0x0f // version 7; the variant bits of the SHA-1 UUID stay
	return id.String()
}

// maxAttempts is the number of attempts of a delivery on channel: the channel's policy's, or the
// request's when it asks for fewer (it may not ask for more).
func (h *AcceptHandler) maxAttempts(channel string, requested int) (int, error) {
	allowed := h.policies(channel).MaxAttempts
	switch {
	case requested == 0:
		return allowed, nil
	case requested > allowed:
		return 0, fmt.Errorf("%w: max attempts %d is above the server's %d", domain.ErrInvalidDelivery, requested, allowed)
	}
	return requested, nil
}

// Handle records the notification, or returns the stored answer of an identical earlier request.
func (h *AcceptHandler) Handle(ctx context.Context, cmd AcceptNotification) (AcceptResult, error) {
	if len(cmd.Recipients) == 0 {
		return AcceptResult{}, fmt.Errorf("%w: no recipients", domain.ErrInvalidDelivery)
	}
	limit := h.MaxFanOutBytes
	if limit == 0 {
		limit = DefaultMaxFanOutBytes
	}
	if size := len(cmd.Payload) * len(cmd.Recipients); size > limit {
		return AcceptResult{}, fmt.Errorf("%w: a %d-byte payload to %d recipients writes %d bytes; at most %d per request",
			ErrFanOutTooLarge, len(cmd.Payload), len(cmd.Recipients), size, limit)
	}
	priority := cmd.Priority
	if priority == "" {
		priority = domain.PriorityNormal
	}
	now := h.clock.Now()
	scheduled, err := checkSendAt(cmd.SendAt, now)
	if err != nil {
		return AcceptResult{}, err
	}
	var categories Categories
	if h.Suppression != nil {
		categories = h.Suppression.Categories
	}
	if err := categories.Check(cmd.Category); err != nil {
		return AcceptResult{}, err
	}
	refs := make([]RecipientRef, len(cmd.Recipients))
	for i, r := range cmd.Recipients {
		refs[i] = RecipientRef{Channel: r.Channel, Recipient: r.Recipient}
		if h.Normalize != nil {
			refs[i].Recipient = h.Normalize(r.Channel, r.Recipient)
		}
	}
	// Either the store checks, in the accept's own transaction, that no recipient is blocked
	// (RecipientGuarding: the common case costs no round trip of its own), and a refusal sends
	// the accept through a probe; or one probe for every recipient comes before the
	// transaction. Either way a suppression committed before this request arrived is seen; one
	// that commits while the accept is under way is seen by the start of the attempt
	// (StartAttemptHandler), before any provider call.
	var blocks []domain.Block
	guarded := h.guarded()
	if !guarded {
		if blocks, err = h.Suppression.blocks(ctx, cmd.Tenant, cmd.Category, refs); err != nil {
			return AcceptResult{}, err
		}
	}
	rec, result, suppressed, err := h.record(ctx, cmd, refs, blocks, priority, scheduled, now)
	if err != nil {
		return AcceptResult{}, err
	}
	if guarded {
		rec.Guard = &RecipientGuard{Tenant: cmd.Tenant, Category: categories.preferenceCategory(cmd.Category), Refs: refs}
	}
	stored, replayed, err := h.store.RecordAccept(ctx, rec)
	if guarded && errors.Is(err, ErrRecipientBlocked) {
		if blocks, err = h.Suppression.blocks(ctx, cmd.Tenant, cmd.Category, refs); err != nil {
			return AcceptResult{}, err
		}
		if rec, result, suppressed, err = h.record(ctx, cmd, refs, blocks, priority, scheduled, now); err != nil {
			return AcceptResult{}, err
		}
		stored, replayed, err = h.store.RecordAccept(ctx, rec)
	}
	if err != nil {
		return AcceptResult{}, err
	}
	if replayed {
		// Compact, or the JSON of an answer stored before the compact form.
		earlier, err := DecodeAcceptAnswer(stored)
		if err != nil {
			return AcceptResult{}, fmt.Errorf("stored answer of %s/%s: %w", cmd.Tenant, cmd.RequestKey, err)
		}
		earlier.Replayed = true
		return earlier, nil
	}
	if h.OnAccepted != nil {
		for _, d := range result.Deliveries {
			h.OnAccepted(d.Channel, string(priority), 1)
		}
	}
	for _, d := range suppressed {
		h.Suppression.counted(d.Channel, d.Suppression.By)
	}
	return result, nil
}

// guarded reports whether the store checks the recipients in the accept's transaction.
func (h *AcceptHandler) guarded() bool {
	if h.Suppression == nil || h.Suppression.Store == nil {
		return false
	}
	g, ok := h.store.(RecipientGuarding)
	return ok && g.GuardsRecipients()
}

// record builds the accept's record and answer, with the recipients that blocks (nil: none)
// says are blocked recorded suppressed.
func (h *AcceptHandler) record(ctx context.Context, cmd AcceptNotification, refs []RecipientRef, blocks []domain.Block,
	priority domain.Priority, scheduled bool, now time.Time) (AcceptRecord, AcceptResult, []AcceptedDelivery, error) {
	// In UTC: the stored answer keeps the instant, and a repeat reads it back in UTC.
	result := AcceptResult{NotificationID: NotificationID(cmd.Tenant, cmd.RequestKey), AcceptedAt: now.UTC()}
	if scheduled {
		sendAt := cmd.SendAt.UTC()
		result.SendAt = &sendAt
	}
	rec := AcceptRecord{Tenant: cmd.Tenant, RequestKey: cmd.RequestKey, RequestHash: cmd.RequestHash,
		NotificationID: result.NotificationID, Payload: cmd.Payload,
		PayloadApart: h.PayloadsExpire != nil && h.PayloadsExpire(cmd.Tenant)}
	var suppressed []AcceptedDelivery
	for i, r := range cmd.Recipients {
		maxAttempts, err := h.maxAttempts(r.Channel, cmd.MaxAttempts)
		if err != nil {
			return AcceptRecord{}, AcceptResult{}, nil, err
		}
		d, events, err := domain.Accept(domain.AcceptSpec{
			ID:             DeliveryID(result.NotificationID, r, now),
			Tenant:         cmd.Tenant,
			NotificationID: result.NotificationID,
			Channel:        r.Channel,
			Recipient:      r.Recipient,
			Payload:        cmd.Payload,
			Priority:       priority,
			MaxAttempts:    maxAttempts,
			RequestKey:     cmd.RequestKey,
			Trace:          tracing.Traceparent(ctx),
			Window:         r.Window,
			RecipientKey:   keyIfNormalised(refs[i].Recipient, r.Recipient),
			Category:       cmd.Category,
		}, now)
		if err != nil {
			return AcceptRecord{}, AcceptResult{}, nil, err
		}
		if blocks != nil && blocks[i].Blocks() {
			// Never queued and never scheduled: the event names what suppresses it.
			more, err := d.Suppress(blocks[i], now)
			if err != nil {
				return AcceptRecord{}, AcceptResult{}, nil, err
			}
			rec.Events = append(rec.Events, append(events, more...)...)
			entry := AcceptedDelivery{ID: d.ID(), Channel: r.Channel, Recipient: r.Recipient, State: domain.StateSuppressed,
				Suppression: d.Suppression()}
			result.Deliveries = append(result.Deliveries, entry)
			suppressed = append(suppressed, entry)
			continue
		}
		if scheduled {
			// No work message yet: the due pass queues the delivery at its time.
			more, err := d.Schedule(*cmd.SendAt, now)
			if err != nil {
				return AcceptRecord{}, AcceptResult{}, nil, err
			}
			rec.Events = append(rec.Events, append(events, more...)...)
			result.Deliveries = append(result.Deliveries, AcceptedDelivery{ID: d.ID(), Channel: r.Channel, Recipient: r.Recipient,
				State: domain.StateScheduled})
			continue
		}
		// The accept's span is the root of the delivery's trace: its messages name it, and
		// every later hop starts under it (tracing.Continue).
		msg, err := workMessageFor(tracing.Root(ctx), d, h.topics.Work(d.Channel(), d.Priority()), 1, now,
			domain.KeyAccepted(d.ID()), true)
		if err != nil {
			return AcceptRecord{}, AcceptResult{}, nil, err
		}
		rec.Events = append(rec.Events, events...)
		rec.Outbox = append(rec.Outbox, msg)
		result.Deliveries = append(result.Deliveries, AcceptedDelivery{ID: d.ID(), Channel: r.Channel, Recipient: r.Recipient,
			State: domain.StateAccepted})
	}
	response, err := EncodeAcceptAnswer(result)
	if err != nil {
		return AcceptRecord{}, AcceptResult{}, nil, err
	}
	rec.Response = response
	return rec, result, suppressed, nil
}

// keyIfNormalised is the recipient key to record: the normal form when it differs from the
// recipient as given, else nothing (Delivery.RecipientKey falls back to the recipient).
func keyIfNormalised(key, recipient string) string {
	if key == recipient {
		return ""
	}
	return key
}

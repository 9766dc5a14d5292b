package domain

import (
	"fmt"
	"time"
)

// A suppression list entry says that a tenant sends nothing more to one recipient on one
// channel: the provider said so (hard evidence: a mailbox that does not exist, a number that
// replied STOP, a blocked bot, a webhook that is Gone) or someone did. A preference says that the
// recipient opted out of one category of notifications. Both are kept per tenant, keyed by the
// channel and the recipient in its channel's normal form, each as a stream of events of its own
// (adapters/postgres, the recipient_events table); a delivery only ever reads them, at its accept
// and at the start of each attempt, and ends suppressed when one applies.

// Sources of a suppression list entry.
const (
	// SuppressionByProvider: a provider's answer to one of the tenant's deliveries is the
	// evidence (Outcome.Suppress).
	SuppressionByProvider = "provider"
	// SuppressionManual: added through the API or the console, with an actor and a reason.
	SuppressionManual = "manual"
	// SuppressionImport: added by `ledger suppressions import`.
	SuppressionImport = "import"
)

// Why a delivery is suppressed (Suppressed.By).
const (
	// SuppressedByList: the recipient is on the tenant's suppression list.
	SuppressedByList = "suppression"
	// SuppressedByPreference: the recipient opted out of the delivery's category.
	SuppressedByPreference = "preference"
)

// SuppressionEvidence is why an entry is on the list: the delivery event whose provider answer
// caused it, or the actor and reason of a manual add.
type SuppressionEvidence struct {
	// DeliveryID and EventVersion name the event that is the evidence (a dead letter whose
	// data says suppresses); Provider and ProviderCode are its answer ("550 5.1.1", "21610").
	DeliveryID   string `json:"delivery_id,omitempty"`
	EventVersion int    `json:"event_version,omitempty"`
	Provider     string `json:"provider,omitempty"`
	ProviderCode string `json:"provider_code,omitempty"`
	// Actor is who added it by hand (or imported it).
	Actor string `json:"actor,omitempty"`
}

// Suppression is one entry of a tenant's suppression list as a delivery reads it.
type Suppression struct {
	ID        string              `json:"id"`
	Tenant    string              `json:"-"`
	Channel   string              `json:"channel"`
	Recipient string              `json:"recipient"`
	Source    string              `json:"source"`
	Reason    string              `json:"reason,omitempty"`
	Evidence  SuppressionEvidence `json:"evidence"`
	CreatedAt time.Time           `json:"created_at"`
	// RemovedAt, RemovedBy and RemovedReason are set once the entry was removed: it no longer
	// suppresses anything, and its history stays.
	RemovedAt     *time.Time `json:"removed_at,omitempty"`
	RemovedBy     string     `json:"removed_by,omitempty"`
	RemovedReason string     `json:"removed_reason,omitempty"`
}

// Preference is a recipient's choice about one category on one channel.
type Preference struct {
	Channel   string    `json:"channel"`
	Recipient string    `json:"recipient"`
	Category  string    `json:"category"`
	OptedOut  bool      `json:"opted_out"`
	Source    string    `json:"source"`
	Actor     string    `json:"actor,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Sources of a preference.
const (
	// PreferenceByAPI: set through PUT /v1/preferences.
	PreferenceByAPI = "api"
	// PreferenceByUnsubscribe: the recipient's one-click unsubscribe (RFC 8058).
	PreferenceByUnsubscribe = "unsubscribe"
)

// Suppressed is the data of EventSuppressed: what stops the delivery, with its evidence.
type Suppressed struct {
	// By is SuppressedByList or SuppressedByPreference.
	By string `json:"by"`
	// SuppressionID, Source, Reason and Evidence name the list entry (By suppression).
	SuppressionID string               `json:"suppression_id,omitempty"`
	Source        string               `json:"source,omitempty"`
	Reason        string               `json:"reason,omitempty"`
	Evidence      *SuppressionEvidence `json:"evidence,omitempty"`
	// Category is the category opted out of (By preference).
	Category string `json:"category,omitempty"`
	// From is the state the delivery was in: accepted (decided at its accept), scheduled or
	// queued (decided when an attempt was about to start).
	From State `json:"from"`
	// Attempt is the attempt that was about to start, when a worker decided it (0 at accept).
	Attempt int `json:"attempt,omitempty"`
}

// Block is what stops a delivery to one recipient: an entry of the suppression list or an
// opt-out of the delivery's category. The zero Block stops nothing.
type Block struct {
	Suppression *Suppression
	// OptedOut is the category the recipient opted out of ("" when none).
	OptedOut string
}

// Blocks reports whether b stops anything.
func (b Block) Blocks() bool { return b.Suppression != nil || b.OptedOut != "" }

// KeySuppressed is the key of a delivery's one suppression.
func KeySuppressed(id string) string { return id + "/suppressed" }

// Suppress ends a delivery no attempt of which is under way (accepted, scheduled, or queued for
// its next attempt) because b stops it: it is never sent. The accept calls it for a recipient
// already suppressed; a worker calls it at the start of an attempt when the suppression came
// after the accept (invariant 8: a suppression recorded before an accept commit is never
// followed by a provider call).
func (d *Delivery) Suppress(b Block, now time.Time) ([]Event, error) {
	if !b.Blocks() {
		return nil, fmt.Errorf("suppress %s: nothing suppresses it", d.id)
	}
	data := Suppressed{From: d.state}
	if d.state == StateQueued {
		data.Attempt = d.attempt
	}
	if s := b.Suppression; s != nil {
		evidence := s.Evidence
		data.By, data.SuppressionID, data.Source, data.Reason, data.Evidence = SuppressedByList, s.ID, s.Source, s.Reason, &evidence
	} else {
		data.By, data.Category = SuppressedByPreference, b.OptedOut
	}
	return d.record(now, EventSuppressed, KeySuppressed(d.id), data)
}

// Suppression returns what ended the delivery suppressed, or nil.
func (d *Delivery) Suppression() *Suppressed { return d.suppressed }

// RecipientKey returns the recipient in its channel's normal form: what the suppression list
// and the preferences are keyed by.
func (d *Delivery) RecipientKey() string {
	if d.recipientKey == "" {
		return d.recipient
	}
	return d.recipientKey
}

// Category returns the notification's category, or "".
func (d *Delivery) Category() string { return d.category }

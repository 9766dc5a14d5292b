package commands

import (
	"context"
	"errors"
	"time"
)

// ReceiptStatus is what a provider's delivery receipt or status lookup says of a message it
// accepted, in the ledger's terms; the provider's own word is kept beside it.
type ReceiptStatus string

const (
	// ReceiptPending: not final yet (Twilio's queued, sending, sent; Vonage's accepted,
	// buffered). Recorded, the state does not change.
	ReceiptPending ReceiptStatus = "pending"
	// ReceiptDelivered: the handset got it.
	ReceiptDelivered ReceiptStatus = "delivered"
	// ReceiptFailed: not delivered, and another attempt cannot help (an invalid or unreachable
	// number, the recipient opted out): dead.
	ReceiptFailed ReceiptStatus = "failed"
	// ReceiptRetry: not delivered, in a way a new attempt may mend (a carrier's temporary
	// failure): retrying, if attempts are left.
	ReceiptRetry ReceiptStatus = "retry"
	// ReceiptNotFound: a status lookup found no such message at the provider: it was never
	// sent, so another attempt is safe.
	ReceiptNotFound ReceiptStatus = "not_found"
)

// Receipt is a provider's word on one message it accepted, from its callback or a status lookup.
type Receipt struct {
	// Provider is the provider's name (the one that accepted the message).
	Provider string
	// OperationID is the provider's id of the message (Twilio's sid, Vonage's message-id).
	OperationID string
	// DeliveryID is the delivery, when the provider echoes our id back (Vonage's client-ref);
	// empty otherwise, and the ledger finds it by OperationID.
	DeliveryID string
	Status     ReceiptStatus
	// ProviderStatus is the provider's own status ("delivered", "undelivered", "expired").
	ProviderStatus string
	// Code is the provider's error code ("30003"), empty if none; Detail its text.
	Code   string
	Detail string
	// At is when the provider says the status was reached; zero when it does not say.
	At time.Time
}

// Errors of receipt parsing.
var (
	// ErrReceiptUnauthenticated: the callback's signature or secret is missing or wrong; the
	// callback is refused and nothing is recorded.
	ErrReceiptUnauthenticated = errors.New("receipt not authenticated")
	// ErrReceiptMalformed: the callback is authenticated but does not hold a receipt.
	ErrReceiptMalformed = errors.New("receipt malformed")
)

// LookupQuery says which message a status lookup asks about: by the provider's id when the
// acceptance was recorded, otherwise (the call timed out before the provider answered) by what
// was sent, to whom, and since when.
type LookupQuery struct {
	OperationID string
	DeliveryID  string
	Recipient   string
	// Text is the message body that was sent, to match a listed message.
	Text  string
	Since time.Time
}

// Lookup asks a provider what became of a message. Providers that cannot be asked (Vonage's
// SMS API) do not implement it; their outcomes wait for a receipt or an operator.
type Lookup interface {
	Lookup(ctx context.Context, q LookupQuery) (Receipt, error)
}

package domain

import "time"

// OutcomeKind says what an attempt's result means for the delivery.
type OutcomeKind string

const (
	// OutcomeDelivered: the provider accepted the notification.
	OutcomeDelivered OutcomeKind = "delivered"
	// OutcomeTransient: the provider did not act and may succeed later (timeout or reset before
	// the request was written, DNS temporary failure, HTTP 408/425/429/5xx).
	OutcomeTransient OutcomeKind = "transient"
	// OutcomePermanent: retrying cannot help (invalid destination, other 4xx, 3xx).
	OutcomePermanent OutcomeKind = "permanent"
	// OutcomeUnknown: the provider may have acted (timeout or reset after the request was
	// written, a worker died mid-call).
	OutcomeUnknown OutcomeKind = "unknown"
	// OutcomeAccepted: the provider took the message and will say later whether it was
	// delivered (an SMS gateway's receipt). The delivery stays processing, without holding a
	// worker, until a receipt, a status lookup or a deadline decides. A provider configured to
	// count its acceptance as delivery reports OutcomeDelivered instead.
	OutcomeAccepted OutcomeKind = "accepted"
)

// ErrorClass names why an attempt did not deliver, on the wire and in the history.
type ErrorClass string

// Error classes recorded in attempt results.
const (
	ClassTransient ErrorClass = "transient"
	ClassPermanent ErrorClass = "permanent"
	ClassUnknown   ErrorClass = "unknown"
	// ClassPanic: the adapter panicked; the message is dead-lettered with the panic recorded.
	ClassPanic ErrorClass = "panic"
)

// ClassOf is the error class an outcome of kind has unless an adapter says otherwise (panic):
// none for delivered.
func ClassOf(kind OutcomeKind) ErrorClass {
	switch kind {
	case OutcomeTransient:
		return ClassTransient
	case OutcomePermanent:
		return ClassPermanent
	case OutcomeUnknown:
		return ClassUnknown
	}
	return ""
}

// Outcome is the typed result of one attempt, as an adapter reports it.
type Outcome struct {
	Kind                OutcomeKind
	Class               ErrorClass // defaults to the class of Kind
	Provider            string
	StatusCode          int
	Latency             time.Duration
	ProviderOperationID string
	// ProviderCode is the provider's own code for the answer, kept with the attempt for audit:
	// an SMTP reply and enhanced code ("550 5.1.1"), a Telegram error_code, a Twilio error code.
	ProviderCode string
	// RetryAfter is the provider's requested wait (Retry-After), zero if none.
	RetryAfter time.Duration
	Err        string
	// NotSent says the request never reached the provider (connection refused, a name that
	// does not resolve, a TLS failure, a reset before the whole request was written; SMTP: the
	// session ended before RCPT TO): the same attempt may move on to the channel's next
	// provider at once. Set by the adapter, read by the attempt's failover. Only a transient
	// outcome can be NotSent; an unknown one never is (the provider may have sent it).
	NotSent bool
	// ProviderFault says the outcome counts against the provider's health (5xx, timeouts,
	// connection errors, refused credentials or setup), not against the recipient (an invalid
	// number) nor the caller (its context ended). Set by the adapter; the attempt reports it to
	// the provider's circuit breaker, which opens after its threshold of them.
	ProviderFault bool
	// Suppress says the answer is hard evidence that this recipient will never take a message
	// on this channel (SMTP 550 5.1.1, Twilio 21610 STOP, Telegram 403 blocked, webhook 410
	// Gone): the delivery dies and the recipient joins the tenant's suppression list, so later
	// deliveries to it are suppressed instead of sent. Set by the adapter, only on a permanent
	// outcome; soft answers (4xx SMTP, 429, 5xx, timeouts) never set it.
	Suppress bool
	// FailedOver lists the providers the attempt tried first, whose calls never reached them
	// (set by the attempt, never by an adapter).
	FailedOver []ProviderTry
	// ReceiptTimeout and ReceiptMaxWait (OutcomeAccepted) say when to ask the provider about a
	// message no receipt has decided, and when to stop waiting and call the outcome unknown.
	ReceiptTimeout time.Duration
	ReceiptMaxWait time.Duration
}

// ProviderTry is a provider an attempt tried before the one whose answer it records: the call
// did not reach it (its circuit was open, the connection was refused), so it cannot have sent.
type ProviderTry struct {
	Provider string `json:"provider"`
	Error    string `json:"error"`
}

// Defaults of the receipt wait of a provider that confirms delivery later.
const (
	DefaultReceiptTimeout = 10 * time.Minute
	DefaultReceiptMaxWait = 24 * time.Hour
)

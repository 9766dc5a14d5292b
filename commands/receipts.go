package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/deliveryledger/ledger/domain"
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
	// DeliveryID is the delivery: a lookup's (the reconciler asked about it), or the id a
	// provider's callback echoes back (Vonage's client-ref). A callback's is only checked: the
	// delivery is the one whose history has the provider accepting OperationID, and a
	// DeliveryID that names another is refused (ErrReceiptUnmatched).
	DeliveryID string
	Status     ReceiptStatus
	// ProviderStatus is the provider's own status ("delivered", "undelivered", "expired").
	ProviderStatus string
	// Code is the provider's error code ("30003"), empty if none; Detail its text.
	Code   string
	Detail string
	// At is when the provider says the status was reached; zero when it does not say.
	At time.Time
	// Suppress (a failed receipt) says the provider's code is hard evidence that the recipient
	// takes no more messages (domain.Outcome.Suppress): set by the adapter from its table of
	// suppressing codes, never on a receipt that is not failed.
	Suppress bool
}

// Errors of receipt parsing.
var (
	// ErrReceiptUnauthenticated: the callback's signature or secret is missing or wrong; the
	// callback is refused and nothing is recorded.
	ErrReceiptUnauthenticated = errors.New("receipt not authenticated")
	// ErrReceiptMalformed: the callback is authenticated but does not hold a receipt.
	ErrReceiptMalformed = errors.New("receipt malformed")
	// ErrReceiptUnmatched: no delivery's history has the provider accepting the callback's
	// message, or the delivery the callback names (Vonage's client-ref) is not the one that
	// has; nothing is recorded. Whoever holds a provider's callback secret must not write on,
	// or learn of, a delivery by naming it.
	ErrReceiptUnmatched = errors.New("receipt matches no delivery's message")
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

// OperationFinder finds the delivery whose attempt a provider accepted under an operation id.
type OperationFinder interface {
	// FindOperation returns the id of the delivery whose history records that provider
	// accepting a message under operationID, or ErrNotFound.
	FindOperation(ctx context.Context, provider, operationID string) (string, error)
}

// ErrReceiptEarly: the receipt is about a delivery whose call is still in flight (the provider
// called back before its own answer was recorded). Nothing is recorded; the provider should
// send it again shortly.
var ErrReceiptEarly = domain.ErrReceiptEarly

// RecordReceiptHandler records providers' receipts and lookups, and the decisions they carry.
type RecordReceiptHandler struct {
	store    EventStore
	finder   OperationFinder
	topics   Topics
	clock    Clock
	policies Policies
	jitter   func() float64
	patience time.Duration
	// OnDecided, when set, is told the channel and the state of each delivery a receipt moved.
	OnDecided func(channel string, state domain.State)
}

// NewRecordReceiptHandler builds the command.
func NewRecordReceiptHandler(store EventStore, finder OperationFinder, topics Topics, clock Clock, policies Policies) *RecordReceiptHandler {
	return &RecordReceiptHandler{store: store, finder: finder, topics: topics, clock: clock, policies: policies,
		jitter: rand.Float64, patience: receiptPatience}
}

// ReceiptResult is what recording a receipt did.
type ReceiptResult struct {
	DeliveryID string
	// Recorded is false when the same word was recorded before (nothing was written again).
	Recorded bool
	// State is the delivery's state after the receipt; Changed says whether the receipt moved it.
	State   domain.State
	Changed bool
}

// RecordReceipt is a provider's word to record.
type RecordReceipt struct {
	Receipt Receipt
	// Source is "receipt" (the provider's callback) or "lookup" (a status query).
	Source string
	// NextCheck (a lookup) is when to ask again if the message is still on its way.
	NextCheck time.Time
	// AtVersion (a lookup) is the delivery's version when the question was asked: if anything
	// was recorded since (a receipt, another reconciler's lookup), the answer is dropped, and
	// the delivery is looked at again on the next pass. Zero records whatever the version.
	AtVersion int
}

// Handle records cmd's word. A callback's delivery (Source "receipt") is the one whose history
// has the provider accepting Receipt.OperationID, found by that alone; a Receipt.DeliveryID
// beside it must name the same delivery. Either failing is ErrReceiptUnmatched, with nothing
// recorded. A lookup's delivery is its Receipt.DeliveryID, or when empty found the same way
// (ErrNotFound when there is none).
func (h *RecordReceiptHandler) Handle(ctx context.Context, cmd RecordReceipt) (ReceiptResult, error) {
	r := cmd.Receipt
	res := ReceiptResult{DeliveryID: r.DeliveryID, Recorded: true}
	callback := cmd.Source == "receipt"
	if callback || res.DeliveryID == "" {
		if r.OperationID == "" {
			return ReceiptResult{}, fmt.Errorf("%w: the receipt names no provider message", ErrReceiptMalformed)
		}
		id, err := h.patiently(ctx, cmd, func() (string, error) { return h.finder.FindOperation(ctx, r.Provider, r.OperationID) })
		switch {
		case callback && errors.Is(err, ErrNotFound):
			return ReceiptResult{}, fmt.Errorf("%w: no delivery has a message of %s under that id", ErrReceiptUnmatched, r.Provider)
		case err != nil:
			return ReceiptResult{}, err
		case callback && r.DeliveryID != "" && r.DeliveryID != id:
			return ReceiptResult{}, fmt.Errorf("%w: the message of %s is delivery %s's, not the one the callback names", ErrReceiptUnmatched, r.Provider, id)
		}
		res.DeliveryID = id
	}
	word := domain.ReceiptWord{Provider: r.Provider, ProviderOperationID: r.OperationID, Status: string(r.Status),
		ProviderStatus: r.ProviderStatus, Code: r.Code, Detail: r.Detail, Source: cmd.Source, At: r.At, NextCheck: cmd.NextCheck,
		Suppress: r.Suppress}
	var before domain.State
	stale := false
	var d *domain.Delivery
	_, err := h.patiently(ctx, cmd, func() (string, error) {
		var err error
		d, err = h.record(ctx, res.DeliveryID, cmd, word, &before, &stale)
		return "", err
	})
	if errors.Is(err, domain.ErrReceiptSeen) || stale {
		res.Recorded, err = false, nil
	}
	if errors.Is(err, domain.ErrReceiptForeign) {
		// The finder and the history disagree (a message id two deliveries were given?): the
		// history is believed.
		return ReceiptResult{}, fmt.Errorf("%w: %w", ErrReceiptUnmatched, err)
	}
	if err != nil {
		return res, err
	}
	res.State, res.Changed = d.State(), d.State() != before
	if res.Changed && h.OnDecided != nil {
		h.OnDecided(d.Channel(), d.State())
	}
	return res, nil
}

// receiptPatience is how long a callback waits for the acceptance it is about to be recorded:
// a provider may call back before its own answer to our call is in the ledger, and most
// providers do not send a refused callback again.
const receiptPatience = 2 * time.Second

// patiently runs fn, and runs it again while a callback is ahead of the acceptance it is about
// (the operation is not found yet, or the call is still in flight), for up to receiptPatience.
// A lookup is not patient: its answer is dropped and asked again on the next pass.
func (h *RecordReceiptHandler) patiently(ctx context.Context, cmd RecordReceipt, fn func() (string, error)) (string, error) {
	deadline := time.Now().Add(h.patience)
	pause := 50 * time.Millisecond
	for {
		v, err := fn()
		ahead := errors.Is(err, ErrNotFound) || errors.Is(err, domain.ErrReceiptEarly)
		if !ahead || cmd.Source != "receipt" || time.Now().Add(pause).After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// record decides the word on the delivery's history and appends it.
func (h *RecordReceiptHandler) record(ctx context.Context, id string, cmd RecordReceipt, word domain.ReceiptWord, before *domain.State, stale *bool) (*domain.Delivery, error) {
	return decide(ctx, h.store, id, nil, "record receipt for "+id, func(d *domain.Delivery) (decision, error) {
		now := h.clock.Now()
		*before = d.State()
		if cmd.AtVersion > 0 && d.Version() != cmd.AtVersion {
			*stale = true
			return decision{}, nil
		}
		events, err := d.RecordReceipt(word, h.policies(d.Channel()), now, h.jitter())
		if err != nil {
			return decision{}, err
		}
		if d.State() == *before {
			return decision{events: events}, nil // evidence: no message follows it
		}
		outbox, err := followUp(ctx, h.topics, d, events[len(events)-1].Key, now)
		return decision{events: events, outbox: outbox}, err
	})
}

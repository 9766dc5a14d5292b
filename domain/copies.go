package domain

// CopyVerdict is what a worker may do with a copy of an attempt's work message, given the
// delivery's history. The broker delivers at least once, so several copies of one message can
// reach workers (a republished batch, a redelivery after a consumer died); the history alone
// says which copy may call the provider, which one must record that an earlier call's outcome
// is unknown, and which ones have nothing to do.
type CopyVerdict string

const (
	// CopyQueueAndStart: the delivery waits for this attempt's queued record (the relay has not
	// written it yet, or the retry's delay just ended); record queued, then start.
	CopyQueueAndStart CopyVerdict = "queue_and_start"
	// CopyStart: the attempt is queued; start it.
	CopyStart CopyVerdict = "start"
	// CopyCallAgain: the attempt was started and not closed, this copy is a redelivery, and the
	// provider honours our idempotency key: calling it again under the same key cannot send twice.
	CopyCallAgain CopyVerdict = "call_again"
	// CopyRecordUnknown: the attempt was started and not closed and this copy is a redelivery: the
	// worker that started it is gone and the provider may have acted. The outcome is unknown.
	CopyRecordUnknown CopyVerdict = "record_unknown"
	// CopySkip: another copy owns the attempt (a fresh duplicate of a started one), the provider
	// accepted it and receipts decide, or the delivery has moved past it.
	CopySkip CopyVerdict = "skip"
)

// Calls reports whether a copy with this verdict calls the provider.
func (v CopyVerdict) Calls() bool {
	return v == CopyQueueAndStart || v == CopyStart || v == CopyCallAgain
}

// AwaitsQueue reports whether attempt's message is the next one the delivery waits for: it is
// accepted or retrying, and attempt is the one after its latest.
func (d *Delivery) AwaitsQueue(attempt int) bool {
	switch d.state {
	case StateAccepted, StateRetrying:
		return d.attempt+1 == attempt
	}
	return false
}

// CopyOf decides what a copy of attempt's work message may do. redelivered is the broker's flag
// (this copy was handed to a consumer before and not acked); deduplicates says the provider
// honours our idempotency key. This is invariant 3 of docs/design.md: a second call happens only
// where the first one's outcome is recorded unknown, or where the provider makes it harmless.
func (d *Delivery) CopyOf(attempt int, redelivered, deduplicates bool) CopyVerdict {
	switch {
	case d.AwaitsQueue(attempt):
		return CopyQueueAndStart
	case d.attempt != attempt:
		return CopySkip
	case d.state == StateQueued:
		return CopyStart
	case d.state != StateProcessing, d.awaiting != nil:
		// Closed, or accepted by the provider and acked: receipts decide, not a copy.
		return CopySkip
	case !redelivered:
		// A fresh copy of a started attempt is a republished duplicate: the consumer that
		// started it still owns it.
		return CopySkip
	case deduplicates:
		return CopyCallAgain
	default:
		return CopyRecordUnknown
	}
}

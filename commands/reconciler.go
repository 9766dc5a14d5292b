package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
	"go.opentelemetry.io/otel/trace"
)

// DueCheck is a delivery the reconciler should look at now: an attempt a provider accepted that
// no receipt decided by its check time, or an unknown outcome of a provider that can be asked.
type DueCheck struct {
	DeliveryID string
	Provider   string
	State      domain.State
	CheckAt    time.Time
	// GiveUpAt is when an accepted attempt with no word becomes unknown; nil for an unknown.
	GiveUpAt *time.Time
}

// ReceiptWaits finds the deliveries due a look. The status view answers it.
type ReceiptWaits interface {
	// DueChecks returns up to limit deliveries whose check time has come and that a lookup can
	// help (their provider is one of askable) or that are past their give-up time, oldest check
	// first.
	DueChecks(ctx context.Context, now time.Time, askable []string, limit int) ([]DueCheck, error)
}

// LookupProvider is a provider the reconciler may ask, and how.
type LookupProvider struct {
	Lookup Lookup
	// Recheck is how long after a lookup that found the message on its way to ask again (the
	// provider's receipt timeout).
	Recheck time.Duration
}

// ReconcilerConfig holds what the reconciler drives.
type ReconcilerConfig struct {
	Store    EventStore
	Waits    ReceiptWaits
	Receipts *RecordReceiptHandler
	Clock    Clock
	Policies Policies
	// Lookups are the providers that can be asked, by name.
	Lookups map[string]LookupProvider
	// Limiter, when set, bounds the lookups per provider (asked with the provider's name and
	// no destination); a lookup it refuses waits for the next pass.
	Limiter Limiter
	// UnknownAfter is how long after an unknown outcome the reconciler first asks its provider.
	// A provider that took the message while our call timed out may not list it yet, and a
	// lookup that finds no such message retries the delivery: asked too soon, it could send the
	// message twice. Zero asks at the first pass.
	UnknownAfter time.Duration
	// Batch is the most deliveries one pass looks at (default 200).
	Batch  int
	Logger *slog.Logger
	// OnDecided, when set, is told each decision a pass recorded ("gave_up", or the state a
	// lookup moved a delivery to).
	OnDecided func(channel, decision string)
}

// Reconciler resolves what can be resolved without a person: it asks providers about the
// messages they accepted and never confirmed, and about calls whose outcome is unknown, and
// records their answers as evidence with the decision they carry; when a receipt is overdue
// past its provider's patience it records the outcome unknown. It never sends anything: a
// delivery no provider can tell about stays unknown for an operator. Several reconcilers can
// run at once: each answer is recorded only on the version it was asked at.
type Reconciler struct {
	cfg ReconcilerConfig
	// backoff holds the deliveries whose last lookup failed (the provider did not answer), and
	// when to ask about each again: a provider that is down is not asked every pass.
	mu      sync.Mutex
	backoff map[string]lookupBackoff
}

// lookupBackoff is a delivery's run of failed lookups.
type lookupBackoff struct {
	failures int
	next     time.Time
}

// Bounds of the pause after failed lookups: it doubles from the first to the last.
const (
	lookupBackoffFirst = time.Second
	lookupBackoffMax   = 5 * time.Minute
)

// NewReconciler builds the reconciler.
func NewReconciler(cfg ReconcilerConfig) (*Reconciler, error) {
	var problems []error
	for _, dep := range []struct {
		name  string
		unset bool
	}{
		{"event store", cfg.Store == nil}, {"receipt waits", cfg.Waits == nil}, {"receipts", cfg.Receipts == nil},
		{"clock", cfg.Clock == nil}, {"retry policies", cfg.Policies == nil},
	} {
		if dep.unset {
			problems = append(problems, fmt.Errorf("reconciler: no %s", dep.name))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 200
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{cfg: cfg, backoff: map[string]lookupBackoff{}}, nil
}

// PassResult counts what one pass did.
type PassResult struct {
	Looked, Resolved, Pending, GaveUp, Skipped, Failed int
}

// Run makes a pass every interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		res, err := r.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("reconciler pass failed", "err", err)
		} else if res.Looked > 0 {
			r.cfg.Logger.Info("reconciler pass", "looked", res.Looked, "resolved", res.Resolved, "pending", res.Pending,
				"gave_up", res.GaveUp, "skipped", res.Skipped, "failed", res.Failed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass looks once at every delivery due a look (up to the batch size).
func (r *Reconciler) Pass(ctx context.Context) (PassResult, error) {
	var res PassResult
	askable := make([]string, 0, len(r.cfg.Lookups))
	for name := range r.cfg.Lookups {
		askable = append(askable, name)
	}
	due, err := r.cfg.Waits.DueChecks(ctx, r.cfg.Clock.Now(), askable, r.cfg.Batch)
	if err != nil {
		return res, err
	}
	now := r.cfg.Clock.Now()
	for _, c := range due {
		if ctx.Err() != nil {
			return res, nil
		}
		if r.backingOff(c.DeliveryID, now) || r.tooSoon(c, now) {
			res.Skipped++
			continue
		}
		res.Looked++
		lctx, outcome, err := r.look(ctx, c)
		if err != nil {
			res.Failed++
			wait := r.failed(c.DeliveryID, now)
			r.cfg.Logger.WarnContext(lctx, "reconciler cannot look at delivery", "delivery_id", c.DeliveryID, "provider", c.Provider,
				"err", err, "next_try_in", wait)
			continue
		}
		r.succeeded(c.DeliveryID)
		switch outcome {
		case "resolved":
			res.Resolved++
		case "pending":
			res.Pending++
		case "gave_up":
			res.GaveUp++
		default:
			res.Skipped++
		}
	}
	return res, nil
}

// tooSoon reports whether c is an unknown outcome younger than UnknownAfter (its check time is
// the time of the unknown).
func (r *Reconciler) tooSoon(c DueCheck, now time.Time) bool {
	return c.State == domain.StateUnknown && now.Sub(c.CheckAt) < r.cfg.UnknownAfter
}

// backingOff reports whether a delivery's last lookups failed and its next try is not due.
func (r *Reconciler) backingOff(id string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.backoff[id]
	return ok && now.Before(b.next)
}

// failed records a failed look at a delivery and returns the pause before the next.
func (r *Reconciler) failed(id string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.backoff[id]
	wait := min(lookupBackoffFirst<<min(b.failures, 20), lookupBackoffMax)
	b.failures++
	b.next = now.Add(wait)
	r.backoff[id] = b
	if len(r.backoff) > 10000 {
		for k, v := range r.backoff { // forget the ones long due: they were resolved elsewhere
			if now.Sub(v.next) > lookupBackoffMax {
				delete(r.backoff, k)
			}
		}
	}
	return wait
}

func (r *Reconciler) succeeded(id string) {
	r.mu.Lock()
	delete(r.backoff, id)
	r.mu.Unlock()
}

// look decides about one delivery: give up waiting, ask its provider, or leave it. It returns
// the context of the span of what it did (ctx when there is none), for the log.
func (r *Reconciler) look(ctx context.Context, c DueCheck) (context.Context, string, error) {
	events, err := r.cfg.Store.Load(ctx, c.DeliveryID)
	if err != nil {
		return ctx, "", err
	}
	d, err := domain.Rehydrate(events)
	if err != nil {
		return ctx, "", err
	}
	now := r.cfg.Clock.Now()
	acc := d.Awaiting()
	switch {
	case d.State() == domain.StateProcessing && acc != nil && !now.Before(acc.GiveUpAt):
		// A later hop of the delivery's trace, as a lookup is.
		ctx, span := r.span(ctx, d, "give up waiting", acc.Provider)
		defer span.End()
		outcome, err := r.giveUp(ctx, d, acc)
		tracing.Fail(span, err)
		return ctx, outcome, err
	case d.State() == domain.StateProcessing && acc != nil:
	case d.State() == domain.StateUnknown && d.LastResult() != nil:
	default:
		return ctx, "skipped", nil // the view was behind: the delivery moved on
	}
	provider := c.Provider
	if acc != nil {
		provider = acc.Provider
	} else if res := d.LastResult(); res.Provider != "" {
		provider = res.Provider
	}
	lp, ok := r.cfg.Lookups[provider]
	if !ok {
		return ctx, "skipped", nil
	}
	if r.cfg.Limiter != nil {
		release, ok, _, _ := r.cfg.Limiter.Acquire(provider, "")
		if !ok {
			return ctx, "skipped", nil // the provider's lookup budget is spent; next pass
		}
		defer release()
	}
	q := LookupQuery{DeliveryID: d.ID(), Recipient: d.Recipient(), Text: payloadText(d.Payload()), Since: attemptStart(events, d.Attempt())}
	if acc != nil {
		q.OperationID = acc.ProviderOperationID
	} else {
		q.OperationID = d.LastResult().ProviderOperationID
	}
	// The lookup is a later hop of the delivery's trace (a span under its root), and so is
	// what it records.
	ctx, span := r.span(ctx, d, "lookup "+provider, provider)
	defer span.End()
	receipt, err := lp.Lookup.Lookup(ctx, q)
	if err != nil {
		err = fmt.Errorf("lookup at %s: %w", provider, err)
		tracing.Fail(span, err)
		return ctx, "", err
	}
	receipt.Provider, receipt.DeliveryID = provider, d.ID()
	recheck := lp.Recheck
	if recheck <= 0 {
		recheck = domain.DefaultReceiptTimeout
	}
	got, err := r.cfg.Receipts.Handle(ctx, RecordReceipt{Receipt: receipt, Source: "lookup", NextCheck: now.Add(recheck), AtVersion: d.Version()})
	if err != nil {
		return ctx, "", err
	}
	switch {
	case got.Changed:
		if r.cfg.OnDecided != nil {
			r.cfg.OnDecided(d.Channel(), string(got.State))
		}
		return ctx, "resolved", nil
	case got.Recorded:
		return ctx, "pending", nil
	}
	return ctx, "skipped", nil
}

// span starts the span of a look at d (a lookup, giving up waiting) under the root of d's
// trace: a later hop, which no span of the trace waits for.
func (r *Reconciler) span(ctx context.Context, d *domain.Delivery, name, provider string) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return ctx, tracing.NoSpan
	}
	return tracing.StartHop(ctx, d.Trace(), name, trace.WithAttributes(tracing.DeliveryID.String(d.ID()),
		tracing.Channel.String(d.Channel()), tracing.Provider.String(provider)))
}

// giveUp records that an accepted attempt's receipt is overdue: its outcome is unknown.
func (r *Reconciler) giveUp(ctx context.Context, d *domain.Delivery, acc *domain.ProviderAcceptance) (string, error) {
	version := d.Version()
	recorded := false
	evidence := fmt.Sprintf("no receipt or lookup from %s decided message %s by %s (its receipt_max_wait)",
		acc.Provider, acc.ProviderOperationID, acc.GiveUpAt.Format(time.RFC3339))
	_, err := decide(ctx, r.cfg.Store, d.ID(), d, "give up waiting for "+d.ID(), func(d *domain.Delivery) (decision, error) {
		recorded = false
		if d.Version() != version {
			return decision{}, nil // something was recorded meanwhile; look again next pass
		}
		events, err := d.GiveUpWaiting(evidence, r.cfg.Policies(d.Channel()), r.cfg.Clock.Now())
		if err != nil {
			return decision{}, err
		}
		recorded = true
		return decision{events: events}, nil
	})
	if err != nil || !recorded {
		return "skipped", err
	}
	if r.cfg.OnDecided != nil {
		r.cfg.OnDecided(d.Channel(), "gave_up")
	}
	return "gave_up", nil
}

// payloadText is the text member of a payload (an SMS's body), which a provider's message list
// is matched against when its id was never received.
func payloadText(payload json.RawMessage) string {
	var p struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(payload, &p)
	return p.Text
}

// attemptStart is when the given attempt started, from the stream.
func attemptStart(events []domain.Event, attempt int) time.Time {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type != domain.EventAttemptStarted {
			continue
		}
		var s domain.AttemptStarted
		if json.Unmarshal(events[i].Data, &s) == nil && s.Attempt == attempt {
			return events[i].RecordedAt
		}
	}
	return time.Time{}
}

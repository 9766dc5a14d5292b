package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// Attempt is one work message as the transport hands it over: the attempt it carries, and what
// the broker says about this copy of it.
type Attempt struct {
	Message WorkMessage
	// MessageID is the broker message's id; the id of a reroute's hop derives from it, so a hop
	// that is republished keeps its id.
	MessageID string
	// Redelivered is the broker's flag: this copy was handed to a consumer before and not acked
	// (the consumer died, or its connection dropped).
	Redelivered bool
}

// Verdict is what the transport must do with a message once the attempt use case is done.
type Verdict int

const (
	// Ack: the message is done; what it asked for is in the ledger.
	Ack Verdict = iota
	// Requeue: give the message back for redelivery (the ledger could not be written, or a limit
	// may have room later).
	Requeue
	// Reject: reject without requeue; the message can never be handled (undecodable, or it does
	// not fit the ledger), and the broker dead-letters it to the channel's dead queue.
	Reject
)

// String names the verdict in logs.
func (v Verdict) String() string {
	switch v {
	case Ack:
		return "ack"
	case Requeue:
		return "requeue"
	case Reject:
		return "reject"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Limiter is the backpressure the attempt asks before calling a provider: a concurrency cap and
// a token bucket per provider and per destination. The answer comes at once or after a short,
// bounded wait for a slot (a tenth of a second by default), never after a provider's latency.
type Limiter interface {
	// Acquire asks whether a call of provider to destination may start now. When ok, the call
	// holds its slot until release is called (exactly once; a second call does nothing). When
	// not, nothing was taken, retryAfter is the suggested wait and reason names the rule that
	// refused.
	Acquire(provider, destination string) (release func(), ok bool, retryAfter time.Duration, reason string)
	// AcquireFor is Acquire for one attempt, named by ticket: a rate that refuses keeps its
	// next free slot for the ticket, retryAfter is the time until it, and the same ticket
	// asking from then on takes it. An attempt deferred by a rate is deferred once, to its slot.
	AcquireFor(ticket, provider, destination string) (release func(), ok bool, retryAfter time.Duration, reason string)
}

// BreakerResult is what a call tells its provider's circuit breaker.
type BreakerResult int

const (
	// BreakerSuccess: the provider answered (a delivery, an acceptance, or a refusal of this
	// one recipient, such as an invalid number, which says nothing about the provider).
	BreakerSuccess BreakerResult = iota
	// BreakerFault: the call counts against the provider's health (Outcome.ProviderFault).
	BreakerFault
	// BreakerIgnore: no call was made after all (a limit held it back, the attempt was not
	// started); it counts neither way.
	BreakerIgnore
)

// Breakers keeps a circuit breaker per provider: the health an attempt's failover follows.
type Breakers interface {
	// Allow asks whether a call of provider may go now. When ok, done must be called exactly
	// once with what the call showed. When not (the circuit is open, or half open with its
	// probe out), retryAfter is when it may admit a probe.
	Allow(provider string) (done func(BreakerResult), retryAfter time.Duration, ok bool)
}

// AttemptMetrics receives what the attempt observes. *metrics.Metrics implements it.
type AttemptMetrics interface {
	Attempt(channel, provider, outcome string, d time.Duration)
	InFlight(provider string, delta int)
	Delivered(channel string, sinceAccept time.Duration)
	Retry(channel string)
	Dead(channel, class string)
	Deferred(channel string)
}

// AttemptConfig holds what the attempt use case drives.
type AttemptConfig struct {
	Store    EventStore
	Topics   Topics
	Clock    Clock
	Policies Policies
	Channels *Channels
	// Limiter, when set, is asked before every provider call; nil limits nothing.
	Limiter Limiter
	// Breakers, when set, is asked before every provider call, and an attempt goes to the
	// first of its channel's providers whose breaker admits it; nil admits every call.
	Breakers Breakers
	// Metrics, when set, receives every attempt's observations.
	Metrics AttemptMetrics
	// Suppression, when set, is probed before every attempt's start: a recipient suppressed
	// since its accept ends the delivery suppressed, without a call. Nil suppresses nothing.
	Suppression *SuppressionCheck
	Logger      *slog.Logger
}

// Validate reports every missing dependency at once.
func (c AttemptConfig) Validate() error {
	var problems []error
	for _, dep := range []struct {
		name  string
		unset bool
	}{
		{"event store", c.Store == nil}, {"topics", c.Topics == nil}, {"clock", c.Clock == nil},
		{"retry policies", c.Policies == nil}, {"channels", c.Channels == nil},
	} {
		if dep.unset {
			problems = append(problems, fmt.Errorf("attempt: no %s", dep.name))
		}
	}
	return errors.Join(problems...)
}

// AttemptHandler runs the attempt a work message carries: it checks the due time and the
// limits, records the attempt's start, calls the channel's provider, records the typed outcome
// (the one mapping to the next state is domain.Delivery.RecordOutcome), and only then tells the
// transport to ack. Every path ends in a verdict; none loses the message.
type AttemptHandler struct {
	start    *StartAttemptHandler
	record   *RecordOutcomeHandler
	defers   *DeferAttemptHandler
	reroute  *RerouteHandler
	events   EventStore
	channels *Channels
	limiter  Limiter
	breakers Breakers
	metrics  AttemptMetrics
	clock    Clock
	logger   *slog.Logger
	// storeRetry is the first pause when the ledger cannot be written; it doubles up to 2 s.
	storeRetry time.Duration
	// storeWait bounds how long a handler waits for the ledger to take a write before it gives
	// its message back (see giveBackAfter).
	storeWait time.Duration
}

// giveBackAfter is how long a handler keeps its message while the ledger cannot be written
// before it gives the message back to the broker. A message given back counts against the
// quorum work queue's delivery limit (LEDGER_AMQP_DELIVERY_LIMIT, 20): with a budget of a few
// tries (under a second), a database outage of a quarter of a minute pushed healthy messages into
// the dead queue. Waiting instead, each handler holding its message, also stops the worker
// taking more (the prefetch is the handlers' count) until the database answers. Two minutes is
// far below RabbitMQ's consumer_timeout (30 minutes by default), after which the broker would
// close the channel of a consumer that holds a message unacknowledged; an outage longer than
// it costs one delivery of the limit per two minutes, 40 minutes for a limit of 20.
const giveBackAfter = 2 * time.Minute

// earlyTolerance is how early a message may arrive and wait out the rest of its delay in the
// handler rather than hop again: the delay queues' hops round down (Topics.Hop), so a message
// comes back at most the part of its delay no queue's length matches before its due time.
const earlyTolerance = 10 * time.Millisecond

// NewAttemptHandler builds the use case.
func NewAttemptHandler(cfg AttemptConfig) (*AttemptHandler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noAttemptMetrics{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	start := NewStartAttemptHandler(cfg.Store, cfg.Clock)
	start.topics, start.policies, start.Suppression = cfg.Topics, cfg.Policies, cfg.Suppression
	return &AttemptHandler{
		start:      start,
		record:     NewRecordOutcomeHandler(cfg.Store, cfg.Topics, cfg.Clock, cfg.Policies),
		defers:     NewDeferAttemptHandler(cfg.Store, cfg.Topics, cfg.Clock),
		reroute:    NewRerouteHandler(cfg.Store, cfg.Topics, cfg.Clock),
		channels:   cfg.Channels,
		limiter:    cfg.Limiter,
		breakers:   cfg.Breakers,
		events:     cfg.Store,
		metrics:    cfg.Metrics,
		clock:      cfg.Clock,
		logger:     cfg.Logger,
		storeRetry: 50 * time.Millisecond,
		storeWait:  giveBackAfter,
	}, nil
}

// Handle runs one attempt and says what to do with its message. Traced, the attempt is a span
// ("attempt <channel>") of the delivery's trace, with a span per provider call under it.
func (h *AttemptHandler) Handle(ctx context.Context, a Attempt) Verdict {
	msg := a.Message
	span := tracing.NoSpan
	if tracing.Enabled() {
		ctx, span = tracing.Start(ctx, "attempt "+msg.Channel, trace.WithAttributes(tracing.DeliveryID.String(msg.DeliveryID),
			tracing.Channel.String(msg.Channel), tracing.Attempt.Int(msg.Attempt)))
	}
	defer span.End()
	log := h.logger.With("channel", msg.Channel, "delivery_id", msg.DeliveryID, "attempt", msg.Attempt)
	ch, ok := h.channels.Lookup(msg.Channel)
	if !ok {
		log.ErrorContext(ctx, "work message for a channel this ledger does not serve, dead-lettering", "channel", msg.Channel)
		return Reject
	}
	// A message whose wait was longer than the hop it took arrives early: it hops again. One
	// within earlyTolerance of its due time waits out the rest here: a due time is a promise
	// (a provider's retry_after, a window's opening), and another hop would bring it back late.
	early := msg.DueAt.Sub(h.clock.Now())
	if early > 0 && early <= earlyTolerance {
		select {
		case <-ctx.Done():
		case <-time.After(early):
		}
	}
	if early > earlyTolerance {
		hop := uuid.NewSHA1(uuid.NameSpaceOID, []byte(a.MessageID+"/reroute")).String()
		err := h.untilStored(ctx, log, true, func() error {
			return h.reroute.Handle(ctx, Reroute{Message: msg, MessageID: hop})
		})
		if err != nil {
			log.ErrorContext(ctx, "cannot reroute early message, requeueing", "err", err)
			return Requeue
		}
		return Ack
	}

	// The attempt goes to the first provider, in the channel's order, whose breaker admits it
	// and whose limits have room; the ones passed over are in its result.
	c := &call{h: h, ch: ch, msg: msg}
	defer c.close()
	noStart := false
	if verdict, held, queued := h.heldByWindow(ctx, log, msg); held {
		return verdict
	} else if !queued {
		noStart = true
	}
	if wait, reason, ok := c.next(0); !ok && !noStart {
		// Nothing could take the call, and nothing was sent: the passed-over list is moot.
		c.tried, c.index = nil, 0
		verdict, deferred := h.deferAttempt(ctx, log, DeferAttempt{Message: msg, Reason: reason, Delay: wait})
		if deferred || verdict != Ack {
			return verdict
		}
		// Not deferred: the attempt is not queued (a worker died mid-call and this is the
		// redelivered copy, or another copy moved it on). Resolve that without a call.
		noStart = true
	}
	sender := c.sender()

	var started StartDecision
	var known *domain.Delivery
	err := h.untilStored(ctx, log, true, func() error {
		var err error
		started, known, err = h.start.Handle(ctx, StartAttempt{
			Message:              msg,
			Redelivered:          a.Redelivered,
			Provider:             sender.Provider(),
			ProviderDeduplicates: sender.Deduplicates(),
			NoStart:              noStart,
		})
		return err
	})
	if err != nil && !retryable(err) {
		// No stream, or a history the message does not fit: retrying cannot help.
		log.ErrorContext(ctx, "message does not fit the ledger, dead-lettering", "err", err)
		return Reject
	}
	if err != nil {
		log.ErrorContext(ctx, "cannot record attempt start, requeueing", "err", err)
		return Requeue
	}
	if started == StartNotNow {
		return Requeue // nothing was recorded; the limit may have room next time
	}
	if started != StartProceed {
		log.DebugContext(ctx, "attempt not started", "decision", started)
		return Ack
	}

	var outcome domain.Outcome
	if known != nil && known.PayloadExpired() && payloadMissing(msg.Payload) {
		// The message was built after the payload's body left (retention.payloads): a retry of
		// a replay that began before the expiry. There is nothing to send; a call would send an
		// empty body as if it were the notification.
		outcome = domain.Outcome{Kind: domain.OutcomePermanent, Provider: sender.Provider(), Err: errPayloadGoneText}
		log.WarnContext(ctx, "the payload expired before this attempt: ending the delivery without a call")
	} else {
		outcome = c.send(ctx)
	}
	// A call that never reached its provider cannot have sent anything: the same attempt moves
	// on to the next provider at once. After any other outcome, an unknown one above all (the
	// provider may have sent it), the attempt stays with the provider that answered.
	for outcome.NotSent && outcome.Kind == domain.OutcomeTransient {
		from := c.sender().Provider()
		c.passOver(outcome.Err)
		if _, _, ok := c.next(c.index + 1); !ok {
			break
		}
		// Recorded before the call, so that a worker that dies during it leaves a history that
		// names the provider it called. Without that record there is no call.
		err := h.untilStored(ctx, log, true, func() error {
			d, err := decide(ctx, h.events, msg.DeliveryID, known, "fail over "+msg.DeliveryID, func(d *domain.Delivery) (decision, error) {
				events, err := d.FailOver(from, c.sender().Provider(), outcome.Err, h.clock.Now())
				return decision{events: events}, err
			})
			if err == nil {
				known = d
			}
			return err
		})
		if err != nil {
			log.WarnContext(ctx, "cannot record failover; the attempt keeps its outcome", "from", from, "to", c.sender().Provider(), "err", err)
			c.release(BreakerIgnore)
			break
		}
		outcome = c.send(ctx)
	}
	outcome.FailedOver = c.tried
	var state domain.State
	// The outcome is known only here: keep trying to record it rather than requeue, because a
	// redelivered message would find the attempt started and could only record "unknown".
	rctx, rspan := ctx, tracing.NoSpan
	if tracing.Enabled() {
		rctx, rspan = tracing.Start(ctx, "record outcome", trace.WithAttributes(tracing.OutcomeKind.String(string(outcome.Kind))))
	}
	err = h.untilStored(rctx, log, false, func() error {
		var err error
		state, err = h.record.Handle(rctx, RecordOutcome{DeliveryID: msg.DeliveryID, Attempt: msg.Attempt, Outcome: outcome, Known: known})
		known = nil // a retry after a failed write reads the stream again
		return err
	})
	tracing.Fail(rspan, err)
	rspan.End()
	if err != nil {
		log.ErrorContext(ctx, "cannot record outcome, requeueing", "outcome", outcome.Kind, "err", err)
		return Requeue
	}
	h.observe(msg, outcome, state)
	if span.IsRecording() {
		span.SetAttributes(tracing.Provider.String(outcome.Provider), tracing.OutcomeKind.String(string(outcome.Kind)),
			tracing.StateAfter.String(string(state)))
		if outcome.Class != "" {
			span.SetAttributes(tracing.ErrorClass.String(string(outcome.Class)))
		}
	}
	log.DebugContext(ctx, "attempt recorded", "outcome", outcome.Kind, "state", state, "provider", outcome.Provider)
	return Ack
}

// errPayloadGoneText is the recorded error of an attempt that found its payload expired.
const errPayloadGoneText = "payload expired (retention.payloads) before this attempt: nothing to send, no provider was called"

// payloadMissing reports whether a work message carries no payload: the body of a delivery
// whose payload expired is null in the snapshot the message was built from.
func payloadMissing(p json.RawMessage) bool {
	return len(p) == 0 || string(p) == "null"
}

// call is one attempt's way through its channel's providers: the provider it is with, the
// breaker and limit slots it holds, and the providers passed over.
type call struct {
	h     *AttemptHandler
	ch    *Channel
	msg   WorkMessage
	index int
	// done reports to the current provider's breaker; slot frees the limit slots of its call.
	done  func(BreakerResult)
	slot  func()
	tried []domain.ProviderTry
}

func (c *call) sender() Sender { return c.ch.Providers[c.index] }

// next moves the call to the first provider from index on that its breaker admits, if its limits
// let the call through. When none is admitted, or the admitted one's limits refuse, ok is false,
// with how long to wait and why.
func (c *call) next(from int) (wait time.Duration, reason string, ok bool) {
	h := c.h
	for i := from; i < len(c.ch.Providers); i++ {
		p := c.ch.Providers[i].Provider()
		var done func(BreakerResult)
		if h.breakers != nil {
			d, retryIn, ok := h.breakers.Allow(p)
			if !ok {
				c.tried = append(c.tried, domain.ProviderTry{Provider: p, Error: "circuit open"})
				if wait == 0 || retryIn < wait {
					wait, reason = retryIn, "circuit open for every provider of channel "+c.ch.Name
				}
				continue
			}
			done = d
		}
		if h.limiter != nil {
			// A limit is no sign of ill health: the attempt waits for it rather than spill over
			// to the next provider (a number's rate limit protects a person, whichever provider
			// sends).
			release, ok, retryIn, why := h.limiter.AcquireFor(c.msg.ticket(), p, c.ch.destination(c.msg.Recipient))
			if !ok {
				if done != nil {
					done(BreakerIgnore)
				}
				return retryIn, why, false
			}
			c.slot = release
		}
		c.index, c.done = i, done
		return 0, "", true
	}
	return wait, reason, false
}

// send calls the current provider and reports the outcome to its breaker. Traced, the call is a
// span ("call <provider>") with the provider adapter's own spans under it (HTTP, SMTP).
func (c *call) send(ctx context.Context) domain.Outcome {
	sender := c.sender()
	span := tracing.NoSpan
	if tracing.Enabled() {
		ctx, span = tracing.Start(ctx, "call "+sender.Provider(), trace.WithAttributes(tracing.Provider.String(sender.Provider())))
	}
	outcome := c.h.call(ctx, sender, c.msg)
	// The call is over: its provider and destination slots go to the next call at once, not
	// after this outcome's commit, which is the ledger's work, not the destination's.
	c.freeSlot()
	if outcome.Provider == "" {
		outcome.Provider = sender.Provider()
	}
	if span.IsRecording() {
		span.SetAttributes(tracing.OutcomeKind.String(string(outcome.Kind)))
		if outcome.StatusCode != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", outcome.StatusCode))
		}
		if outcome.Class != "" {
			span.SetAttributes(tracing.ErrorClass.String(string(outcome.Class)))
		}
		if outcome.Kind != domain.OutcomeDelivered && outcome.Kind != domain.OutcomeAccepted {
			span.SetStatus(codes.Error, outcome.Err)
		}
	}
	span.End()
	c.h.metrics.Attempt(c.msg.Channel, outcome.Provider, string(outcome.Kind), outcome.Latency)
	result := BreakerSuccess
	if outcome.ProviderFault {
		result = BreakerFault
	}
	c.release(result)
	return outcome
}

// passOver records that the current provider's call never reached it.
func (c *call) passOver(reason string) {
	c.tried = append(c.tried, domain.ProviderTry{Provider: c.sender().Provider(), Error: reason})
}

// release tells the current provider's breaker what its call showed, once.
func (c *call) release(result BreakerResult) {
	if c.done != nil {
		c.done(result)
		c.done = nil
	}
}

// close frees what the call holds: a breaker that admitted a call that was never made, and the
// limit slots.
func (c *call) close() {
	c.release(BreakerIgnore)
	c.freeSlot()
}

// freeSlot frees the limit slots of the current provider's call, once.
func (c *call) freeSlot() {
	if c.slot != nil {
		c.slot()
		c.slot = nil
	}
}

// deferAttempt records that a limit held the attempt back and sends it through a delay tier. It
// reports whether it deferred; when it did not (the attempt is not queued), the caller still has
// to resolve the message.
func (h *AttemptHandler) deferAttempt(ctx context.Context, log *slog.Logger, cmd DeferAttempt) (Verdict, bool) {
	msg := cmd.Message
	var deferred bool
	err := h.untilStored(ctx, log, true, func() error {
		var err error
		deferred, err = h.defers.Handle(ctx, cmd)
		return err
	})
	if err != nil {
		log.ErrorContext(ctx, "cannot record deferral, requeueing", "err", err)
		return Requeue, false
	}
	if deferred {
		h.metrics.Deferred(msg.Channel)
	}
	return Ack, deferred
}

func (h *AttemptHandler) observe(msg WorkMessage, o domain.Outcome, state domain.State) {
	switch state {
	case domain.StateDelivered:
		if o.Kind == domain.OutcomeDelivered {
			h.metrics.Delivered(msg.Channel, h.clock.Now().Sub(msg.AcceptedAt))
		}
	case domain.StateRetrying:
		h.metrics.Retry(msg.Channel)
	case domain.StateDead:
		class := o.Class
		if class == "" {
			class = domain.ErrorClass(o.Kind)
		}
		h.metrics.Dead(msg.Channel, string(class))
	}
}

// call runs the provider adapter, turning a panic into a permanent outcome with the panic
// recorded.
func (h *AttemptHandler) call(ctx context.Context, sender Sender, msg WorkMessage) (outcome domain.Outcome) {
	started := time.Now()
	h.metrics.InFlight(sender.Provider(), 1)
	defer h.metrics.InFlight(sender.Provider(), -1)
	defer func() {
		if r := recover(); r != nil {
			h.logger.ErrorContext(ctx, "adapter panicked", "delivery_id", msg.DeliveryID, "panic", r, "stack", string(debug.Stack()))
			outcome = domain.Outcome{
				Kind:     domain.OutcomePermanent,
				Class:    domain.ClassPanic,
				Provider: sender.Provider(),
				Latency:  time.Since(started),
				Err:      fmt.Sprintf("adapter panic: %v", r),
			}
		}
	}()
	return sender.Send(ctx, msg)
}

// untilStored retries fn while it fails for reasons other than the ledger's rules (the database
// is down, a connection dropped): for up to h.storeWait when bounded, the time a handler keeps
// its message before giving it back (giveBackAfter), else until ctx ends. log is the attempt's
// (it names the delivery).
func (h *AttemptHandler) untilStored(ctx context.Context, log *slog.Logger, bounded bool, fn func() error) error {
	pause := h.storeRetry
	deadline := time.Now().Add(h.storeWait)
	for {
		err := fn()
		if err == nil || !retryable(err) || (bounded && time.Now().Add(pause).After(deadline)) {
			return err
		}
		log.WarnContext(ctx, "ledger write failed, retrying", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(pause*2, 2*time.Second)
	}
}

// retryable tells infrastructure failures from broken history, which retrying cannot mend.
func retryable(err error) bool {
	var transition *domain.TransitionError
	return !errors.As(err, &transition) && !errors.Is(err, ErrNotFound) &&
		!errors.Is(err, domain.ErrInvalidDelivery)
}

type noAttemptMetrics struct{}

func (noAttemptMetrics) Attempt(string, string, string, time.Duration) {}
func (noAttemptMetrics) InFlight(string, int)                          {}
func (noAttemptMetrics) Delivered(string, time.Duration)               {}
func (noAttemptMetrics) Retry(string)                                  {}
func (noAttemptMetrics) Dead(string, string)                           {}
func (noAttemptMetrics) Deferred(string)                               {}

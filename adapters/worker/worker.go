// Package worker runs delivery attempts: for each work message it checks the due time and the
// limits, records the attempt's start, calls the provider adapter, records the typed outcome,
// and only then acks the message.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/metrics"
	"github.com/deliveryledger/ledger/adapters/limit"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// Commands are the use cases a worker drives.
type Commands struct {
	Start   *commands.StartAttemptHandler
	Record  *commands.RecordOutcomeHandler
	Defer   *commands.DeferAttemptHandler
	Reroute *commands.RerouteHandler
}

// Worker handles the messages of one channel's work queues.
type Worker struct {
	cmds    Commands
	sender  commands.Sender
	limiter *limit.Limiter
	metrics *metrics.Metrics
	clock   commands.Clock
	logger  *slog.Logger
	// storeRetry is the first pause when the ledger cannot be written; it doubles up to 2 s.
	storeRetry time.Duration
}

// earlyTolerance is how early a message may arrive and still run: delay tiers round delays up,
// so only a delay longer than the largest tier (or clock skew) arrives earlier than this.
const earlyTolerance = 10 * time.Millisecond

// New builds a worker. limiter and m may be nil (no limits, no metrics).
func New(cmds Commands, sender commands.Sender, limiter *limit.Limiter, m *metrics.Metrics, clock commands.Clock, logger *slog.Logger) *Worker {
	if logger == nil {
		logger = slog.Default()
	}
	return &Worker{cmds: cmds, sender: sender, limiter: limiter, metrics: m, clock: clock, logger: logger, storeRetry: 50 * time.Millisecond}
}

// Handle processes one message; it is an amqp.Handler.
func (w *Worker) Handle(ctx context.Context, d amqp.Delivery) amqp.Verdict {
	msg, err := commands.DecodeWorkMessage(d.Message.Payload)
	if err != nil {
		w.logger.Error("undecodable work message, dead-lettering", "queue", d.Queue, "err", err)
		return amqp.DeadLetter
	}
	log := w.logger.With("delivery", msg.DeliveryID, "attempt", msg.Attempt)

	// A delay longer than the largest tier arrives early: send it round the tiers again.
	if early := msg.DueAt.Sub(w.clock.Now()); early > earlyTolerance {
		hop := uuid.NewSHA1(uuid.NameSpaceOID, []byte(d.Message.UUID+"/reroute")).String()
		err := w.untilStored(ctx, 5, func() error {
			return w.cmds.Reroute.Handle(ctx, commands.Reroute{Message: msg, MessageID: hop})
		})
		if err != nil {
			log.Error("cannot reroute early message, requeueing", "err", err)
			return amqp.Requeue
		}
		return amqp.Ack
	}

	noStart := false
	if w.limiter != nil {
		release, ok, retryIn, reason := w.limiter.Acquire(w.sender.Provider(), limit.HostOf(msg.Recipient))
		if !ok {
			verdict, deferred := w.deferAttempt(ctx, log, msg, reason, retryIn)
			if deferred || verdict != amqp.Ack {
				return verdict
			}
			// Not deferred: the attempt is not queued (a worker died mid-call and this is the
			// redelivered copy, or another copy moved it on). Resolve that without a call.
			noStart = true
		} else {
			defer release()
		}
	}

	var decision commands.StartDecision
	var known *domain.Delivery
	err = w.untilStored(ctx, 5, func() error {
		var err error
		decision, known, err = w.cmds.Start.Handle(ctx, commands.StartAttempt{
			Message:              msg,
			Redelivered:          d.Redelivered,
			Provider:             w.sender.Provider(),
			ProviderDeduplicates: w.sender.Deduplicates(),
			NoStart:              noStart,
		})
		return err
	})
	if err != nil && !retryable(err) {
		// No stream, or a history the message does not fit: retrying cannot help.
		log.Error("message does not fit the ledger, dead-lettering", "err", err)
		return amqp.DeadLetter
	}
	if err != nil {
		log.Error("cannot record attempt start, requeueing", "err", err)
		return amqp.Requeue
	}
	if decision == commands.StartNotNow {
		return amqp.Requeue // nothing was recorded; the limit may have room next time
	}
	if decision != commands.StartProceed {
		log.Debug("attempt not started", "decision", decision)
		return amqp.Ack
	}

	outcome := w.call(ctx, msg)
	w.metrics.Attempt(msg.Channel, outcome.Provider, string(outcome.Kind), outcome.Latency)
	var state domain.State
	// The outcome is known only here: keep trying to record it rather than requeue, because a
	// redelivered message would find the attempt started and could only record "unknown".
	err = w.untilStored(ctx, 0, func() error {
		var err error
		state, err = w.cmds.Record.Handle(ctx, commands.RecordOutcome{DeliveryID: msg.DeliveryID, Attempt: msg.Attempt, Outcome: outcome, Known: known})
		known = nil // a retry after a failed write reads the stream again
		return err
	})
	if err != nil {
		log.Error("cannot record outcome, requeueing", "outcome", outcome.Kind, "err", err)
		return amqp.Requeue
	}
	w.observe(msg, outcome, state)
	log.Debug("attempt recorded", "outcome", outcome.Kind, "state", state)
	return amqp.Ack
}

// deferAttempt records that a limit held the attempt back and sends it through a delay tier. It
// reports whether it deferred; when it did not (the attempt is not queued), the caller still has
// to resolve the message.
func (w *Worker) deferAttempt(ctx context.Context, log *slog.Logger, msg commands.WorkMessage, reason string, delay time.Duration) (amqp.Verdict, bool) {
	var deferred bool
	err := w.untilStored(ctx, 5, func() error {
		var err error
		deferred, err = w.cmds.Defer.Handle(ctx, commands.DeferAttempt{Message: msg, Reason: reason, Delay: delay})
		return err
	})
	if err != nil {
		log.Error("cannot record deferral, requeueing", "err", err)
		return amqp.Requeue, false
	}
	if deferred {
		w.metrics.Deferred(msg.Channel)
	}
	return amqp.Ack, deferred
}

func (w *Worker) observe(msg commands.WorkMessage, o domain.Outcome, state domain.State) {
	switch state {
	case domain.StateDelivered:
		if o.Kind == domain.OutcomeDelivered {
			w.metrics.Delivered(msg.Channel, w.clock.Now().Sub(msg.AcceptedAt))
		}
	case domain.StateRetrying:
		w.metrics.Retry(msg.Channel)
	case domain.StateDead:
		class := o.Class
		if class == "" {
			class = domain.ErrorClass(o.Kind)
		}
		w.metrics.Dead(msg.Channel, string(class))
	}
}

// call runs the adapter, turning a panic into a permanent outcome with the panic recorded.
func (w *Worker) call(ctx context.Context, msg commands.WorkMessage) (outcome domain.Outcome) {
	started := time.Now()
	w.metrics.InFlight(w.sender.Provider(), 1)
	defer w.metrics.InFlight(w.sender.Provider(), -1)
	defer func() {
		if r := recover(); r != nil {
			w.logger.Error("adapter panicked", "delivery", msg.DeliveryID, "panic", r, "stack", string(debug.Stack()))
			outcome = domain.Outcome{
				Kind:     domain.OutcomePermanent,
				Class:    domain.ClassPanic,
				Provider: w.sender.Provider(),
				Latency:  time.Since(started),
				Err:      fmt.Sprintf("adapter panic: %v", r),
			}
		}
	}()
	return w.sender.Send(ctx, msg)
}

// untilStored retries fn while it fails for reasons other than the ledger's rules (the database
// is down, a connection dropped): up to tries times, or until ctx ends when tries is 0.
func (w *Worker) untilStored(ctx context.Context, tries int, fn func() error) error {
	pause := w.storeRetry
	for i := 1; ; i++ {
		err := fn()
		if err == nil || !retryable(err) || (tries > 0 && i >= tries) {
			return err
		}
		w.logger.Warn("ledger write failed, retrying", "err", err, "in", pause)
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
	return !errors.As(err, &transition) && !errors.Is(err, commands.ErrNotFound) &&
		!errors.Is(err, domain.ErrInvalidDelivery)
}

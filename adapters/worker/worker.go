// Package worker runs delivery attempts: for each work message it records the attempt's start,
// calls the provider adapter, records the typed outcome, and only then acks the message.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// Worker handles the messages of one channel's work queue.
type Worker struct {
	start  *commands.StartAttemptHandler
	record *commands.RecordOutcomeHandler
	sender commands.Sender
	logger *slog.Logger
	// storeRetry is the first pause when the ledger cannot be written; it doubles up to 2 s.
	storeRetry time.Duration
}

// New builds a worker.
func New(start *commands.StartAttemptHandler, record *commands.RecordOutcomeHandler, sender commands.Sender, logger *slog.Logger) *Worker {
	if logger == nil {
		logger = slog.Default()
	}
	return &Worker{start: start, record: record, sender: sender, logger: logger, storeRetry: 50 * time.Millisecond}
}

// Handle processes one message; it is an amqp.Handler.
func (w *Worker) Handle(ctx context.Context, d amqp.Delivery) amqp.Verdict {
	msg, err := commands.DecodeWorkMessage(d.Message.Payload)
	if err != nil {
		w.logger.Error("undecodable work message, dead-lettering", "queue", d.Queue, "err", err)
		return amqp.DeadLetter
	}
	log := w.logger.With("delivery", msg.DeliveryID, "attempt", msg.Attempt)

	var decision commands.StartDecision
	err = w.untilStored(ctx, 5, func() error {
		var err error
		decision, _, err = w.start.Handle(ctx, commands.StartAttempt{
			Message:              msg,
			Redelivered:          d.Redelivered,
			Provider:             w.sender.Provider(),
			ProviderDeduplicates: w.sender.Deduplicates(),
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
	if decision != commands.StartProceed {
		log.Debug("attempt not started", "decision", decision)
		return amqp.Ack
	}

	outcome := w.call(ctx, msg)
	var state domain.State
	// The outcome is known only here: keep trying to record it rather than requeue, because a
	// redelivered message would find the attempt started and could only record "unknown".
	err = w.untilStored(ctx, 0, func() error {
		var err error
		state, err = w.record.Handle(ctx, commands.RecordOutcome{DeliveryID: msg.DeliveryID, Attempt: msg.Attempt, Outcome: outcome})
		return err
	})
	if err != nil {
		log.Error("cannot record outcome, requeueing", "outcome", outcome.Kind, "err", err)
		return amqp.Requeue
	}
	log.Debug("attempt recorded", "outcome", outcome.Kind, "state", state)
	return amqp.Ack
}

// call runs the adapter, turning a panic into a permanent outcome with the panic recorded.
func (w *Worker) call(ctx context.Context, msg commands.WorkMessage) (outcome domain.Outcome) {
	started := time.Now()
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

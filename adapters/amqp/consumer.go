package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/tracing"
)

// Delivery is one consumed message as a handler sees it.
type Delivery struct {
	Message *message.Message
	// Redelivered is the broker's flag: a consumer received this copy before and did not ack it.
	Redelivered bool
	Queue       string
}

// Handler processes one message and says what to do with it (commands.Ack, Requeue or
// Reject). ctx is cancelled when the consumer's shutdown deadline passes.
type Handler func(ctx context.Context, d Delivery) commands.Verdict

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	URL   string
	Queue string
	// Concurrency is the prefetch, and the number of handlers in flight unless Acquire is set.
	Concurrency int
	// Acquire, when set, gates each handler: it blocks until the message may run (a slot of a
	// scheduler shared by several consumers) and returns the slot's release.
	Acquire func(ctx context.Context) (release func(), err error)
	// ShutdownTimeout bounds how long in-flight handlers may run after the consumer is stopped.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
}

// Validate reports every problem at once.
func (c ConsumerConfig) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("amqp url is empty"))
	}
	if c.Queue == "" {
		errs = append(errs, errors.New("queue is empty"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency %d is below 1", c.Concurrency))
	}
	return errors.Join(errs...)
}

// Consumer feeds a queue's messages to a handler with bounded concurrency and manual acks. It
// consumes with amqp091 directly rather than watermill-amqp's subscriber, which handles one
// message at a time per subscription and can only requeue-or-drop on Nack: a worker needs both
// verdicts. Messages are decoded with Marshaler, the consumer-side replacement of watermill-amqp's
// default marshaler.
type Consumer struct {
	cfg       ConsumerConfig
	handler   Handler
	marshaler Marshaler
}

// NewConsumer builds a consumer.
func NewConsumer(cfg ConsumerConfig, handler Handler) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	return &Consumer{cfg: cfg, handler: handler}, nil
}

// Run consumes until ctx is cancelled, reconnecting with backoff when the connection drops. On
// cancellation it stops taking messages, lets in-flight handlers finish up to ShutdownTimeout,
// and gives back (requeues) what was prefetched but not started.
func (c *Consumer) Run(ctx context.Context) error {
	backoff := time.Duration(0)
	for {
		began := time.Now()
		err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		backoff = reconnectBackoff(backoff, time.Since(began))
		c.cfg.Logger.Warn("consumer session ended, reconnecting", "queue", c.cfg.Queue, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// The pause before a reconnect doubles from firstReconnect up to maxReconnect while sessions
// keep failing.
const (
	firstReconnect = 100 * time.Millisecond
	maxReconnect   = 5 * time.Second
)

// reconnectBackoff is the pause after a session that lasted lasted, the previous pause being
// prev (0: none yet). A session that outlasted the longest pause was a good one: what ended it
// is a new outage, retried from the first pause again rather than from where an outage hours
// ago left the backoff.
func reconnectBackoff(prev, lasted time.Duration) time.Duration {
	if prev == 0 || lasted > maxReconnect {
		return firstReconnect
	}
	return min(prev*2, maxReconnect)
}

func (c *Consumer) session(ctx context.Context) error {
	conn, err := Dial(c.cfg.URL)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Qos(c.cfg.Concurrency, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	tag := fmt.Sprintf("ledger-%s-%d", c.cfg.Queue, time.Now().UnixNano())
	deliveries, err := ch.Consume(c.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	closed := conn.NotifyClose(make(chan *amqp091.Error, 1))

	// Handlers get a context that outlives ctx by the shutdown grace period.
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	stopGrace := context.AfterFunc(ctx, func() {
		time.AfterFunc(c.cfg.ShutdownTimeout, cancelHandlers)
	})
	defer stopGrace()

	acquire := c.cfg.Acquire
	if acquire == nil {
		acquire = semaphore(c.cfg.Concurrency)
	}
	var wg sync.WaitGroup
	defer wg.Wait()

	for {
		select {
		case <-ctx.Done():
			// Stop the flow, then give back whatever was prefetched and not yet started.
			_ = ch.Cancel(tag, false)
			for d := range deliveries {
				_ = d.Nack(false, true)
			}
			return nil
		case err := <-closed:
			return fmt.Errorf("connection closed: %v", err)
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("delivery channel closed")
			}
			release, err := acquire(ctx)
			if err != nil {
				_ = d.Nack(false, true)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer release()
				c.handle(handlerCtx, d)
			}()
		}
	}
}

// semaphore is the default gate: at most n handlers at once.
func semaphore(n int) func(context.Context) (func(), error) {
	slots := make(chan struct{}, n)
	return func(ctx context.Context) (func(), error) {
		select {
		case slots <- struct{}{}:
			var once sync.Once
			return func() { once.Do(func() { <-slots }) }, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *Consumer) handle(ctx context.Context, d amqp091.Delivery) {
	msg, err := c.marshaler.Unmarshal(d)
	verdict := commands.Reject
	if err == nil {
		var span trace.Span
		ctx, span = c.processSpan(ctx, msg, d.Redelivered)
		verdict = c.handler(ctx, Delivery{Message: msg, Redelivered: d.Redelivered, Queue: c.cfg.Queue})
		span.SetAttributes(verdictKey.String(verdict.String()))
		span.End()
	} else {
		c.cfg.Logger.ErrorContext(ctx, "undecodable message, dead-lettering", "queue", c.cfg.Queue, "err", err)
	}
	switch verdict {
	case commands.Ack:
		err = d.Ack(false)
	case commands.Requeue:
		err = d.Nack(false, true)
	case commands.Reject:
		err = d.Nack(false, false)
	}
	if err != nil {
		// The channel is gone; the broker redelivers the message to the next consumer.
		c.cfg.Logger.WarnContext(ctx, "ack failed", "queue", c.cfg.Queue, "delivery_id", deliveryID(msg),
			"verdict", verdict, "err", err)
	}
}

// deliveryID is the delivery a work message is about, for a log line ("" if it has none).
func deliveryID(msg *message.Message) string {
	if msg == nil {
		return ""
	}
	m, _ := commands.DecodeWorkMessage(msg.Payload)
	return m.DeliveryID
}

var verdictKey = attribute.Key("ledger.verdict")

// processSpan starts the consumer span of a traced message: a child of its publish, or, for a
// later hop of its delivery (a retry, a replay, a redrive, a deferral), a child of the
// delivery's root linked to its publish and to what scheduled it (tracing.Receive).
func (c *Consumer) processSpan(ctx context.Context, msg *message.Message, redelivered bool) (context.Context, trace.Span) {
	if !tracing.Enabled() || msg.Metadata.Get(tracing.MetaTraceparent) == "" {
		return ctx, tracing.NoSpan
	}
	ctx, links := tracing.Receive(ctx, msg.Metadata)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...), trace.WithAttributes(
		semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(c.cfg.Queue), semconv.MessagingMessageID(msg.UUID),
		semconv.MessagingMessageBodySize(len(msg.Payload)),
		attribute.Bool("messaging.rabbitmq.redelivered", redelivered))}
	return tracing.Start(ctx, "process "+c.cfg.Queue, opts...)
}

// Work is the handler of work queues: it decodes the work message and hands its attempt to run
// (commands.AttemptHandler.Handle), whose verdict the consumer applies. A body that does not
// decode is dead-lettered: no attempt could ever read it.
func Work(run func(context.Context, commands.Attempt) commands.Verdict, logger *slog.Logger) Handler {
	if logger == nil {
		logger = slog.Default()
	}
	return func(ctx context.Context, d Delivery) commands.Verdict {
		msg, err := commands.DecodeWorkMessage(d.Message.Payload)
		if err != nil {
			logger.ErrorContext(ctx, "undecodable work message, dead-lettering", "queue", d.Queue, "err", err)
			return commands.Reject
		}
		return run(ctx, commands.Attempt{Message: msg, MessageID: d.Message.UUID, Redelivered: d.Redelivered})
	}
}

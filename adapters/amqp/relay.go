package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/deliveryledger/ledger/tracing"
	amqp091 "github.com/rabbitmq/amqp091-go"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Confirmed is called for every message once the broker has confirmed it, before the outbox
// offset moves past it. An error makes the relay publish the batch again (at-least-once).
type Confirmed func(ctx context.Context, topic string, msg *message.Message) error

// RelayConfig configures the relay.
type RelayConfig struct {
	URL string
	// OutboxTopic is the watermill topic of the SQL outbox.
	OutboxTopic string
	// OnConfirmed runs after each broker confirm (records the queued transition).
	OnConfirmed Confirmed
	// ConfirmTimeout bounds the wait for a batch's confirms; zero means 30 s.
	ConfirmTimeout time.Duration
}

// Validate reports every problem at once.
func (c RelayConfig) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("amqp url is empty"))
	}
	if c.OutboxTopic == "" {
		errs = append(errs, errors.New("outbox topic is empty"))
	}
	return errors.Join(errs...)
}

// Relay moves outbox rows to RabbitMQ: watermill's forwarder reads the SQL outbox (subscriber),
// unwraps each message and hands it to a Publisher that sends it persistent, in confirm mode,
// without waiting: the confirms of a whole batch travel together, and the subscriber's offset
// moves past the batch only after Publisher.Flush saw every one of them (see Publisher).
type Relay struct {
	forwarder *forwarder.Forwarder
	publisher *Publisher
}

// NewRelay builds a relay over an outbox subscriber whose offset commits wait for pub.Flush. The
// topology must be declared first: the publisher never declares queues, and a message published
// to a missing queue is dropped.
func NewRelay(cfg RelayConfig, outbox message.Subscriber, pub *Publisher, logger watermill.LoggerAdapter) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fwd, err := forwarder.NewForwarder(outbox, pub, logger,
		forwarder.Config{ForwarderTopic: cfg.OutboxTopic, CloseTimeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("relay forwarder: %w", err)
	}
	return &Relay{forwarder: fwd, publisher: pub}, nil
}

// Run relays until ctx is cancelled.
func (r *Relay) Run(ctx context.Context) error {
	defer r.publisher.Close()
	go func() {
		<-ctx.Done()
		_ = r.forwarder.Close()
	}()
	return r.forwarder.Run(ctx)
}

// Publisher is the relay's AMQP side: a watermill publisher that sends persistent messages on a
// channel in confirm mode and returns without waiting for the confirm; Flush waits for the
// confirms of everything published since the previous Flush and then runs OnConfirmed for each.
//
// watermill-amqp's own publisher awaits every confirm before returning, one message at a time,
// which caps a relay at a few hundred messages per second whatever the batch size. Here the
// outbox subscriber calls Flush before it commits a batch's offset (see
// postgres.OutboxSubscriberConfig.BeforeAck), so a row is still acknowledged only once the
// broker holds its message: a failed or missing confirm leaves the offset where it was, and the
// whole batch is read and published again.
type Publisher struct {
	cfg    RelayConfig
	logger watermill.LoggerAdapter

	mu       sync.Mutex
	conn     *amqp091.Connection
	ch       *amqp091.Channel
	pending  []pendingPublish
	failed   error // a publish of the current batch failed: Flush must fail it
	lastDial time.Time
}

type pendingPublish struct {
	topic   string
	msg     *message.Message
	confirm *amqp091.DeferredConfirmation
	// span is the publish's producer span (traced messages only), ended by the confirm.
	span trace.Span
}

var _ message.Publisher = (*Publisher)(nil)

// redialPause spaces reconnection attempts while the broker is unreachable.
const redialPause = time.Second

// NewPublisher builds the relay's publisher; it connects on first use.
func NewPublisher(cfg RelayConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ConfirmTimeout == 0 {
		cfg.ConfirmTimeout = 30 * time.Second
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Publisher{cfg: cfg, logger: logger}, nil
}

// Publish sends msgs to the queue named topic (default exchange) without waiting for confirms.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == 0 {
		// A new batch. A failure still on record belongs to a batch that ended at its first
		// message, with nothing published and no Flush to report it to: it must not fail this
		// batch too (which would publish every message of it twice).
		p.failed = nil
	}
	ch, err := p.channel()
	if err != nil {
		p.failed = err
		return err
	}
	for _, m := range msgs {
		span := publishSpan(topic, m)
		pub, err := Marshaler{}.Marshal(m)
		if err != nil {
			span.End()
			return fmt.Errorf("marshal %s: %w", m.UUID, err) // the forwarder nacks and retries it
		}
		confirm, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", topic, false, false, pub)
		if err != nil {
			p.failed = fmt.Errorf("publish %s to %s: %w", m.UUID, topic, err)
			tracing.Fail(span, p.failed)
			span.End()
			p.resetLocked()
			return p.failed
		}
		p.pending = append(p.pending, pendingPublish{topic: topic, msg: m, confirm: confirm, span: span})
	}
	return nil
}

// publishSpan starts the producer span of a traced message's publish, as a child of the span
// that wrote it to the outbox (for a later hop, the delivery's root, with a link to what
// scheduled it), and puts the publish's own trace context in the message's headers for the
// consumer to continue. An untraced message gets no span.
func publishSpan(queue string, m *message.Message) trace.Span {
	if !tracing.Enabled() || m.Metadata.Get(tracing.MetaTraceparent) == "" {
		return tracing.NoSpan
	}
	ctx := tracing.Extract(context.Background(), m.Metadata)
	var links []trace.Link
	if cause := tracing.SpanContextOf(m.Metadata.Get(tracing.MetaLink)); cause.IsValid() {
		links = append(links, trace.Link{SpanContext: cause})
	}
	ctx, span := tracing.Start(ctx, "send "+queue, trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...), trace.WithAttributes(
		semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("publish"),
		semconv.MessagingDestinationName(queue), semconv.MessagingMessageID(m.UUID),
		semconv.MessagingMessageBodySize(len(m.Payload))))
	tracing.Inject(ctx, m.Metadata)
	return span
}

// Flush waits for the confirms of everything published since the last Flush and runs
// OnConfirmed for each message. An error means the batch must not be acknowledged: some message
// may not have reached the broker.
func (p *Publisher) Flush() error {
	p.mu.Lock()
	pending, failed := p.pending, p.failed
	p.pending, p.failed = nil, nil
	p.mu.Unlock()
	defer func() {
		for _, pp := range pending {
			pp.span.End() // a span already ended (confirmed) ignores this
		}
	}()
	if failed != nil {
		return failed
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ConfirmTimeout)
	defer cancel()

	for _, pp := range pending {
		ok, err := pp.confirm.WaitContext(ctx)
		if err == nil && !ok {
			err = errors.New("broker nacked the publish")
		}
		tracing.Fail(pp.span, err)
		pp.span.End()
		if err != nil {
			p.mu.Lock()
			p.resetLocked() // outstanding confirms of this channel can no longer be trusted
			p.mu.Unlock()
			return fmt.Errorf("confirm of %s to %s: %w", pp.msg.UUID, pp.topic, err)
		}
	}
	if p.cfg.OnConfirmed == nil {
		return nil
	}
	for _, pp := range pending {
		if err := p.cfg.OnConfirmed(ctx, pp.topic, pp.msg); err != nil {
			return fmt.Errorf("after confirm of %s: %w", pp.msg.UUID, err)
		}
	}
	return nil
}

// Ready reports whether the broker can take messages now, connecting if needed (at most once
// per second while it is unreachable).
func (p *Publisher) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.channel()
	return err
}

// Close closes the connection.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetLocked()
	return nil
}

// channel returns the open confirm-mode channel, connecting if needed (at most once per
// redialPause while the broker is unreachable).
func (p *Publisher) channel() (*amqp091.Channel, error) {
	if p.ch != nil && !p.ch.IsClosed() && p.conn != nil && !p.conn.IsClosed() {
		return p.ch, nil
	}
	p.resetLocked()
	if wait := redialPause - time.Since(p.lastDial); wait > 0 {
		time.Sleep(wait)
	}
	p.lastDial = time.Now()
	conn, err := Dial(p.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("relay: connect to broker: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("relay: open confirm channel: %w", err)
	}
	p.conn, p.ch = conn, ch
	p.logger.Info("relay connected to broker", nil)
	return ch, nil
}

func (p *Publisher) resetLocked() {
	if p.ch != nil {
		_ = p.ch.Close()
	}
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.ch, p.conn = nil, nil
}

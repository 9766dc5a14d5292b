package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Confirmed is called for every message once the broker has confirmed it, before the outbox row
// is acked. An error makes the relay publish the row again later (at-least-once).
type Confirmed func(ctx context.Context, topic string, msg *message.Message) error

// RelayConfig configures the relay.
type RelayConfig struct {
	URL string
	// OutboxTopic is the watermill topic of the SQL outbox.
	OutboxTopic string
	// PublishChannels is the size of the publisher's AMQP channel pool.
	PublishChannels int
	// OnConfirmed runs after each broker confirm (records the queued transition).
	OnConfirmed Confirmed
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

// Relay moves outbox rows to RabbitMQ: watermill's forwarder reads the SQL outbox (subscriber)
// and publishes each unwrapped message with publisher confirms and persistent delivery; the SQL
// row is acked only after the confirm and OnConfirmed succeeded.
type Relay struct {
	forwarder *forwarder.Forwarder
	publisher *wamqp.Publisher
}

// NewRelay builds a relay over an outbox subscriber. The topology must be declared first: the
// publisher never declares queues, and a message published to a missing queue is dropped.
func NewRelay(cfg RelayConfig, outbox message.Subscriber, logger watermill.LoggerAdapter) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PublishChannels == 0 {
		cfg.PublishChannels = 4
	}
	amqpCfg := wamqp.NewDurableQueueConfig(cfg.URL)
	amqpCfg.Marshaler = Marshaler{}
	amqpCfg.Publish.ConfirmDelivery = true
	amqpCfg.Publish.ChannelPoolSize = cfg.PublishChannels
	amqpCfg.Connection.Reconnect = wamqp.DefaultReconnectConfig()
	pub, err := wamqp.NewPublisher(amqpCfg, logger)
	if err != nil {
		return nil, fmt.Errorf("relay publisher: %w", err)
	}
	fwd, err := forwarder.NewForwarder(outbox, confirmingPublisher{pub: pub, onConfirmed: cfg.OnConfirmed}, logger,
		forwarder.Config{ForwarderTopic: cfg.OutboxTopic, CloseTimeout: 10 * time.Second})
	if err != nil {
		_ = pub.Close()
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

// confirmingPublisher runs OnConfirmed after the AMQP publisher returned, which with
// ConfirmDelivery means the broker has confirmed.
type confirmingPublisher struct {
	pub         message.Publisher
	onConfirmed Confirmed
}

func (p confirmingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.pub.Publish(topic, msgs...); err != nil {
		return err
	}
	if p.onConfirmed == nil {
		return nil
	}
	for _, m := range msgs {
		ctx := m.Context()
		if err := p.onConfirmed(ctx, topic, m); err != nil {
			return fmt.Errorf("after confirm of %s: %w", m.UUID, err)
		}
	}
	return nil
}

func (p confirmingPublisher) Close() error { return p.pub.Close() }

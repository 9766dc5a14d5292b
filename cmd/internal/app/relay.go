package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/commands"
)

// relayConsumerGroup names the relay's offset in the outbox.
const relayConsumerGroup = "relay"

// runRelay moves outbox rows to the broker, one forwarder per outbox shard, and records "queued"
// after each confirm.
func (a *App) runRelay(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, postgres.OutboxShards)
	for shard := range postgres.OutboxShards {
		go func() {
			err := a.runRelayShard(ctx, shard)
			if err != nil {
				err = fmt.Errorf("shard %d: %w", shard, err)
			}
			errs <- err
			cancel() // one shard failing stops the role, so the process is restarted whole
		}()
	}
	var all []error
	for range postgres.OutboxShards {
		if err := <-errs; err != nil && ctx.Err() == nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

func (a *App) runRelayShard(ctx context.Context, shard int) error {
	wmLogger := watermill.NewSlogLogger(a.logger.With("role", "relay", "shard", shard))
	cfg := amqp.RelayConfig{
		URL:         a.cfg.AMQPURL,
		OutboxTopic: postgres.OutboxTopicOf(shard),
		OnConfirmed: a.confirmed,
	}
	pub, err := amqp.NewPublisher(cfg, wmLogger)
	if err != nil {
		return err
	}
	sub, err := postgres.NewOutboxSubscriber(ctx, a.relayPool, postgres.OutboxSubscriberConfig{
		ConsumerGroup: relayConsumerGroup, Logger: a.logger, BeforeAck: pub.Flush, Ready: pub.Ready, Gather: a.cfg.RelayGather,
	}, wmLogger)
	if err != nil {
		return err
	}
	relay, err := amqp.NewRelay(cfg, sub, pub, wmLogger)
	if err != nil {
		return err
	}
	return relay.Run(ctx)
}

// confirmed is told of every message the broker confirmed: it measures the relay's lag and
// lets the queued recorder record the first attempt's queued transition.
func (a *App) confirmed(ctx context.Context, _ string, msg *message.Message) error {
	if at, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(commands.MetaEnqueuedAt)); err == nil {
		lag := time.Since(at)
		a.metrics.Relayed(lag)
		if a.opts.relayObserver != nil {
			a.opts.relayObserver(lag)
		}
	}
	return a.queued.Confirmed(ctx, msg.Payload, msg.Metadata)
}

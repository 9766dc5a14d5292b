package app

import (
	"context"
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

// relayPoolSize is the relay pool's connections: the shards' polls take one each for a batch,
// beside the queued recorder's writes and the visibility checks; more shards than connections
// take turns for them.
const relayPoolSize = 8

// relayShardsCheck is how often the relay role reads the database's shard count and which
// shards hold rows, to start the relays of new shards and stop those of shards left drained.
const relayShardsCheck = 2 * time.Second

// recordOutboxShards records --outbox-shards as the database's shard count, when given.
func (a *App) recordOutboxShards(ctx context.Context) error {
	if a.cfg.OutboxShards == 0 {
		return nil
	}
	before, err := postgres.OutboxShards(ctx, a.pool)
	if err != nil {
		return err
	}
	changed, err := postgres.SetOutboxShards(ctx, a.pool, a.cfg.OutboxShards)
	if err != nil {
		return err
	}
	if changed {
		a.logger.Info("outbox shard count changed", "from", before, "to", a.cfg.OutboxShards)
	}
	return nil
}

// relayShards is which shards the relay role moves now: every shard of the recorded count, and
// any shard beyond it that still holds rows not relayed (written before the count went down).
func (a *App) relayShards(ctx context.Context) (map[int]bool, error) {
	n, err := postgres.OutboxShards(ctx, a.relayPool)
	if err != nil {
		return nil, err
	}
	want := map[int]bool{}
	for i := range n {
		want[i] = true
	}
	pending, err := postgres.OutboxShardsPending(ctx, a.relayPool, relayConsumerGroup)
	if err != nil {
		return nil, err
	}
	for _, i := range pending {
		want[i] = true
	}
	return want, nil
}

// runRelay moves outbox rows to the broker, one forwarder per outbox shard, and records "queued"
// after each confirm. It follows the database's shard count: every relayShardsCheck it starts
// the forwarders of shards it does not run yet and stops those of shards no longer wanted.
func (a *App) runRelay(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logger := a.logger.With("role", "relay")
	waker := postgres.NewOutboxWaker(ctx, a.relayPool, logger)
	type shardRun struct {
		stop context.CancelFunc
		done chan struct{}
	}
	running := map[int]shardRun{}
	failed := make(chan error, postgres.MaxOutboxShards)
	stopAll := func() {
		for _, r := range running {
			r.stop()
		}
		for _, r := range running {
			<-r.done
		}
	}
	defer stopAll()
	check := time.NewTicker(relayShardsCheck)
	defer check.Stop()
	for {
		want, err := a.relayShards(ctx)
		if err != nil && ctx.Err() == nil {
			logger.Warn("outbox shards not read; keeping the relays running", "err", err)
		}
		if err == nil {
			for shard := range want {
				if _, ok := running[shard]; ok {
					continue
				}
				shardCtx, stop := context.WithCancel(ctx)
				r := shardRun{stop: stop, done: make(chan struct{})}
				running[shard] = r
				go func() {
					defer close(r.done)
					if err := a.runRelayShard(shardCtx, shard, waker); err != nil && shardCtx.Err() == nil {
						failed <- fmt.Errorf("shard %d: %w", shard, err)
					}
				}()
				logger.Info("outbox shard relay started", "shard", shard)
			}
			for shard, r := range running {
				if want[shard] {
					continue
				}
				r.stop()
				<-r.done
				delete(running, shard)
				logger.Info("outbox shard relay stopped: the shard is no longer written and every row is relayed", "shard", shard)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err // one shard failing stops the role, so the process is restarted whole
		case <-check.C:
		}
	}
}

func (a *App) runRelayShard(ctx context.Context, shard int, waker *postgres.OutboxWaker) error {
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
		ConsumerGroup: relayConsumerGroup, Shard: shard, Waker: waker, Logger: a.logger, BeforeAck: pub.Flush, Ready: pub.Ready, Gather: a.cfg.RelayGather,
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

package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// OutboxSubscriberConfig tunes the relay's side of the outbox.
type OutboxSubscriberConfig struct {
	// ConsumerGroup names the relay's offset row.
	ConsumerGroup string
	// MaxWait bounds how long an idle relay sleeps when no notification arrives (a safety net:
	// normally a committed append wakes it at once through LISTEN/NOTIFY).
	MaxWait time.Duration
	// ResendInterval is the pause before a row whose publish failed is tried again.
	ResendInterval time.Duration
	// BeforeAck runs before the offset of a batch is committed, after every message of the batch
	// was handed out and acked; an error leaves the offset where it was, so the batch is read
	// and handed out again. The relay waits there for the broker's confirms of the batch.
	BeforeAck func() error
	Logger    *slog.Logger
}

// Relay tuning defaults.
const (
	DefaultRelayMaxWait        = 250 * time.Millisecond
	DefaultRelayResendInterval = 100 * time.Millisecond
)

// NewOutboxSubscriber returns the watermill-sql subscriber that reads the outbox in gap-safe
// order, woken by LISTEN/NOTIFY. The listener stops with ctx.
func NewOutboxSubscriber(ctx context.Context, pool *pgxpool.Pool, cfg OutboxSubscriberConfig, logger watermill.LoggerAdapter) (*wsql.Subscriber, error) {
	if cfg.ConsumerGroup == "" {
		cfg.ConsumerGroup = "relay"
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultRelayMaxWait
	}
	if cfg.ResendInterval == 0 {
		cfg.ResendInterval = DefaultRelayResendInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	wake := newNotifyWaker(ctx, pool, OutboxNotifyChannel, cfg.Logger)
	return wsql.NewSubscriber(stdlib.OpenDBFromPool(pool), wsql.SubscriberConfig{
		ConsumerGroup:  cfg.ConsumerGroup,
		PollInterval:   cfg.MaxWait,
		ResendInterval: cfg.ResendInterval,
		RetryInterval:  time.Second,
		BackoffManager: &notifyBackoff{wake: wake, maxWait: cfg.MaxWait, retry: time.Second},
		SchemaAdapter:  OutboxSchema,
		OffsetsAdapter: gatedOffsets{OffsetsAdapter: OutboxOffsets, beforeAck: cfg.BeforeAck, logger: cfg.Logger},
	}, logger)
}

// gatedOffsets is the outbox offsets adapter with a gate on the offset commit. watermill-sql
// hands a batch's rows out one at a time and commits the batch's offset once, in the same
// transaction, with the query AckMessageQuery builds; building it is the moment when every row
// of the batch has been acked and nothing is committed yet. When beforeAck fails, the query
// leaves the offset alone: the transaction commits nothing and the next poll reads the batch
// again.
type gatedOffsets struct {
	wsql.OffsetsAdapter
	beforeAck func() error
	logger    *slog.Logger
}

// keepOffset is a query that changes nothing.
var keepOffset = wsql.Query{Query: "SELECT 1"}

func (g gatedOffsets) AckMessageQuery(topic string, row wsql.Row, consumerGroup string) wsql.Query {
	if g.beforeAck != nil {
		if err := g.beforeAck(); err != nil {
			g.logger.Warn("outbox batch not acknowledged; it will be read again", "topic", topic, "err", err)
			return keepOffset
		}
	}
	return g.OffsetsAdapter.AckMessageQuery(topic, row, consumerGroup)
}

// notifyBackoff is a watermill-sql BackoffManager that, when a poll found nothing, waits for a
// NOTIFY from an appending transaction (or maxWait) instead of a fixed poll interval.
//
// A notification can arrive before its row is readable: the gap-safe read sees only transactions
// below the oldest one still running anywhere in the cluster, so a row committed while an older
// transaction is open stays invisible until that one ends. After a wake-up whose poll found
// nothing, it polls again a few times at short intervals rather than waiting for the next
// notification, which may be far away.
type notifyBackoff struct {
	wake    <-chan struct{}
	maxWait time.Duration
	retry   time.Duration
	// recheck counts the short polls left after a notification.
	recheck int
}

// Recheck schedule after a notification whose row was not yet readable.
const (
	notifyRechecks      = 20
	notifyRecheckPeriod = 2 * time.Millisecond
)

func (b *notifyBackoff) HandleError(logger watermill.LoggerAdapter, noMsg bool, err error) time.Duration {
	if err != nil {
		logger.Error("outbox poll failed", err, watermill.LogFields{"retry_in": b.retry})
		return b.retry
	}
	if !noMsg {
		b.recheck = notifyRechecks
		return 0
	}
	if b.recheck > 0 {
		b.recheck--
		return notifyRecheckPeriod
	}
	select {
	case <-b.wake:
		b.recheck = notifyRechecks
	case <-time.After(b.maxWait):
	}
	return 0
}

// newNotifyWaker listens on a channel with a dedicated connection and signals (coalesced) every
// notification. It reconnects on failure; while it cannot listen, the max wait still bounds
// latency.
func newNotifyWaker(ctx context.Context, pool *pgxpool.Pool, channel string, logger *slog.Logger) <-chan struct{} {
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go func() {
		for ctx.Err() == nil {
			err := listen(ctx, pool, channel, signal)
			if ctx.Err() != nil {
				return
			}
			logger.Warn("outbox listener stopped, retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return wake
}

func listen(ctx context.Context, pool *pgxpool.Pool, channel string, signal func()) error {
	pooled, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection carries LISTEN state: it never goes back to the pool.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+channel); err != nil {
		return err
	}
	signal() // catch up on anything committed before we listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal()
	}
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// OutboxSubscriberConfig tunes the relay's side of the outbox.
type OutboxSubscriberConfig struct {
	// ConsumerGroup names the relay's offset row; shard i's is OutboxGroup(ConsumerGroup, i).
	ConsumerGroup string
	// Shard is the outbox shard the subscriber reads, through the topic OutboxTopicOf(Shard).
	Shard int
	// MaxWait bounds how long an idle relay sleeps when no notification arrives (a safety net:
	// normally a committed append wakes it at once through LISTEN/NOTIFY).
	MaxWait time.Duration
	// ResendInterval is the pause before a row whose publish failed is tried again.
	ResendInterval time.Duration
	// Gather is how long a woken relay waits before it polls, so that the rows of appends
	// committed close together travel in one batch; 0 polls at once.
	Gather time.Duration
	// BeforeAck runs before the offset of a batch is committed, after every message of the batch
	// was handed out and acked; an error leaves the offset where it was, so the batch is read
	// and handed out again. The relay waits there for the broker's confirms of the batch.
	BeforeAck func() error
	// Ready, when set, is asked before every poll whether the rows could be moved on now (the
	// relay: is the broker reachable?). While it says no, the subscriber waits outside any
	// transaction: a poll's transaction holds a transaction id, and while one is open every
	// gap-safe reader of the cluster (the projector, other relays) is held back.
	Ready func() error
	// Waker, when set, is the shared listener that wakes the subscriber (one per process for
	// every shard); nil: the subscriber listens on a connection of its own.
	Waker  *OutboxWaker
	Logger *slog.Logger
}

// Relay tuning defaults.
const (
	DefaultRelayMaxWait        = 250 * time.Millisecond
	DefaultRelayResendInterval = 100 * time.Millisecond
	// DefaultRelayGather is the relay's wait between a notification and its poll. Polled at every
	// append, the relay moved one row per poll at moderate rates, and a poll is a transaction of
	// its own (it locks the offset row), then an offset commit and a queued record: at 200
	// deliveries a second, two and a half commits per delivery. Waiting 10 ms gathers the
	// appends of that time into one batch, for 10 ms more between accept and publish.
	DefaultRelayGather = 10 * time.Millisecond
	// relayAckDeadline bounds how long one row may go unacknowledged inside a poll's transaction
	// (the broker went away mid-batch); then the batch is given up and read again later.
	relayAckDeadline = 3 * time.Second
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
	if cfg.Shard < 0 || cfg.Shard >= MaxOutboxShards {
		return nil, fmt.Errorf("outbox shard %d: want 0 to %d", cfg.Shard, MaxOutboxShards-1)
	}
	group := OutboxGroup(cfg.ConsumerGroup, cfg.Shard)
	waker := cfg.Waker
	if waker == nil {
		waker = NewOutboxWaker(ctx, pool, cfg.Logger)
	}
	wake := waker.Subscribe(ctx)
	ackDeadline := relayAckDeadline
	return wsql.NewSubscriber(stdlib.OpenDBFromPool(pool), wsql.SubscriberConfig{
		ConsumerGroup:  group,
		AckDeadline:    &ackDeadline,
		PollInterval:   cfg.MaxWait,
		ResendInterval: cfg.ResendInterval,
		RetryInterval:  time.Second,
		BackoffManager: &notifyBackoff{ctx: ctx, wake: wake, maxWait: cfg.MaxWait, retry: time.Second, gather: cfg.Gather,
			visible: visibleCheck(pool, cfg.Shard, group), ready: cfg.Ready, logger: cfg.Logger},
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
// transaction is open stays invisible until that one ends. When the poll after a notification
// found nothing, it keeps looking a few times at short intervals rather than waiting for the next
// notification, which may be far away. It looks with visible,
// one read-only query, rather than a full poll: a poll is a transaction that locks the offset
// row (three round trips and a commit), and at a few hundred deliveries a second the empty ones
// were a third of all the relay's database work.
type notifyBackoff struct {
	ctx     context.Context
	wake    <-chan struct{}
	maxWait time.Duration
	retry   time.Duration
	// gather is OutboxSubscriberConfig.Gather.
	gather time.Duration
	// visible reports whether a poll would find a row now; an error counts as yes.
	visible func() bool
	// recheck counts the short looks left.
	recheck int
	// ready is asked before every poll (see OutboxSubscriberConfig.Ready).
	ready  func() error
	logger *slog.Logger
}

// Recheck schedule after a notification or a batch.
const (
	notifyRechecks      = 20
	notifyRecheckPeriod = 2 * time.Millisecond
)

func (b *notifyBackoff) HandleError(logger watermill.LoggerAdapter, noMsg bool, err error) time.Duration {
	wait := b.next(logger, noMsg, err)
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-b.ctx.Done():
			return 0
		}
	}
	b.untilReady()
	return 0
}

// untilReady holds the next poll, outside any transaction, while ready says no.
func (b *notifyBackoff) untilReady() {
	if b.ready == nil {
		return
	}
	for failures := 0; b.ctx.Err() == nil; failures++ {
		err := b.ready()
		if err == nil {
			if failures > 0 {
				b.logger.Info("outbox relay can move rows again", "waited_polls", failures)
			}
			return
		}
		if failures == 0 {
			b.logger.Warn("outbox relay waits: rows cannot be moved now", "err", err)
		}
		select {
		case <-time.After(b.retry):
		case <-b.ctx.Done():
		}
	}
}

// next decides how long to wait before the next poll.
func (b *notifyBackoff) next(logger watermill.LoggerAdapter, noMsg bool, err error) time.Duration {
	if err != nil {
		if b.ctx.Err() != nil {
			return 0 // stopping: the poll was cancelled, nothing failed
		}
		logger.Error("outbox poll failed", err, watermill.LogFields{"retry_in": b.retry})
		return b.retry
	}
	if !noMsg {
		// After a batch: read on while rows are there, else wait for news. A notification that
		// came during the batch is waiting in wake and ends the wait at once.
		b.recheck = 0
		if b.visible == nil || b.visible() {
			return 0
		}
	}
	for b.recheck > 0 {
		b.recheck--
		select {
		case <-b.wake:
			b.recheck = notifyRechecks
		case <-time.After(notifyRecheckPeriod):
		case <-b.ctx.Done():
			return 0
		}
		if b.visible == nil || b.visible() {
			return 0
		}
	}
	select {
	case <-b.wake:
		// Something was committed: poll after the gather wait, and if its row is not readable
		// yet, look again shortly (see the type's comment).
		b.recheck = notifyRechecks
		return b.gather
	case <-time.After(b.maxWait):
	case <-b.ctx.Done():
	}
	return 0
}

// visibleCheck returns a query-once check for rows of shard past the consumer group's offset
// that the gap-safe read would return now: the condition of watermill-sql's PostgreSQL select,
// without its lock on the offset row.
func visibleCheck(pool *pgxpool.Pool, shard int, consumerGroup string) func() bool {
	// A row comparison on the primary key, ordered and limited, so that it is an index probe
	// however the table has grown (and whether or not it was ever analyzed).
	offsets := OutboxOffsets.MessagesOffsetsTable(OutboxTopic)
	query := `SELECT 1 FROM "watermill_ledger_outbox" m
		WHERE m.shard = $2 AND (m.transaction_id, m."offset") > (
			(SELECT last_processed_transaction_id FROM ` + offsets + ` WHERE consumer_group = $1),
			(SELECT offset_acked FROM ` + offsets + ` WHERE consumer_group = $1))
		AND m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY m.transaction_id, m."offset" LIMIT 1`
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var one int
		err := pool.QueryRow(ctx, query, consumerGroup, shard).Scan(&one)
		// No row: nothing to read yet. Any other error: let the poll meet it and report it.
		return !errors.Is(err, pgx.ErrNoRows)
	}
}

// outboxShardsPending lists the shards holding a row past their offset under group (a base
// group: shard i's offset is OutboxGroup(group, i)), whether or not it is readable yet; a shard
// with rows and no offset row is pending. One index probe per shard.
var outboxShardsPending = `SELECT s.shard FROM generate_series(0, $2::int - 1) s(shard)
LEFT JOIN "watermill_offsets_ledger_outbox" o ON o.consumer_group = ` + outboxGroupSQL("$1") + `
` + outboxFirstPastMark(`"watermill_ledger_outbox"`) + `
ORDER BY 1`

// OutboxShardsPending lists the shards that hold rows the relays of group have not moved yet.
func OutboxShardsPending(ctx context.Context, q Querier, group string) ([]int, error) {
	rows, err := q.Query(ctx, outboxShardsPending, group, MaxOutboxShards)
	if err != nil {
		return nil, fmt.Errorf("list the outbox's pending shards: %w", err)
	}
	shards, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("list the outbox's pending shards: %w", err)
	}
	out := make([]int, len(shards))
	for i, s := range shards {
		out[i] = int(s)
	}
	return out, nil
}

// OutboxWaker listens for the outbox's notifications on one dedicated connection and signals
// every subscribed channel (coalesced) at each. It reconnects on failure; while it cannot
// listen, the subscribers' max wait still bounds latency.
type OutboxWaker struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// NewOutboxWaker starts listening; it stops with ctx.
func NewOutboxWaker(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) *OutboxWaker {
	w := &OutboxWaker{subs: map[chan struct{}]struct{}{}}
	go func() {
		for ctx.Err() == nil {
			err := listen(ctx, pool, OutboxNotifyChannel, w.signal)
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
	return w
}

// Subscribe returns a channel signalled at every notification from now on, until ctx ends. It
// is signalled once at once: anything committed before may not have been seen.
func (w *OutboxWaker) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	w.mu.Lock()
	w.subs[ch] = struct{}{}
	w.mu.Unlock()
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		delete(w.subs, ch)
		w.mu.Unlock()
	})
	return ch
}

func (w *OutboxWaker) signal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
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

package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/deliveryledger/ledger/commands"
)

// OutboxShards is the number of outbox topics, each relayed by its own forwarder. It is fixed,
// not configured: a writer and a relay that disagreed on it would strand messages. Raising it
// needs a migration creating watermill_ledger_outbox_<i> (partitioned as migration 0021 does the
// first: the rotation and EnsurePartitions take every shard's table) and
// watermill_offsets_ledger_outbox_<i>.
//
// Measured with four shards (ledger bench, 2 cores): the relay alone moved about 1.7 times more
// messages, but end-to-end throughput stayed where the workers cap it, and latency grew: each
// shard's subscriber holds a transaction id while it publishes a batch, and the gap-safe read
// (below pg_snapshot_xmin) makes the other shards wait for it. One shard it is.
const OutboxShards = 1

// OutboxTopic is the watermill-sql topic of outbox shard 0: its rows live in
// watermill_ledger_outbox; shard i > 0 is OutboxTopic_i.
const OutboxTopic = "ledger_outbox"

// OutboxTopicOf names the watermill-sql topic of a shard.
func OutboxTopicOf(shard int) string {
	if shard == 0 {
		return OutboxTopic
	}
	return fmt.Sprintf("%s_%d", OutboxTopic, shard)
}

// outboxShard places a message: a delivery's messages share a shard.
func outboxShard(m commands.OutboxMessage) int {
	key := m.PartitionKey
	if key == "" {
		key = m.ID
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % OutboxShards)
}

// OutboxNotifyChannel is the LISTEN/NOTIFY channel an appending transaction signals at commit,
// so the relay wakes at once instead of waiting for its poll interval.
const OutboxNotifyChannel = "ledger_outbox"

// OutboxSchema and OutboxOffsets are the watermill-sql adapters shared by the publisher (here)
// and the relay's subscriber.
var (
	OutboxSchema  = wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 100}
	OutboxOffsets = wsql.DefaultPostgreSQLOffsetsAdapter{}
)

// publishOutbox writes messages into the outbox inside tx, through a watermill-sql publisher bound
// to the transaction and wrapped by watermill's forwarder, which records each message's
// destination topic in an envelope.
func publishOutbox(ctx context.Context, tx execer, msgs []commands.OutboxMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := writeOutbox(ctx, tx, msgs); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, OutboxNotifyChannel); err != nil {
		return fmt.Errorf("outbox notify: %w", err)
	}
	return nil
}

// writeOutbox is publishOutbox without the notification: for a write that notifies the relay in
// a statement it runs anyway (newAccepts).
func writeOutbox(ctx context.Context, tx execer, msgs []commands.OutboxMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	pub, err := wsql.NewPublisher(txExecutor{ctx: ctx, tx: tx}, wsql.PublisherConfig{SchemaAdapter: OutboxSchema}, watermill.NopLogger{})
	if err != nil {
		return fmt.Errorf("outbox publisher: %w", err)
	}
	// The forwarder publisher takes one outbox topic and one destination per call: group by
	// (shard, destination), keeping each group's order.
	type group struct {
		shard int
		topic string
	}
	var order []group
	batches := map[group][]*message.Message{}
	for _, m := range msgs {
		g := group{outboxShard(m), m.Topic}
		if _, ok := batches[g]; !ok {
			order = append(order, g)
		}
		wm := message.NewMessage(m.ID, m.Payload)
		for k, v := range m.Metadata {
			wm.Metadata.Set(k, v)
		}
		batches[g] = append(batches[g], wm)
	}
	for _, g := range order {
		fwd := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: OutboxTopicOf(g.shard)})
		if err := fwd.Publish(g.topic, batches[g]...); err != nil {
			return fmt.Errorf("outbox publish to %s: %w", g.topic, err)
		}
	}
	return nil
}

// txExecutor lets a watermill-sql publisher write through a pgx transaction or a writeBatch. The
// publisher only ever calls ExecContext (one INSERT) and ignores its result; the query methods
// exist to satisfy the interface.
type txExecutor struct {
	ctx context.Context
	tx  execer
}

var _ wsql.ContextExecutor = txExecutor{}

var errQueryUnsupported = errors.New("outbox executor: queries are not supported, only Exec")

func (e txExecutor) Exec(query string, args ...any) (sql.Result, error) {
	return e.ExecContext(e.ctx, query, args...)
}

func (e txExecutor) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if ctx == context.Background() {
		ctx = e.ctx
	}
	tag, err := e.tx.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rowsAffected(tag.RowsAffected()), nil
}

func (e txExecutor) Query(string, ...any) (*sql.Rows, error) { return nil, errQueryUnsupported }

func (e txExecutor) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errQueryUnsupported
}

// QueryRow and QueryRowContext cannot report an error through *sql.Row; they are never called.
func (e txExecutor) QueryRow(string, ...any) *sql.Row { return nil }

func (e txExecutor) QueryRowContext(context.Context, string, ...any) *sql.Row { return nil }

// Commit and Rollback are absent on purpose: the publisher must not own the transaction. Their
// presence is also how watermill-sql recognises a transaction; it refuses AutoInitializeSchema
// only then, and we never set it.

type rowsAffected int64

func (r rowsAffected) LastInsertId() (int64, error) { return 0, errors.New("not supported") }
func (r rowsAffected) RowsAffected() (int64, error) { return int64(r), nil }

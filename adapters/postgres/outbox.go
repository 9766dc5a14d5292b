package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deliveryledger/ledger/commands"
)

// The outbox is split into shards, each relayed by a relay of its own (with standbys taking turns
// per shard, on the shard's offset row). It stays one table (watermill_ledger_outbox, migration
// 0026): a row's shard is a column that the writing statement computes from the delivery's hash
// and the count the database records (outbox_config.shards), so that every writer agrees on it
// at every moment, whatever it was configured with, and a change of the count takes effect with
// its commit. A relay reads its shard through the primary key, which leads with the shard; its
// offset is the consumer group OutboxGroup(group, shard) in the one offsets table.
//
// A delivery's messages share a shard while the count stays; a message written just before a
// change and the delivery's next one just after can travel in different shards, so a delivery
// with two messages unrelayed at the moment of a change may see them in either order (the
// relay drains the shards the change left before stopping their relays).

// MaxOutboxShards bounds LEDGER_OUTBOX_SHARDS (migration 0026's check).
const MaxOutboxShards = 64

// OutboxTopic is the watermill-sql topic of the outbox: the table watermill_ledger_outbox. The
// relay of shard i subscribes to OutboxTopicOf(i), which names the same table's rows of shard i.
const OutboxTopic = "ledger_outbox"

// OutboxTopicOf names the watermill-sql topic a shard's relay subscribes to.
func OutboxTopicOf(shard int) string {
	if shard == 0 {
		return OutboxTopic
	}
	return fmt.Sprintf("%s_%d", OutboxTopic, shard)
}

// outboxShardOfTopic is OutboxTopicOf's inverse; ok is false for a topic that is not the outbox's.
func outboxShardOfTopic(topic string) (shard int, ok bool) {
	if topic == OutboxTopic {
		return 0, true
	}
	rest, found := strings.CutPrefix(topic, OutboxTopic+"_")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 || n >= MaxOutboxShards || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}

// OutboxGroup is the consumer group under which a relay of group moves shard's rows: the group
// itself for shard 0 (the only offset before shards), group/<shard> for the others.
func OutboxGroup(group string, shard int) string {
	if shard == 0 {
		return group
	}
	return group + "/" + strconv.Itoa(shard)
}

// outboxGroupSQL is OutboxGroup as SQL, for a base group expression and the shard s.shard: the
// probes below must name the offsets as the relays do.
func outboxGroupSQL(base string) string {
	return `CASE WHEN s.shard = 0 THEN ` + base + ` ELSE ` + base + ` || '/' || s.shard END`
}

// outboxFirstPastMark is the lateral probe of the probes below: the first row of table in shard
// s.shard past the mark of the offset row o (none: the zero mark, below every row), as one row
// comparison on the primary key, ordered and limited so that it is an index probe (an EXISTS
// with an OR in it was planned as a scan of every row, 77 ms behind a backlog of 30,000).
func outboxFirstPastMark(table string) string {
	return `CROSS JOIN LATERAL (SELECT 1 FROM ` + table + ` m WHERE m.shard = s.shard
	AND (m.transaction_id, m."offset") > (coalesce(o.last_processed_transaction_id, '0'::xid8), coalesce(o.offset_acked, 0))
	ORDER BY m.transaction_id, m."offset" LIMIT 1) AS first_row`
}

// outboxHash places a message: a delivery's messages have one hash, and the writing statement
// takes the shard as the hash modulo the recorded count.
func outboxHash(m commands.OutboxMessage) int64 {
	key := m.PartitionKey
	if key == "" {
		key = m.ID
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int64(h.Sum32())
}

// Queries of the recorded shard count.
const (
	outboxShardsGet = `SELECT shards FROM outbox_config`
	outboxShardsSet = `UPDATE outbox_config SET shards = $1 WHERE shards <> $1`
)

// outboxConfigDB is what the shard count's reads and writes need: a pool, a connection or a
// transaction.
type outboxConfigDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// OutboxShards reads how many shards the database's outbox is split into.
func OutboxShards(ctx context.Context, q outboxConfigDB) (int, error) {
	var n int
	if err := q.QueryRow(ctx, outboxShardsGet).Scan(&n); err != nil {
		return 0, fmt.Errorf("read the outbox's shard count: %w", err)
	}
	return n, nil
}

// SetOutboxShards records n as the outbox's shard count and reports whether it changed. Writers
// take it at their next statement; relays follow it (app's relay role looks every few seconds).
func SetOutboxShards(ctx context.Context, q outboxConfigDB, n int) (bool, error) {
	if n < 1 || n > MaxOutboxShards {
		return false, fmt.Errorf("outbox shards %d: want 1 to %d", n, MaxOutboxShards)
	}
	tag, err := q.Exec(ctx, outboxShardsSet, n)
	if err != nil {
		return false, fmt.Errorf("record the outbox's shard count: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// OutboxNotifyChannel is the LISTEN/NOTIFY channel an appending transaction signals at commit,
// so the relay wakes at once instead of waiting for its poll interval.
const OutboxNotifyChannel = "ledger_outbox"

// OutboxSchema and OutboxOffsets are the watermill-sql adapters of the outbox: the publisher's
// (here: its inserts are outboxInsert's) and the relay's subscriber's. Every shard's topic names
// the one table, narrowed to the shard's rows, and the one offsets table.
var (
	OutboxSchema  = outboxSchema{wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 100, GenerateMessagesTableName: outboxTableOf}}
	OutboxOffsets = wsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: func(string) string {
		return `"watermill_offsets_ledger_outbox"`
	}}
)

// outboxTableOf is what a topic reads: one shard's rows of the outbox table, for a relay's read
// (watermill-sql selects FROM it, unqualified; the outbox's insert is outboxSchema's own). Any
// other topic is a table of its own, as watermill-sql names it.
func outboxTableOf(topic string) string {
	shard, ok := outboxShardOfTopic(topic)
	if !ok {
		return `"watermill_` + topic + `"`
	}
	return fmt.Sprintf(`(SELECT * FROM "watermill_ledger_outbox" WHERE shard = %d) AS shard_rows`, shard)
}

// outboxSchema is watermill-sql's PostgreSQL schema with the outbox's own insert: the shard is
// the statement's, from each message's hash and the recorded count.
type outboxSchema struct{ wsql.DefaultPostgreSQLSchema }

// outboxHashKey is the context key of a message's outboxHash: the forwarder's envelope keeps
// the wrapped message's context, and InsertQuery reads it there.
type outboxHashKey struct{}

// SelectQuery is a shard's relay read: watermill-sql's PostgreSQL select (the rows past the
// group's offset, locked for the batch, below the oldest running transaction) with the offset
// as one row comparison on the primary key, so that the read is an index range scan that stops
// at the batch's size. watermill-sql's own form, an OR of two conditions on the offset, is
// planned as a bitmap scan of every row past the offset, then sorted: with a backlog each poll
// read the whole backlog (21 ms a poll of 100 behind 30,000 rows, against about 1 ms now).
func (s outboxSchema) SelectQuery(topic string, consumerGroup string, offsetsAdapter wsql.OffsetsAdapter) wsql.Query {
	shard, ok := outboxShardOfTopic(topic)
	if !ok {
		return s.DefaultPostgreSQLSchema.SelectQuery(topic, consumerGroup, offsetsAdapter)
	}
	next := offsetsAdapter.NextOffsetQuery(topic, consumerGroup)
	batch := s.SubscribeBatchSize
	if batch == 0 {
		batch = 100
	}
	query := `WITH last_processed AS (` + next.Query + `)
SELECT "offset", transaction_id, uuid, payload, metadata FROM "watermill_ledger_outbox"
WHERE shard = ` + strconv.Itoa(shard) + `
	AND (transaction_id, "offset") > ((SELECT last_processed_transaction_id FROM last_processed),
		(SELECT coalesce(offset_acked, 0) FROM last_processed))
	AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY transaction_id, "offset"
LIMIT ` + strconv.Itoa(batch)
	return wsql.Query{Query: query, Args: next.Args}
}

func (s outboxSchema) InsertQuery(topic string, msgs message.Messages) (wsql.Query, error) {
	if topic != OutboxTopic {
		return wsql.Query{}, fmt.Errorf("outbox insert into topic %q: only %q is written", topic, OutboxTopic)
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO "watermill_ledger_outbox" (uuid, payload, metadata, transaction_id, shard)
SELECT v.uuid, v.payload, v.metadata, pg_current_xact_id(), (v.hash % c.shards)::smallint
FROM outbox_config c, (VALUES `)
	args := make([]any, 0, 4*len(msgs))
	for i, msg := range msgs {
		hash, ok := msg.Context().Value(outboxHashKey{}).(int64)
		if !ok {
			return wsql.Query{}, fmt.Errorf("outbox message %s carries no shard hash", msg.UUID)
		}
		metadata, err := json.Marshal(msg.Metadata)
		if err != nil {
			return wsql.Query{}, fmt.Errorf("outbox message %s metadata: %w", msg.UUID, err)
		}
		if i > 0 {
			b.WriteString(",")
		}
		n := len(args)
		fmt.Fprintf(&b, "($%d::varchar, $%d::json, $%d::json, $%d::bigint)", n+1, n+2, n+3, n+4)
		args = append(args, msg.UUID, []byte(msg.Payload), metadata, hash)
	}
	b.WriteString(`) AS v(uuid, payload, metadata, hash)`)
	return wsql.Query{Query: b.String(), Args: args}, nil
}

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
	// The forwarder publisher takes one destination per call: group by destination, keeping each
	// group's order. Each message carries its hash in its context, for the insert.
	var order []string
	batches := map[string][]*message.Message{}
	for _, m := range msgs {
		if _, ok := batches[m.Topic]; !ok {
			order = append(order, m.Topic)
		}
		wm := message.NewMessage(m.ID, m.Payload)
		for k, v := range m.Metadata {
			wm.Metadata.Set(k, v)
		}
		wm.SetContext(context.WithValue(ctx, outboxHashKey{}, outboxHash(m)))
		batches[m.Topic] = append(batches[m.Topic], wm)
	}
	fwd := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: OutboxTopic})
	for _, topic := range order {
		if err := fwd.Publish(topic, batches[topic]...); err != nil {
			return fmt.Errorf("outbox publish to %s: %w", topic, err)
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

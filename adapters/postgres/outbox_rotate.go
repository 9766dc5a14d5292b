package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// watermill-sql never deletes outbox rows, and deleting them row by row (the prune of before)
// left their dead tuples in the table: 1.2 KB a delivery that autovacuum did not reclaim under
// load. The outbox is range-partitioned by created_at instead (migration 0021), and a partition
// the relay has wholly passed is detached and dropped: its space goes back at once, and the hot
// path never deletes. The events table, not the outbox, is the durable history.

// OutboxPartitionWidth is the widest an outbox partition is. Rows are relayed within seconds,
// so the outbox needs no partition of the retention's width (days): it holds about one width of
// rows before the rotation drops them (at the relay's measured 900 messages a second, half a
// million rows), and with the default ahead a poll of the relay walks five or six partitions. A
// minute-wide partition would hold less but make the relay's every poll walk more of them; the
// relay's query cannot prune partitions (it selects on transaction ids, not times). Under a
// narrower retention.partition (compressed time: seconds) the outbox takes that width, so that
// it holds seconds of rows, not ten minutes of them beside a hot store of seconds.
const OutboxPartitionWidth = 10 * time.Minute

// OutboxRotationInterval is how often the relay rotates the outbox under cfg: twice in the width
// of its partitions, at least a second and at most a minute apart.
func OutboxRotationInterval(cfg PartitionConfig) time.Duration {
	width := OutboxPartitionWidth
	if cfg.Width > 0 {
		width = min(width, cfg.Width)
	}
	return min(max(width/2, time.Second), time.Minute)
}

func init() {
	partitionedTables = append(partitionedTables, PartitionedTable{Name: outboxTableName, Key: KeyTimestamp, Width: OutboxPartitionWidth})
}

// outboxTableName is the (unquoted) name of the outbox table, every shard's rows.
const outboxTableName = "watermill_ledger_outbox"

// Queries of the rotation. A partition's rows are relayed when each is at or below the mark of
// its shard's offset, for every consumer group (watermill-sql's mark: a group has handed out every
// row up to (last_processed_transaction_id, offset_acked)). A group is a base name (the relay's is
// "relay") with a shard's offset under OutboxGroup(base, shard); a shard with rows and no offset of
// a base has relayed nothing, and with no group at all nothing is relayed.
const (
	outboxServerClock  = `SELECT clock_timestamp() AT TIME ZONE 'UTC'`
	outboxXidHorizon   = `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`
	outboxXidSettled   = `SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::xid8`
	outboxDetachListed = `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1) AND i.inhdetachpending`
)

// outboxPartitionUnrelayed is whether a partition holds a row past its shard's mark: one index
// probe per shard and base (the primary key leads with the shard; a missing offset is the zero
// mark, below every row).
func outboxPartitionUnrelayed(partition string) string {
	offsets := OutboxOffsets.MessagesOffsetsTable(OutboxTopic)
	table := pgx.Identifier{partition}.Sanitize()
	return `WITH bases AS (SELECT DISTINCT split_part(consumer_group, '/', 1) AS base FROM ` + offsets + `)
SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM bases) THEN EXISTS (SELECT 1 FROM ` + table + `)
ELSE EXISTS (
	SELECT 1 FROM generate_series(0, ` + strconv.Itoa(MaxOutboxShards-1) + `) s(shard) CROSS JOIN bases b
	LEFT JOIN ` + offsets + ` o ON o.consumer_group = ` + outboxGroupSQL("b.base") + `
	` + outboxFirstPastMark(table) + `)
END`
}

// outboxSettleWait bounds a rotation's wait for the transactions running when it began.
const outboxSettleWait = 10 * time.Second

// RotateOutbox drops the outbox partitions whose rows have all been relayed and can get no more,
// and returns them. A partition is complete when the server's clock is past its upper bound
// (created_at is the insert's own clock, so no insert after that can route a row into it) and
// every transaction that may have inserted a row before then has ended: the rotation takes the
// next transaction id to be assigned once the clock is past (the snapshot's xmax) and waits until
// no transaction below it still runs (the snapshot's xmin has reached it). A transaction that
// began before the bound and commits late is one of those: it is waited for, and its row is then
// visible to the check. The check holds each of the partition's rows against the mark of its
// shard's offset, for every consumer group; a partition with a row not yet relayed (the relay
// stopped, a group or a shard behind) is kept, to be tried again at the next round.
//
// A complete partition is detached CONCURRENTLY: that takes SHARE UPDATE EXCLUSIVE on the
// outbox, which neither the accepts' inserts nor the relay's reads wait for, and then waits for
// the transactions that still use the table (a relay batch in flight) instead of making everyone
// queue behind an ACCESS EXCLUSIVE lock, as a plain DETACH or DROP does. Measured (2 cores, four
// writers appending, second-wide partitions, a reader holding the outbox 2 s as a slow relay
// batch does): the accepts' slowest append took 46-130 ms with CONCURRENTLY, as without any
// rotation, and 1.0-1.8 s with a plain DETACH queued behind the reader. It cannot run in a
// transaction: the rotation runs on a connection of its own, under the partition maintenance's
// advisory lock held for the session, so that processes rotating and creating partitions take
// turns. A detach interrupted half-way (the process stopped) is finished by the next round: it
// was checked before it began.
func RotateOutbox(ctx context.Context, pool *pgxpool.Pool) ([]Partition, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("rotate outbox: %w", err)
	}
	defer conn.Release()
	dropped, err := rotateOutboxTable(ctx, conn.Conn())
	if err != nil {
		return dropped, fmt.Errorf("rotate outbox: %w", err)
	}
	return dropped, nil
}

// rotateOutboxTable waits for the writers of the partitions the clock has left, then, under the
// partition maintenance's lock, finishes the detaches left half-way and drops the complete
// partitions. The wait is outside the lock: a long transaction elsewhere must not hold up the
// creation of partitions ahead.
func rotateOutboxTable(ctx context.Context, conn *pgx.Conn) ([]Partition, error) {
	table := outboxTableName
	var clock time.Time
	if err := conn.QueryRow(ctx, outboxServerClock).Scan(&clock); err != nil {
		return nil, fmt.Errorf("read the server's clock: %w", err)
	}
	// Taken after the clock was read, so every transaction id assigned before then is below it.
	var horizon string
	if err := conn.QueryRow(ctx, outboxXidHorizon).Scan(&horizon); err != nil {
		return nil, fmt.Errorf("read the transaction horizon: %w", err)
	}
	parts, err := Partitions(ctx, conn, table)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 || parts[0].To.After(clock) {
		return nil, nil // the clock has left no partition
	}
	if err := waitXidSettled(ctx, conn, horizon); err != nil {
		return nil, err
	}
	var dropped []Partition
	err = withPartitionLock(ctx, conn, func() error {
		rows, err := conn.Query(ctx, outboxDetachListed, table)
		if err != nil {
			return fmt.Errorf("list partitions being detached: %w", err)
		}
		pending, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("list partitions being detached: %w", err)
		}
		for _, name := range pending {
			if err := dropOutboxPartition(ctx, conn, table, name, "FINALIZE"); err != nil {
				return err
			}
			dropped = append(dropped, Partition{Table: table, Name: name})
		}
		parts, err := Partitions(ctx, conn, table) // again: another process may have rotated
		if err != nil {
			return err
		}
		for _, p := range parts {
			if p.To.After(clock) || slices.Contains(pending, p.Name) {
				continue
			}
			var unrelayed bool
			if err := conn.QueryRow(ctx, outboxPartitionUnrelayed(p.Name)).Scan(&unrelayed); err != nil {
				return fmt.Errorf("check partition %s: %w", p.Name, err)
			}
			if unrelayed {
				continue
			}
			if err := dropOutboxPartition(ctx, conn, table, p.Name, "CONCURRENTLY"); err != nil {
				return err
			}
			dropped = append(dropped, p)
		}
		return nil
	})
	return dropped, err
}

// withPartitionLock runs fn holding the partition maintenance's advisory lock for the session
// (DETACH CONCURRENTLY cannot run in the transaction that EnsurePartitions locks in).
func withPartitionLock(ctx context.Context, conn *pgx.Conn, fn func() error) error {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(`+partitionLock+`)`); err != nil {
		return fmt.Errorf("partition maintenance lock: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(`+partitionLock+`)`); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx)) // closing the session frees the lock
		}
	}()
	return fn()
}

// waitXidSettled waits until no transaction below horizon runs any more, polling; it gives up
// after outboxSettleWait (a long transaction is open), to be tried again at the next round.
func waitXidSettled(ctx context.Context, conn *pgx.Conn, horizon string) error {
	deadline := time.Now().Add(outboxSettleWait)
	for {
		var settled bool
		if err := conn.QueryRow(ctx, outboxXidSettled, horizon).Scan(&settled); err != nil {
			return fmt.Errorf("read the transaction horizon: %w", err)
		}
		if settled {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("transactions older than id %s still run after %s: partitions kept until they end", horizon, outboxSettleWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dropOutboxPartition detaches a partition (how: CONCURRENTLY, or FINALIZE for one whose
// concurrent detach was interrupted) and drops it. Detached, it is a table nobody reads, and
// dropping it locks nothing anyone waits for.
func dropOutboxPartition(ctx context.Context, conn *pgx.Conn, table, partition, how string) error {
	name := pgx.Identifier{partition}.Sanitize()
	if _, err := conn.Exec(ctx, `ALTER TABLE `+pgx.Identifier{table}.Sanitize()+` DETACH PARTITION `+name+` `+how); err != nil {
		return fmt.Errorf("detach partition %s: %w", partition, err)
	}
	if _, err := conn.Exec(ctx, `DROP TABLE `+name); err != nil {
		return fmt.Errorf("drop partition %s: %w", partition, err)
	}
	return nil
}

// RotateOutboxEvery rotates the outbox at each interval until ctx ends, logging each partition
// it drops.
func RotateOutboxEvery(ctx context.Context, pool *pgxpool.Pool, interval time.Duration, logger *slog.Logger) error {
	return every(ctx, interval, func() {
		dropped, err := RotateOutbox(ctx, pool)
		for _, p := range dropped {
			logger.Info("outbox partition dropped: every row relayed", "partition", p.Name, "from", p.From, "to", p.To)
		}
		if err != nil && ctx.Err() == nil {
			logger.Warn("outbox rotation failed; trying again", "err", err, "next_in", interval)
		}
	})
}

// every runs fn at each interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		fn()
	}
}

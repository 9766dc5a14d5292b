package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// watermill-sql never deletes outbox rows. Rows below the relay's committed offset have been
// published and confirmed; keeping them only slows the subscriber's queries and grows the table.
// The events table, not the outbox, is the durable history.
func outboxPrune(shard int) string {
	rows := OutboxSchema.MessagesTable(OutboxTopicOf(shard))
	offsets := OutboxOffsets.MessagesOffsetsTable(OutboxTopicOf(shard))
	return `DELETE FROM ` + rows + ` WHERE ctid = ANY (ARRAY(
	SELECT o.ctid FROM ` + rows + ` o, ` + offsets + ` p
	WHERE p.consumer_group = $1 AND o.transaction_id < p.last_processed_transaction_id
	LIMIT $2))`
}

// OutboxPrune deletes up to limit rows per shard that the consumer group has passed, returning
// how many.
func OutboxPrune(ctx context.Context, pool *pgxpool.Pool, consumerGroup string, limit int) (int64, error) {
	var n int64
	for shard := range OutboxShards {
		tag, err := pool.Exec(ctx, outboxPrune(shard), consumerGroup, limit)
		if err != nil {
			return n, fmt.Errorf("prune outbox shard %d: %w", shard, err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// PruneOutboxEvery prunes in small batches at each interval until ctx ends.
func PruneOutboxEvery(ctx context.Context, pool *pgxpool.Pool, consumerGroup string, interval time.Duration, logger *slog.Logger) error {
	return every(ctx, interval, func() {
		for {
			n, err := OutboxPrune(ctx, pool, consumerGroup, 5000)
			if err != nil {
				if ctx.Err() == nil {
					logger.Warn("outbox prune failed", "err", err)
				}
				break
			}
			if n < 5000*OutboxShards {
				break
			}
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

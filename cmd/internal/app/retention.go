package app

import (
	"context"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
)

// partitionConfig is how the ledger's time partitions are cut (the file's retention.partition).
func (a *App) partitionConfig() postgres.PartitionConfig {
	return postgres.PartitionConfig{Width: a.retention.PartitionWidth()}
}

// ensurePartitions creates the partitions the next hours need before any role writes: a write
// whose time has no partition fails.
func (a *App) ensurePartitions(ctx context.Context) error {
	created, err := postgres.EnsurePartitions(ctx, a.pool, a.partitionConfig(), time.Now())
	if err != nil {
		return err
	}
	for _, p := range created {
		a.logger.Info("partition created", "table", p.Table, "partition", p.Name, "from", p.From, "to", p.To)
	}
	return nil
}

// keepPartitions keeps partitions ahead of the clock while the process runs. Every process that
// writes runs it; they take turns on one lock, and a round that fails (a lock not had in time)
// is tried again at the next, long before the partitions ahead run out.
func (a *App) keepPartitions(ctx context.Context) error {
	cfg := a.partitionConfig()
	interval := min(max(cfg.Width/4, time.Second), time.Minute)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		if err := a.ensurePartitions(ctx); err != nil && ctx.Err() == nil {
			a.logger.Warn("partition maintenance failed; trying again", "err", err, "next_in", interval)
		}
	}
}

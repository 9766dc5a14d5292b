package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/retention"
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

// retentionPass is the pass that moves old partitions to the archive, or nil when the file's
// retention keeps everything.
func (a *App) retentionPass() (*retention.Pass, error) {
	if !a.retention.Active() {
		return nil, nil
	}
	pass := &retention.Pass{Store: postgres.NewRetentionStore(a.pool), Config: a.retention,
		Observer: a.metrics, Logger: a.logger.With("role", "retention")}
	if a.retention.Keep > 0 {
		dir, err := archive.NewDir(a.retention.ArchiveDir)
		if err != nil {
			return nil, fmt.Errorf("retention.archive_dir: %w", err)
		}
		pass.Archive = archive.ForRetention{Store: dir}
	}
	return pass, nil
}

// retentionInterval is how often the pass looks: a quarter of the shortest of the partition's
// width and the payloads periods, within [1s, 5m].
func (a *App) retentionInterval() time.Duration {
	d := a.retention.PartitionWidth()
	for _, p := range []time.Duration{a.retention.Payloads} {
		if p > 0 {
			d = min(d, p)
		}
	}
	for _, t := range a.retention.Tenants {
		if t.Payloads > 0 {
			d = min(d, t.Payloads)
		}
	}
	return min(max(d/4, time.Second), 5*time.Minute)
}

// EnsureFilePartitions creates the partitions of the configuration file's retention.partition
// width, ahead of now, for `ledger migrate --config FILE`: a schema migrated for a ledger that
// cuts partitions seconds wide (a soak, a test) gets them at once, not the width of whatever
// process starts first. It reads the file as `serve` does.
func EnsureFilePartitions(ctx context.Context, pool *pgxpool.Pool, cfg Config, now time.Time) ([]postgres.Partition, postgres.PartitionConfig, error) {
	file, err := cfg.loadFile()
	if err != nil {
		return nil, postgres.PartitionConfig{}, err
	}
	pc := postgres.PartitionConfig{Width: file.Retention.PartitionWidth()}
	created, err := postgres.EnsurePartitions(ctx, pool, pc, now)
	return created, pc, err
}

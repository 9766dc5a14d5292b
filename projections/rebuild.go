package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of RebuildConfig.
const (
	DefaultRebuildBatchSize  = 10000
	DefaultSwitchLockTimeout = 5 * time.Second
	// maxSwitchAttempts bounds how often a switch that could not get its locks in time is tried
	// again (each time after catching up once more).
	maxSwitchAttempts = 10
	// remainingRecount is how often the estimate of the events left is counted again.
	remainingRecount = 5 * time.Second
	// switchBelow: the catch-up hands over to the switch when a batch brings fewer events than
	// this, so that the switch, during which the live projector waits, applies only a few.
	switchBelow = 1000
)

// Phases of a rebuild, as RebuildProgress reports them.
const (
	PhaseBuilding  = "building"
	PhaseSwitching = "switching"
	PhaseDone      = "done"
)

// ErrRebuildRunning is returned when another rebuild of the same projection holds its lock.
var ErrRebuildRunning = errors.New("a rebuild of this projection is already running")

// RebuildConfig tunes Rebuild.
type RebuildConfig struct {
	// BatchSize is the most events applied to the shadow in one transaction. Zero means
	// DefaultRebuildBatchSize.
	BatchSize int
	// Restart drops a shadow left by an interrupted rebuild and starts from position zero. A
	// shadow whose columns or projection version no longer match is dropped in any case.
	Restart bool
	// SwitchLockTimeout bounds the wait for the locks of the switch (the live checkpoint row and
	// the live table); on timeout the rebuild catches up again and retries. Zero means
	// DefaultSwitchLockTimeout.
	SwitchLockTimeout time.Duration
	// Progress, when set, is called after every batch and at each phase change.
	Progress func(RebuildProgress)
	// Logger receives what the operator should know; nil discards it.
	Logger *slog.Logger
}

// RebuildProgress is how far a rebuild has come.
type RebuildProgress struct {
	Projection string
	// Phase is PhaseBuilding, PhaseSwitching or PhaseDone.
	Phase string
	// Resumed is the number of events the shadow held when this run started (0: from scratch).
	Resumed int64
	// Applied is the number of events this run has applied to the shadow.
	Applied int64
	// Remaining estimates the events between the shadow and the head of the log.
	Remaining int64
	// Elapsed is the time since this run started.
	Elapsed time.Duration
}

// RebuildResult is the outcome of a finished rebuild.
type RebuildResult struct {
	// Resumed is the number of events the shadow held when this run started.
	Resumed int64
	// Applied is the number of events this run applied.
	Applied int64
	// Position is the live view's checkpoint right after the switch.
	Position LogPosition
	Elapsed  time.Duration
	// SwitchDuration is how long the switch transaction held the live checkpoint.
	SwitchDuration time.Duration
}

// shadowNames returns the checkpoint name and table of p's shadow.
func shadowNames(p Projection) (name, table string) {
	return p.Name() + ".rebuild", ShadowTable(p.Table())
}

// ShadowTable is the table a rebuild of the view kept in table builds: the store's partition
// maintenance looks for it, to cut the partitions it cuts in a partitioned view in its shadow too.
func ShadowTable(table string) string { return table + "_rebuild" }

// Rebuild builds a new version of p's view from position zero into a shadow table while the live
// view keeps serving (and its projector keeps running), catches up with the head of the log, then
// switches atomically:
//
//  1. The shadow (TABLE_rebuild) is created LIKE the live table, so it has the columns the
//     migrations gave the live one, with a checkpoint of its own (NAME.rebuild) at zero. A
//     projection whose view does not follow from the log alone seeds it (the counters: what
//     the archived segments took with them).
//  2. Batches fold the log into the shadow, each in its own short transaction with the shadow's
//     checkpoint, so a killed rebuild resumes where it stopped, and no long transaction holds
//     back the other followers of the log.
//  3. The switch is one transaction: it locks the live checkpoint row (the live projector
//     waits), applies the last events to the shadow, renames the live table away, renames the
//     shadow into its place, drops the old table, and gives the live checkpoint the shadow's
//     position. Readers see the old table or the new one, never an empty or half-built one.
//
// log is the events log of the database store keeps the views in.
func Rebuild(ctx context.Context, store Store, log Log, p Projection, cfg RebuildConfig) (RebuildResult, error) {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultRebuildBatchSize
	}
	if cfg.SwitchLockTimeout <= 0 {
		cfg.SwitchLockTimeout = DefaultSwitchLockTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &rebuild{store: store, log: log, p: p, cfg: cfg, start: time.Now()}
	r.shadowName, r.shadowTable = shadowNames(p)

	release, locked, err := store.RebuildLock(ctx, p.Name())
	if err != nil {
		return RebuildResult{}, fmt.Errorf("rebuild %s: %w", p.Name(), err)
	}
	if !locked {
		return RebuildResult{}, fmt.Errorf("rebuild %s: %w", p.Name(), ErrRebuildRunning)
	}
	defer release()

	if err := r.prepare(ctx); err != nil {
		return RebuildResult{}, fmt.Errorf("rebuild %s: %w", p.Name(), err)
	}
	if err := r.catchUp(ctx); err != nil {
		return r.result(), fmt.Errorf("rebuild %s: %w", p.Name(), err)
	}
	for attempt := 1; ; attempt++ {
		r.report(PhaseSwitching)
		err := r.switchOver(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrBusy) || attempt == maxSwitchAttempts {
			return r.result(), fmt.Errorf("rebuild %s: switch: %w", p.Name(), err)
		}
		cfg.Logger.Warn("rebuild switch could not take its locks in time; catching up and trying again",
			"projection", p.Name(), "attempt", attempt, "err", err)
		if err := r.catchUp(ctx); err != nil {
			return r.result(), fmt.Errorf("rebuild %s: %w", p.Name(), err)
		}
	}
	r.report(PhaseDone)
	return r.result(), nil
}

// rebuild is the state of one Rebuild run.
type rebuild struct {
	store                   Store
	log                     Log
	p                       Projection
	cfg                     RebuildConfig
	shadowName, shadowTable string

	start         time.Time
	resumed       int64
	applied       int64
	remaining     int64
	countedAt     time.Time
	countedAfter  int64 // applied when remaining was counted
	position      LogPosition
	switchElapsed time.Duration
}

func (r *rebuild) result() RebuildResult {
	return RebuildResult{Resumed: r.resumed, Applied: r.applied, Position: r.position,
		Elapsed: time.Since(r.start), SwitchDuration: r.switchElapsed}
}

func (r *rebuild) report(phase string) {
	if r.cfg.Progress == nil {
		return
	}
	r.cfg.Progress(RebuildProgress{Projection: r.p.Name(), Phase: phase, Resumed: r.resumed, Applied: r.applied,
		Remaining: max(r.remaining-(r.applied-r.countedAfter), 0), Elapsed: time.Since(r.start)})
}

// prepare resumes the shadow of an interrupted rebuild, or creates a fresh one.
func (r *rebuild) prepare(ctx context.Context) error {
	if err := r.store.CheckpointEnsure(ctx, r.p.Name(), r.p.Version()); err != nil {
		return err
	}
	return r.store.InTx(ctx, TxOptions{}, func(tx Tx) error {
		cp, err := tx.CheckpointLock(ctx, r.shadowName)
		fresh := errors.Is(err, ErrNoCheckpoint)
		if err != nil && !fresh {
			return err
		}
		if !fresh && !r.cfg.Restart {
			same, err := tx.ShadowMatches(ctx, r.p.Table(), r.shadowTable)
			if err != nil {
				return err
			}
			if same && cp.Version == r.p.Version() {
				r.resumed = cp.Events
				r.cfg.Logger.Info("resuming the shadow of an interrupted rebuild", "projection", r.p.Name(),
					"events", cp.Events, "position", cp.At.String())
				return nil
			}
			r.cfg.Logger.Warn("the shadow of an interrupted rebuild no longer matches the live table or this projection's version; starting over",
				"projection", r.p.Name(), "shadow_version", cp.Version, "code_version", r.p.Version())
		}
		if err := tx.ShadowCreate(ctx, r.p.Table(), r.shadowTable); err != nil {
			return fmt.Errorf("create shadow %s: %w", r.shadowTable, err)
		}
		if s, ok := r.p.(seeder); ok {
			if err := s.Seed(ctx, tx, r.shadowTable); err != nil {
				return err
			}
		}
		return tx.CheckpointReset(ctx, r.shadowName, r.p.Version())
	})
}

// countRemaining estimates the events left between the shadow and the head of the log.
func (r *rebuild) countRemaining(ctx context.Context) error {
	v, err := r.store.Position(ctx, r.shadowName)
	if err != nil {
		return err
	}
	r.remaining, r.countedAfter, r.countedAt = v.LagEvents, r.applied, time.Now()
	return nil
}

// catchUp applies batches to the shadow until a batch comes back short: the shadow is then close
// to the head, and the switch applies the rest. The next batch is read while the current one is
// applied (the log is immutable, and the checkpoint check in applyBatch still guards the order).
func (r *rebuild) catchUp(ctx context.Context) error {
	if err := r.countRemaining(ctx); err != nil {
		return err
	}
	r.report(PhaseBuilding)
	cp, err := r.store.CheckpointGet(ctx, r.shadowName)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	at := cp.At
	next := r.readAhead(ctx, at)
	for {
		read := <-next
		if read.err != nil {
			return read.err
		}
		batch := read.batch
		if len(batch) == 0 {
			return nil
		}
		last := batch[len(batch)-1].At
		short := len(batch) < min(r.cfg.BatchSize, switchBelow)
		if !short {
			next = r.readAhead(ctx, last)
		}
		err := r.store.InTx(ctx, TxOptions{AsyncCommit: true}, func(tx Tx) error {
			return applyBatch(ctx, tx, r.p, r.shadowName, r.shadowTable, at, batch)
		})
		if err != nil {
			return err
		}
		at = last
		r.applied += int64(len(batch))
		if time.Since(r.countedAt) > remainingRecount {
			if err := r.countRemaining(ctx); err != nil {
				return err
			}
		}
		r.report(PhaseBuilding)
		if short {
			return nil
		}
	}
}

// logRead is the outcome of a read ahead.
type logRead struct {
	batch []LoggedEvent
	err   error
}

// readAhead reads the batch after `after` in the background.
func (r *rebuild) readAhead(ctx context.Context, after LogPosition) <-chan logRead {
	out := make(chan logRead, 1)
	go func() {
		batch, err := r.log.ReadLog(ctx, after, r.cfg.BatchSize)
		out <- logRead{batch: batch, err: err}
	}()
	return out
}

// switchOver is the switch transaction (step 3 of Rebuild).
func (r *rebuild) switchOver(ctx context.Context) error {
	began := time.Now()
	var applied int64
	err := r.store.InTx(ctx, TxOptions{LockTimeout: r.cfg.SwitchLockTimeout}, func(tx Tx) error {
		// The live projector locks this row before each batch: it now waits for the switch.
		liveCP, err := tx.CheckpointLock(ctx, r.p.Name())
		if err != nil {
			return err
		}
		shadowCP, err := tx.CheckpointLock(ctx, r.shadowName)
		if err != nil {
			return err
		}
		at := shadowCP.At
		for {
			batch, err := r.log.ReadLog(ctx, at, r.cfg.BatchSize)
			if err != nil {
				return err
			}
			if len(batch) == 0 {
				break
			}
			if err := applyBatch(ctx, tx, r.p, r.shadowName, r.shadowTable, at, batch); err != nil {
				return err
			}
			at = batch[len(batch)-1].At
			applied += int64(len(batch))
		}
		// The log only grows below the oldest running transaction, so the loop above, which read
		// it to its end, brought the shadow at least as far as the live view got, but for the
		// events that have left it since the live view applied them: a retention pass dropped the
		// partition of the latest ones. The shadow then takes the live position, with nothing
		// left between the two to apply: a view must never move backwards (a reader waiting for
		// a position it was given would wait for ever).
		if logBefore(at, liveCP.At) {
			if err := tx.CheckpointAdvance(ctx, r.shadowName, LoggedEvent{At: liveCP.At}, 0, r.p.Version()); err != nil {
				return err
			}
			r.cfg.Logger.Info("the latest events the live view applied have left the log; the rebuilt view keeps its position",
				"projection", r.p.Name(), "shadow", at.String(), "live", liveCP.At.String())
			at = liveCP.At
		}
		// Readers wait from here to the commit only: the catch-up above did not block them.
		if err := tx.ShadowSwitch(ctx, r.p.Table(), r.shadowTable); err != nil {
			return err
		}
		if err := tx.CheckpointMove(ctx, r.p.Name(), r.shadowName); err != nil {
			return err
		}
		r.position = at
		return nil
	})
	if err != nil {
		return err
	}
	r.applied += applied
	r.switchElapsed = time.Since(began)
	return nil
}

// logBefore reports whether a comes before b in the log's order.
func logBefore(a, b LogPosition) bool {
	if a.TransactionID != b.TransactionID {
		return a.TransactionID < b.TransactionID
	}
	return a.Position < b.Position
}

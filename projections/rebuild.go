package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
	return p.Name() + ".rebuild", p.Table() + "_rebuild"
}

// Statements of a rebuild; they name tables, so the names are quoted into the text.
const (
	rebuildLock   = `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/rebuild/' || $1, 0))`
	rebuildUnlock = `SELECT pg_advisory_unlock(hashtextextended(current_schema() || '/rebuild/' || $1, 0))`
	// tableColumnsGet describes a table's columns, to tell whether a shadow still has the live
	// table's shape (a migration may have run since it was started).
	tableColumnsGet = `SELECT coalesce(string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attname), '')
FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`
	tableIndexesList = `SELECT ci.relname FROM pg_index i JOIN pg_class ci ON ci.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1) ORDER BY ci.relname`
)

// Rebuild builds a new version of p's view from position zero into a shadow table while the live
// view keeps serving (and its projector keeps running), catches up with the head of the log, then
// switches atomically:
//
//  1. The shadow (TABLE_rebuild) is created LIKE the live table, so it has the columns the
//     migrations gave the live one, with a checkpoint of its own (NAME.rebuild) at zero.
//  2. Batches fold the log into the shadow, each in its own short transaction with the shadow's
//     checkpoint, so a killed rebuild resumes where it stopped, and no long transaction holds
//     back the other followers of the log.
//  3. The switch is one transaction: it locks the live checkpoint row (the live projector
//     waits), applies the last events to the shadow, renames the live table away, renames the
//     shadow into its place, drops the old table, and gives the live checkpoint the shadow's
//     position. Readers see the old table or the new one, never an empty or half-built one.
//
// log is the events log of the database pool connects to.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, log Log, p Projection, cfg RebuildConfig) (RebuildResult, error) {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultRebuildBatchSize
	}
	if cfg.SwitchLockTimeout <= 0 {
		cfg.SwitchLockTimeout = DefaultSwitchLockTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &rebuild{pool: pool, log: log, p: p, cfg: cfg, start: time.Now()}
	r.shadowName, r.shadowTable = shadowNames(p)

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return RebuildResult{}, fmt.Errorf("rebuild %s: %w", p.Name(), err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, rebuildLock, p.Name()).Scan(&locked); err != nil {
		return RebuildResult{}, fmt.Errorf("rebuild %s: %w", p.Name(), err)
	}
	if !locked {
		return RebuildResult{}, fmt.Errorf("rebuild %s: %w", p.Name(), ErrRebuildRunning)
	}
	defer conn.Exec(context.WithoutCancel(ctx), rebuildUnlock, p.Name()) //nolint:errcheck // the session ends the lock anyway

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
		if !retryableSwitch(err) || attempt == maxSwitchAttempts {
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
	pool                    *pgxpool.Pool
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
	if _, err := r.pool.Exec(ctx, checkpointEnsure, r.p.Name(), r.p.Version()); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		cp, err := getCheckpoint(ctx, tx, r.shadowName, true)
		fresh := errors.Is(err, errNoCheckpoint)
		if err != nil && !fresh {
			return err
		}
		if !fresh && !r.cfg.Restart {
			var live, shadow string
			if err := tx.QueryRow(ctx, tableColumnsGet, r.p.Table()).Scan(&live); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, tableColumnsGet, r.shadowTable).Scan(&shadow); err != nil {
				return err
			}
			if shadow != "" && shadow == live && cp.version == r.p.Version() {
				r.resumed = cp.events
				r.cfg.Logger.Info("resuming the shadow of an interrupted rebuild", "projection", r.p.Name(),
					"events", cp.events, "position", cp.at.String())
				return nil
			}
			r.cfg.Logger.Warn("the shadow of an interrupted rebuild no longer matches the live table or this projection's version; starting over",
				"projection", r.p.Name(), "shadow_version", cp.version, "code_version", r.p.Version())
		}
		for _, stmt := range []string{
			`DROP TABLE IF EXISTS ` + ident(r.shadowTable),
			`CREATE TABLE ` + ident(r.shadowTable) + ` (LIKE ` + ident(r.p.Table()) + ` INCLUDING ALL)`,
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("create shadow %s: %w", r.shadowTable, err)
			}
		}
		_, err = tx.Exec(ctx, checkpointReset, r.shadowName, r.p.Version())
		return err
	})
}

// countRemaining estimates the events left between the shadow and the head of the log.
func (r *rebuild) countRemaining(ctx context.Context) error {
	v, err := viewPosition(ctx, r.pool, r.shadowName)
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
	cp, err := getCheckpoint(ctx, r.pool, r.shadowName, false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	at := cp.at
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
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, commitAsyncSet); err != nil {
				return err
			}
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
	live, shadow := ident(r.p.Table()), ident(r.shadowTable)
	retired := ident(r.p.Table() + "_retired")
	var applied int64
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, r.cfg.SwitchLockTimeout.Milliseconds())); err != nil {
			return err
		}
		// The live projector locks this row before each batch: it now waits for the switch.
		liveCP, err := getCheckpoint(ctx, tx, r.p.Name(), true)
		if err != nil {
			return err
		}
		shadowCP, err := getCheckpoint(ctx, tx, r.shadowName, true)
		if err != nil {
			return err
		}
		at := shadowCP.at
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
		// The log only grows below the oldest running transaction, so the loop above brought the
		// shadow at least as far as the live view got; a view must never move backwards.
		if logBefore(at, liveCP.at) {
			return fmt.Errorf("shadow at %s is behind the live view at %s", at, liveCP.at)
		}
		// Readers wait from here to the commit only: the catch-up above did not block them.
		for _, stmt := range []string{
			`LOCK TABLE ` + live + ` IN ACCESS EXCLUSIVE MODE`,
			`ALTER TABLE ` + live + ` RENAME TO ` + retired,
			`ALTER TABLE ` + shadow + ` RENAME TO ` + live,
			`DROP TABLE ` + retired,
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		if err := renameIndexes(ctx, tx, r.shadowTable, r.p.Table()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, checkpointMove, r.p.Name(), r.shadowName); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, checkpointDelete, r.shadowName); err != nil {
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

// renameIndexes gives the indexes a table inherited from its shadow the names they would have
// had on the table created by the migrations (CREATE TABLE ... LIKE names them after the shadow).
func renameIndexes(ctx context.Context, tx pgx.Tx, from, to string) error {
	rows, err := tx.Query(ctx, tableIndexesList, to)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range names {
		suffix, ok := strings.CutPrefix(name, from+"_")
		if !ok {
			continue
		}
		if _, err := tx.Exec(ctx, `ALTER INDEX `+ident(name)+` RENAME TO `+ident(to+"_"+suffix)); err != nil {
			return fmt.Errorf("rename index %s: %w", name, err)
		}
	}
	return nil
}

// retryableSwitch reports whether a failed switch may simply be tried again: it timed out on a
// lock (a long reader, a running verify) or lost a deadlock.
func retryableSwitch(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
}

// logBefore reports whether a comes before b in the log's order.
func logBefore(a, b LogPosition) bool {
	if a.TransactionID != b.TransactionID {
		return a.TransactionID < b.TransactionID
	}
	return a.Position < b.Position
}

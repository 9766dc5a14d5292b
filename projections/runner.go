package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Defaults of RunnerConfig.
const (
	DefaultBatchSize    = 500
	DefaultPollInterval = 200 * time.Millisecond
	DefaultLagInterval  = 2 * time.Second
	// DefaultGather is the shortest time between two reads of the log by a projection that has
	// caught up. Woken by every append, a projection applied each event in a transaction of its
	// own: at 200 deliveries a second, 1.3 projector transactions and 8 statements per delivery.
	// Gathering a tenth of a second's events into one batch makes the views lag by up to that
	// much more, and costs the database a few transactions a second per projection instead.
	DefaultGather = 100 * time.Millisecond
	// maxRetryDelay bounds the wait after a failed batch (database down, a poisoned event).
	maxRetryDelay = 30 * time.Second
)

// Metrics receives the projector's measurements. *metrics.Metrics implements it; a nil
// *metrics.Metrics records nothing.
type Metrics interface {
	// ProjectionApplied counts events applied to a view.
	ProjectionApplied(projection string, events int)
	// ProjectionLag sets how far a view is behind the log.
	ProjectionLag(projection string, events int64, behind time.Duration)
	// ViewDeliveries sets the number of deliveries in a state, over all tenants.
	ViewDeliveries(channel, state string, n int64)
}

type noMetrics struct{}

func (noMetrics) ProjectionApplied(string, int)              {}
func (noMetrics) ProjectionLag(string, int64, time.Duration) {}
func (noMetrics) ViewDeliveries(string, string, int64)       {}

// RunnerConfig tunes the projector.
type RunnerConfig struct {
	// BatchSize is the most events applied in one transaction. Zero means DefaultBatchSize.
	BatchSize int
	// PollInterval is how long an idle projector waits before it reads the log again. Zero
	// means DefaultPollInterval.
	PollInterval time.Duration
	// LagInterval is how often the lag gauges are refreshed. Zero means DefaultLagInterval.
	LagInterval time.Duration
	// Gather is the shortest time between two reads of the log by a projection that has caught
	// up, however often it is woken. Zero means DefaultGather; negative, no wait.
	Gather time.Duration
	// Wake, when set, is called once by Run for a channel that wakes an idle projector before
	// its poll interval (postgres.NotifyWaker); the channel's producer must stop with ctx.
	Wake func(ctx context.Context) <-chan struct{}
	// Metrics receives applied counts and lag; nil records nothing.
	Metrics Metrics
	// Logger receives failures and warnings; nil discards them.
	Logger *slog.Logger
}

// Validate reports every problem of the configuration at once.
func (c RunnerConfig) Validate() error {
	var problems []error
	if c.BatchSize < 0 {
		problems = append(problems, fmt.Errorf("projector batch size %d is negative", c.BatchSize))
	}
	if c.PollInterval < 0 {
		problems = append(problems, fmt.Errorf("projector poll interval %s is negative", c.PollInterval))
	}
	if c.LagInterval < 0 {
		problems = append(problems, fmt.Errorf("projector lag interval %s is negative", c.LagInterval))
	}
	return errors.Join(problems...)
}

func (c RunnerConfig) withDefaults() RunnerConfig {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.LagInterval == 0 {
		c.LagInterval = DefaultLagInterval
	}
	if c.Gather == 0 {
		c.Gather = DefaultGather
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Runner is the projector: it follows the log and keeps each projection's view, each on its own
// checkpoint. Several runners (in several processes) may run at once: they take turns on each
// checkpoint and never apply an event twice.
type Runner struct {
	store       Store
	log         Log
	projections []Projection
	cfg         RunnerConfig
}

// NewRunner returns a projector for the projections kept in store, following log, the events log
// of the same database.
func NewRunner(store Store, log Log, projections []Projection, cfg RunnerConfig) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(projections) == 0 {
		return nil, errors.New("projector: no projections")
	}
	return &Runner{store: store, log: log, projections: projections, cfg: cfg.withDefaults()}, nil
}

// Run keeps the views until ctx is cancelled. A failing batch is logged and retried with a
// growing delay; it never stops the other projections.
func (r *Runner) Run(ctx context.Context) error {
	for _, p := range r.projections {
		if err := r.prepare(ctx, p); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	wakes := make([]chan struct{}, len(r.projections))
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
	}
	var wg sync.WaitGroup
	if r.cfg.Wake != nil {
		wake := r.cfg.Wake(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-wake:
					for _, w := range wakes {
						select {
						case w <- struct{}{}:
						default:
						}
					}
				}
			}
		}()
	}
	for i, p := range r.projections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.follow(ctx, p, wakes[i])
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.watchLag(ctx)
	}()
	wg.Wait()
	return nil
}

// prepare makes sure the checkpoint exists and warns about a view that a different version of
// the projection built.
func (r *Runner) prepare(ctx context.Context, p Projection) error {
	if err := r.store.CheckpointEnsure(ctx, p.Name(), p.Version()); err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	cp, err := r.store.CheckpointGet(ctx, p.Name())
	if err != nil {
		return fmt.Errorf("projector: %w", err)
	}
	switch {
	case cp.Events > 0 && cp.Version < p.Version():
		r.cfg.Logger.Warn("view was built by an older projection: rows from before the upgrade lack the new columns; run `ledger projections rebuild "+p.Name()+"`",
			"projection", p.Name(), "view_version", cp.Version, "code_version", p.Version())
	case cp.Version > p.Version():
		r.cfg.Logger.Warn("view was built by a newer projection than this binary's",
			"projection", p.Name(), "view_version", cp.Version, "code_version", p.Version())
	}
	return nil
}

// follow applies batches of one projection until ctx is cancelled.
func (r *Runner) follow(ctx context.Context, p Projection, wake <-chan struct{}) {
	var delay time.Duration
	for {
		read := time.Now()
		more, err := r.step(ctx, p)
		if ctx.Err() != nil {
			return
		}
		wait := r.cfg.PollInterval
		switch {
		case err != nil:
			delay = min(max(2*delay, time.Second), maxRetryDelay)
			wait = delay
			r.cfg.Logger.Error("projector batch failed; retrying", "projection", p.Name(), "retry_in", delay, "err", err)
		case more:
			delay = 0
			continue
		default:
			delay = 0
		}
		woken := wake
		if err != nil {
			// A failed batch waits its delay: a wake-up must not turn the retry into a spin.
			woken = nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-woken:
		case <-timer.C:
		}
		timer.Stop()
		// Caught up, the projection reads again no sooner than Gather after its last read, so
		// that the appends of a busy log are applied together.
		if rest := r.cfg.Gather - time.Since(read); err == nil && rest > 0 {
			timer := time.NewTimer(rest)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}
	}
}

// step applies one batch of p. more reports that the log may hold further readable events.
func (r *Runner) step(ctx context.Context, p Projection) (more bool, err error) {
	cp, err := r.store.CheckpointGet(ctx, p.Name())
	if err != nil {
		return false, err
	}
	batch, err := r.log.ReadLog(ctx, cp.At, r.cfg.BatchSize)
	if err != nil || len(batch) == 0 {
		return false, err
	}
	err = r.store.InTx(ctx, TxOptions{AsyncCommit: true}, func(tx Tx) error {
		return applyBatch(ctx, tx, p, p.Name(), p.Table(), cp.At, batch)
	})
	if errors.Is(err, errCheckpointMoved) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	r.cfg.Metrics.ProjectionApplied(p.Name(), len(batch))
	return len(batch) == r.cfg.BatchSize, nil
}

// CatchUp applies batches to every projection until none of them has a readable event left. It
// returns the first error. The projector role does not need it; tests and tools do.
func (r *Runner) CatchUp(ctx context.Context) error {
	for _, p := range r.projections {
		if err := r.prepare(ctx, p); err != nil {
			return err
		}
		for {
			more, err := r.step(ctx, p)
			if err != nil {
				return err
			}
			if !more {
				break
			}
		}
	}
	return nil
}

// watchLag refreshes the lag gauges (and the deliveries-by-state gauge) until ctx is cancelled.
func (r *Runner) watchLag(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.LagInterval)
	defer ticker.Stop()
	for {
		r.recordLag(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (r *Runner) recordLag(ctx context.Context) {
	for _, p := range r.projections {
		v, err := r.store.Position(ctx, p.Name())
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Logger.Warn("read projection lag", "projection", p.Name(), "err", err)
			}
			continue
		}
		r.cfg.Metrics.ProjectionLag(p.Name(), v.LagEvents, time.Duration(v.LagSeconds*float64(time.Second)))
		if p.Name() != NameCounters {
			continue
		}
		totals, err := r.store.CountersTotals(ctx)
		if err != nil {
			continue
		}
		for _, t := range totals {
			r.cfg.Metrics.ViewDeliveries(t.Channel, string(t.State), t.Deliveries)
		}
	}
}

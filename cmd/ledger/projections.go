package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterbourgon/ff/v3"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/cmd/internal/app"
	"github.com/deliveryledger/ledger/projections"
)

// projectionsCommand is `ledger projections` with its subcommands rebuild, verify and status.
func projectionsCommand(stdout, stderr io.Writer) *ffcli.Command {
	var cfg app.Config
	rebuildFS := flag.NewFlagSet("ledger projections rebuild", flag.ContinueOnError)
	cfg.ConnectionFlags(rebuildFS)
	var rc projections.RebuildConfig
	rebuildFS.IntVar(&rc.BatchSize, "batch-size", projections.DefaultRebuildBatchSize, "events applied to the shadow per transaction")
	rebuildFS.BoolVar(&rc.Restart, "restart", false, "drop the shadow of an interrupted rebuild and start from position zero")
	rebuildFS.DurationVar(&rc.SwitchLockTimeout, "switch-lock-timeout", projections.DefaultSwitchLockTimeout, "longest wait for the switch's locks before it catches up and tries again")
	rebuild := &ffcli.Command{
		Name:       "rebuild",
		ShortUsage: "ledger projections rebuild [flags] NAME",
		ShortHelp:  "rebuild a view (status, dlq, counters) from the log, then switch to it",
		LongHelp: "Builds the view again from position zero into a shadow table (TABLE_rebuild) while the live\n" +
			"view keeps serving and its projector keeps running, catches up with the log, then switches in\n" +
			"one transaction. Readers never see an empty or half-built view. Killed, it resumes where it\n" +
			"stopped when run again (--restart starts over). Progress goes to stderr.",
		FlagSet: rebuildFS,
		Options: []ff.Option{ff.WithEnvVarPrefix(envPrefix)},
		Exec: func(ctx context.Context, args []string) error {
			p, err := oneProjection(args)
			if err != nil {
				return err
			}
			return rebuildCommand(ctx, cfg, p, rc, stdout, stderr)
		},
	}

	verifyFS := flag.NewFlagSet("ledger projections verify", flag.ContinueOnError)
	cfg.ConnectionFlags(verifyFS)
	verify := &ffcli.Command{
		Name:       "verify",
		ShortUsage: "ledger projections verify [flags] NAME|all",
		ShortHelp:  "fold the log afresh and compare with a live view; exit 1 on any difference",
		LongHelp: "Folds every delivery's events up to the view's checkpoint and compares the result with the\n" +
			"view's rows, printing each difference (missing, extra or differing rows, by column). It reads in\n" +
			"one snapshot, so a running projector causes no false difference.",
		FlagSet: verifyFS,
		Options: []ff.Option{ff.WithEnvVarPrefix(envPrefix)},
		Exec: func(ctx context.Context, args []string) error {
			var ps []projections.Projection
			if len(args) == 1 && args[0] == "all" {
				ps = projections.All()
			} else {
				p, err := oneProjection(args)
				if err != nil {
					return err
				}
				ps = []projections.Projection{p}
			}
			return verifyCommand(ctx, cfg, ps, stdout)
		},
	}

	statusFS := flag.NewFlagSet("ledger projections status", flag.ContinueOnError)
	cfg.ConnectionFlags(statusFS)
	status := &ffcli.Command{
		Name:       "status",
		ShortUsage: "ledger projections status [flags]",
		ShortHelp:  "show each view's position, version and lag behind the log",
		FlagSet:    statusFS,
		Options:    []ff.Option{ff.WithEnvVarPrefix(envPrefix)},
		Exec: func(ctx context.Context, _ []string) error {
			return projectionStatusCommand(ctx, cfg, stdout)
		},
	}

	fs := flag.NewFlagSet("ledger projections", flag.ContinueOnError)
	for _, f := range []*flag.FlagSet{fs, rebuildFS, verifyFS, statusFS} {
		f.SetOutput(stderr)
	}
	cmd := &ffcli.Command{
		Name:        "projections",
		ShortUsage:  "ledger projections <rebuild|verify|status> [flags] [NAME]",
		ShortHelp:   "rebuild, verify or inspect the read models (status, dlq, counters)",
		FlagSet:     fs,
		Subcommands: []*ffcli.Command{rebuild, verify, status},
	}
	cmd.Exec = func(context.Context, []string) error {
		fmt.Fprintln(stderr, ffcli.DefaultUsageFunc(cmd))
		return errors.New("projections: name a subcommand: rebuild, verify or status")
	}
	return cmd
}

// oneProjection reads the NAME argument.
func oneProjection(args []string) (projections.Projection, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("name one projection (status, dlq or counters), got %d arguments", len(args))
	}
	return projections.ByName(args[0])
}

// openDatabase connects a small pool and refuses a schema that is behind the binary.
func openDatabase(ctx context.Context, cfg app.Config) (*pgxpool.Pool, error) {
	// A rebuild holds one connection for its lock and one for its switch, and reads the log on a
	// third.
	pool, err := postgres.Connect(ctx, cfg.DatabaseURL, "", 4)
	if err != nil {
		return nil, err
	}
	if err := postgres.CheckSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func rebuildCommand(ctx context.Context, cfg app.Config, p projections.Projection, rc projections.RebuildConfig, stdout, stderr io.Writer) error {
	pool, err := openDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	rc.Logger = cfg.Logger()
	prog := newProgress(stderr, p.Name()+" rebuild")
	rc.Progress = func(pr projections.RebuildProgress) {
		prog.update(pr.Phase, pr.Resumed+pr.Applied, pr.Resumed+pr.Applied+pr.Remaining, pr.Applied, pr.Phase != projections.PhaseBuilding)
	}
	res, err := projections.Rebuild(ctx, postgres.NewViews(pool), postgres.NewEventStore(pool), p, rc)
	prog.done()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: interrupted; the shadow keeps %d events, run the same command to resume",
				err, res.Resumed+res.Applied)
		}
		return err
	}
	rate := float64(res.Applied) / res.Elapsed.Seconds()
	fmt.Fprintf(stdout, "rebuilt %s: %d events applied (resumed from %d) in %s, %.0f events/s; switch held the live view %s; now at %s\n",
		p.Name(), res.Applied, res.Resumed, res.Elapsed.Round(time.Millisecond), rate,
		res.SwitchDuration.Round(time.Millisecond), res.Position)
	return nil
}

// errViewsDiffer makes `verify` exit non-zero.
var errViewsDiffer = errors.New("the view differs from a fresh fold of the log")

func verifyCommand(ctx context.Context, cfg app.Config, ps []projections.Projection, stdout io.Writer) error {
	pool, err := openDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	differ := 0
	for _, p := range ps {
		res, err := projections.Verify(ctx, postgres.NewViews(pool), p)
		if err != nil {
			return err
		}
		for _, d := range res.Differences {
			fmt.Fprintf(stdout, "%s: %s\n", p.Name(), d)
		}
		behind := ""
		if res.Behind > 0 {
			behind = fmt.Sprintf(" (the view is %d events behind the log)", res.Behind)
		}
		switch {
		case res.Total == 0:
			fmt.Fprintf(stdout, "%s: no difference at %s%s\n", p.Name(), res.Position, behind)
		case res.Total > len(res.Differences):
			fmt.Fprintf(stdout, "%s: %d differences at %s%s (first %d shown)\n", p.Name(), res.Total, res.Position, behind, len(res.Differences))
		default:
			fmt.Fprintf(stdout, "%s: %d differences at %s%s\n", p.Name(), res.Total, res.Position, behind)
		}
		if res.Total > 0 {
			differ++
		}
	}
	if differ > 0 {
		return fmt.Errorf("%w (%d of %d views); `ledger projections rebuild NAME` rebuilds one", errViewsDiffer, differ, len(ps))
	}
	return nil
}

func projectionStatusCommand(ctx context.Context, cfg app.Config, stdout io.Writer) error {
	pool, err := openDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	positions, err := postgres.NewViews(pool).Positions(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-10s %-8s %-24s %12s %12s %10s  %s\n", "VIEW", "VERSION", "POSITION", "EVENTS", "LAG EVENTS", "LAG", "UPDATED")
	for _, v := range positions {
		stale := ""
		if p, err := projections.ByName(v.Name); err == nil && v.Events > 0 && v.Version < p.Version() {
			stale = fmt.Sprintf(" (built by version %d, this binary has %d: rebuild it)", v.Version, p.Version())
		}
		fmt.Fprintf(stdout, "%-10s %-8d %-24s %12d %12d %9.1fs  %s%s\n", v.Name, v.Version, v.Position, v.Events,
			v.LagEvents, v.LagSeconds, v.UpdatedAt.Format(time.RFC3339), stale)
	}
	rebuilds, err := postgres.NewViews(pool).Rebuilds(ctx)
	if err != nil {
		return err
	}
	for _, v := range rebuilds {
		fmt.Fprintf(stdout, "%s: a rebuild holds %d events at %s, %d behind the log, last moved %s; `ledger projections rebuild %s` resumes it\n",
			v.Name, v.Events, v.Position, v.LagEvents, v.UpdatedAt.Format(time.RFC3339), strings.TrimSuffix(v.Name, ".rebuild"))
	}
	return nil
}

// exportCommand is `ledger export`.
func exportCommand(stdout, stderr io.Writer) *ffcli.Command {
	var cfg app.Config
	fs := flag.NewFlagSet("ledger export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.ConnectionFlags(fs)
	since := fs.String("since", "", "first recorded_at to export, RFC 3339 (default: the beginning of the log)")
	until := fs.String("until", "", "recorded_at to stop before, RFC 3339 (default: no end)")
	out := fs.String("out", "", "file to write (default: standard output)")
	return &ffcli.Command{
		Name:       "export",
		ShortUsage: "ledger export [--since RFC3339] [--until RFC3339] [--out FILE]",
		ShortHelp:  "write the events recorded in a time range as JSON lines, for auditors",
		LongHelp: "Writes one JSON object per event recorded in [since, until) and committed when it starts,\n" +
			"in log order: position, transaction_id, delivery_id, tenant, version, type, state (after the\n" +
			"event), recorded_at, idempotency_key, data. It streams, so a range of any size runs in constant\n" +
			"memory. Progress goes to stderr when stderr is a terminal.",
		FlagSet: fs,
		Options: []ff.Option{ff.WithEnvVarPrefix(envPrefix)},
		Exec: func(ctx context.Context, _ []string) error {
			var r postgres.LogRange
			for _, p := range []struct {
				flag, value string
				into        *time.Time
			}{{"--since", *since, &r.Since}, {"--until", *until, &r.Until}} {
				if p.value == "" {
					continue
				}
				t, err := time.Parse(time.RFC3339Nano, p.value)
				if err != nil {
					return fmt.Errorf("%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", p.flag, p.value)
				}
				*p.into = t
			}
			if !r.Since.IsZero() && !r.Until.IsZero() && !r.Until.After(r.Since) {
				return fmt.Errorf("--until %s is not after --since %s", *until, *since)
			}
			return exportLog(ctx, cfg, r, *out, stdout, stderr)
		},
	}
}

func exportLog(ctx context.Context, cfg app.Config, r postgres.LogRange, out string, stdout, stderr io.Writer) (err error) {
	pool, err := openDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := postgres.NewEventStore(pool)
	dest := stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := f.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}()
		dest = f
	}
	var total int64
	showProgress := isTerminal(stderr)
	if showProgress {
		// Counting scans the range once more; it is only worth it for a person watching.
		if total, err = store.CountLog(ctx, r); err != nil {
			return err
		}
	}
	prog := newProgress(stderr, "export")
	prog.quiet = !showProgress
	w := bufio.NewWriterSize(dest, 1<<16)
	lw := archive.NewLineWriter(w)
	var n int64
	err = store.ExportLog(ctx, r, func(e projections.LoggedEvent) error {
		l, err := archive.LineOf(e)
		if err != nil {
			return err
		}
		n++
		prog.update("exporting", n, max(total, n), n, false)
		return lw.Write(l)
	})
	prog.done()
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if out != "" {
		fmt.Fprintf(stderr, "exported %d events to %s\n", n, out)
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal), without a dependency.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress prints how far a long command has come: on a terminal, one line rewritten four times
// a second; otherwise (a log file, CI) a plain line every ten seconds.
type progress struct {
	w       io.Writer
	what    string
	tty     bool
	quiet   bool
	started time.Time
	printed time.Time
	line    bool // a terminal line is open
}

func newProgress(w io.Writer, what string) *progress {
	return &progress{w: w, what: what, tty: isTerminal(w), started: time.Now()}
}

// update reports done of total items (rateBase items since this run started, for the rate);
// force prints regardless of the interval (phase changes).
func (p *progress) update(phase string, done, total, rateBase int64, force bool) {
	if p.quiet {
		return
	}
	interval := 10 * time.Second
	if p.tty {
		interval = 250 * time.Millisecond
	}
	now := time.Now()
	if !force && now.Sub(p.printed) < interval {
		return
	}
	p.printed = now
	elapsed := now.Sub(p.started).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(rateBase) / elapsed
	}
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	eta := "?"
	if rate > 0 && total >= done {
		eta = (time.Duration(float64(total-done) / rate * float64(time.Second))).Round(time.Second).String()
	}
	text := fmt.Sprintf("%s: %s %d/%d events (%.1f%%), %.0f events/s, ETA %s", p.what, phase, done, total, pct, rate, eta)
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\033[K", text)
		p.line = true
		return
	}
	fmt.Fprintln(p.w, text)
}

// done ends an open terminal line.
func (p *progress) done() {
	if p.line {
		fmt.Fprintln(p.w)
		p.line = false
	}
}

package bench

import (
	"github.com/deliveryledger/ledger/cmd/internal/app"

	"cmp"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/retention"
)

// The retention phase (issue 26, points 6 and 7): a steady stream of webhook deliveries through a
// ledger whose retention block archives and drops its time partitions, in compressed time
// (horizons of seconds where production has days). It measures whether PostgreSQL's size stays
// flat once the first partitions leave, what the hot store keeps per delivery, what the archive
// keeps per delivery, and the accept's tail while a partition is detached, archived and dropped
// against the seconds when none is, in the same run.

// Defaults of the retention phase: 200 deliveries a second for 20 keeps of 30 s, partitions of
// 10 s; --quick runs 4 keeps of 6 s over partitions of 2 s.
const (
	DefaultRetentionKeep      = 30 * time.Second
	DefaultRetentionPartition = 10 * time.Second
	DefaultRetentionPeriods   = 20
	DefaultRetentionRate      = 200
	quickRetentionKeep        = 6 * time.Second
	quickRetentionPartition   = 2 * time.Second
	quickRetentionPeriods     = 4
	// retentionSteadyAfter periods are left out of the size's spread: the hot store fills
	// during the first keep and the first partitions leave in the second.
	retentionSteadyAfter = 2
	// retentionDropSlack: a segment's follower partitions (views, payloads, accept answers) are
	// dropped just after its archived_at, outside the transaction that sets it; a second counts
	// as archiving until that long after it.
	retentionDropSlack = time.Second
	// retentionSampleSlack: the accepts waiting on a sample's queries are answered just after
	// they end.
	retentionSampleSlack = 200 * time.Millisecond
	// retentionWarmUp seconds at the start are left out of the accept's latencies: a new
	// ledger opens its connections in its first second.
	retentionWarmUp = 2
	// retentionAfterTheRun bounds the phase past its periods (the stop, the sizes at the end).
	retentionAfterTheRun = 3 * time.Minute
	// retentionSizeTarget is the issue's ±10 %: max/min of the steady samples at most 1.1/0.9.
	retentionSizeTarget = 1.1 / 0.9
	// retentionHotTarget is the bytes per delivery in the hot store.
	retentionHotTarget = 2600
	// retentionAcceptTarget: accept p99 while a partition leaves within 10 % of outside.
	retentionAcceptTarget = 1.10
)

// retentionKeep, retentionPartition, retentionPeriods and retentionRate are the phase's sizes,
// with their defaults.
func (o *Options) retentionKeep() time.Duration {
	return cmp.Or(o.RetentionKeep, DefaultRetentionKeep)
}

func (o *Options) retentionPartition() time.Duration {
	return cmp.Or(o.RetentionPartition, DefaultRetentionPartition)
}

func (o *Options) retentionPeriods() int { return cmp.Or(o.RetentionPeriods, DefaultRetentionPeriods) }

func (o *Options) retentionRate() int { return cmp.Or(o.RetentionRate, DefaultRetentionRate) }

// RetentionResult is the retention phase's series, in the JSON report beside its figures (under
// counts, latency_ms, ratios and bytes_per_delivery, prefixed retention_).
type RetentionResult struct {
	Keep      string `json:"keep"`
	Partition string `json:"partition"`
	Rate      int    `json:"rate"`
	Periods   int    `json:"periods"`
	// Samples are taken at the end of each period.
	Samples []RetentionSample `json:"samples"`
	// Seconds are the accept's latencies per second of the run, each tagged with whether a
	// partition was leaving in it.
	Seconds []RetentionSecond `json:"seconds"`
	// Tables is what each table keeps per hot delivery at the end (table, indexes and TOAST).
	Tables map[string]float64 `json:"tables_bytes_per_delivery"`
	// EventsParts is what the events table keeps per hot delivery by part: its heap with TOAST,
	// each index, each column, each key of data (the sum of pg_column_size of its values).
	EventsParts map[string]float64 `json:"events_bytes_per_delivery"`
	// Relations is what each partitioned table keeps per hot delivery at the end, its heap
	// with TOAST ('<table>.table') and each index ('<table>.<index>').
	Relations map[string]float64 `json:"relations_bytes_per_delivery"`
}

// RetentionSample is what one sample of the retention phase read.
type RetentionSample struct {
	AtSeconds float64 `json:"at_s"`
	// SchemaBytes is pg_total_relation_size summed over every table and partition of the
	// bench's schema (detached ones included), OutboxBytes the outbox's part of it.
	SchemaBytes int64 `json:"schema_bytes"`
	OutboxBytes int64 `json:"outbox_bytes"`
	// AheadBytes is what the partitions ahead of the clock keep (empty, made in advance), the
	// outbox's left out: a fixed cost that compressed time's short partitions magnify (some
	// thirty partitions ahead of each table, where a day's width has three).
	AheadBytes int64 `json:"ahead_bytes"`
	// HotDeliveries are the deliveries whose history is in the hot store (accepted events),
	// HotEvents their events, StatusRows the status view's rows.
	HotDeliveries int64 `json:"hot_deliveries"`
	HotEvents     int64 `json:"hot_events"`
	StatusRows    int64 `json:"status_view_rows"`
	// ArchiveBytes and ArchiveFiles are what the archive directory holds; Segments and
	// ArchivedDeliveries what archive_segments records as archived.
	ArchiveBytes       int64 `json:"archive_bytes"`
	ArchiveFiles       int   `json:"archive_files"`
	Segments           int64 `json:"segments_archived"`
	ArchivedDeliveries int64 `json:"archived_deliveries"`
	// Accepted is how many accepts had been answered by then.
	Accepted int64 `json:"accepted"`
	// TookSeconds is how long the sample's queries took (their count(*) over events read every
	// hot row): the seconds they overlap are the bench's load, left out of the figures.
	TookSeconds float64 `json:"took_s"`
}

// RetentionSecond is the accept's latency in one second of the run (from each request's
// scheduled send time to its 202).
type RetentionSecond struct {
	Second    int     `json:"second"`
	Accepts   int     `json:"accepts"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	Archiving bool    `json:"archiving"`
	// Boundary: the second holds a boundary of the history's partitions, where writes move to
	// the next partition and the partition maintenance attaches one more ahead. With a keep a
	// multiple of the width (the defaults), partitions leave at boundaries too: the seconds at
	// a boundary without a partition leaving tell the two apart.
	Boundary bool `json:"boundary"`
	// Sampling: the phase's own sample ran in the second (RetentionSample.TookSeconds); the
	// second counts neither during nor outside the archive.
	Sampling bool `json:"sampling,omitempty"`
}

// retentionSizesGet sums what the schema keeps, the outbox's part (its shards' tables and
// partitions, not the offsets' table), and the part of the partitions ahead of the clock (the
// outbox's left out), empty but each index of theirs a page or two. A partitioned parent has no
// storage of its own.
const retentionSizesGet = `WITH t AS (SELECT pg_total_relation_size(c.oid) AS size,
		c.relname LIKE 'watermill\_%' AND c.relname NOT LIKE 'watermill\_offsets\_%' AS outbox,
		c.relispartition AND substring(c.relname FROM '_p([0-9]+)_[0-9]+$')::bigint > extract(epoch FROM now()) AS ahead
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'm'))
SELECT coalesce(sum(size), 0)::bigint, coalesce(sum(size) FILTER (WHERE outbox), 0)::bigint,
	coalesce(sum(size) FILTER (WHERE ahead AND NOT outbox), 0)::bigint FROM t`

// retentionHotGet counts what the hot store holds and what archive_segments says left.
const retentionHotGet = `SELECT (SELECT count(*) FROM events WHERE version = 1), (SELECT count(*) FROM events),
	(SELECT count(*) FROM status_view),
	(SELECT count(*) FROM archive_segments WHERE state = 'archived'),
	(SELECT coalesce(sum(deliveries), 0) FROM archive_segments WHERE state = 'archived')::bigint`

// retentionWindowsList lists when each segment was leaving: from its record as 'archiving' to
// its archived_at (still leaving: now).
const retentionWindowsList = `SELECT started_at, coalesce(archived_at, now()) FROM archive_segments ORDER BY started_at`

// retentionAhead is whether partition relname (a regular table) lies ahead of the clock.
const retentionAhead = `coalesce(substring(c.relname FROM '_p([0-9]+)_[0-9]+$')::bigint > extract(epoch FROM now()), false)`

// retentionTablesList is what each table keeps in its partitions that are not ahead of the
// clock (table, indexes, TOAST); a partition the pass detached and did not drop counts with its
// table, by its name.
const retentionTablesList = `SELECT regexp_replace(c.relname, '_p[0-9]+_[0-9]+$', ''), sum(pg_total_relation_size(c.oid))::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'r' AND NOT ` + retentionAhead + ` GROUP BY 1`

// retentionRelationsList is what each partitioned table of the schema keeps over its partitions
// that are not ahead of the clock, as table with its TOAST ('<table>.table') and index by index
// ('<table>.<index>').
const retentionRelationsList = `SELECT pt.relname, ix.relname, sum(pg_relation_size(t.relid))::bigint
FROM pg_class pt JOIN pg_namespace n ON n.oid = pt.relnamespace JOIN pg_index i ON i.indrelid = pt.oid
JOIN pg_class ix ON ix.oid = i.indexrelid, pg_partition_tree(ix.oid) t
JOIN pg_index pi ON pi.indexrelid = t.relid JOIN pg_class c ON c.oid = pi.indrelid
WHERE n.nspname = $1 AND pt.relkind = 'p' AND t.isleaf AND NOT ` + retentionAhead + ` GROUP BY 1, 2
UNION ALL
SELECT pt.relname, 'table', sum(pg_table_size(t.relid))::bigint
FROM pg_class pt JOIN pg_namespace n ON n.oid = pt.relnamespace, pg_partition_tree(pt.oid) t JOIN pg_class c ON c.oid = t.relid
WHERE n.nspname = $1 AND pt.relkind = 'p' AND t.isleaf AND NOT ` + retentionAhead + ` GROUP BY 1, 2`

// retentionEventsColumnsList is what each column of events and each key of its data keeps, summed
// over the hot events (pg_column_size: as stored, compressed or not).
const retentionEventsColumnsList = `SELECT 'column ' || k, sum(v)::bigint FROM events,
	LATERAL (VALUES ('data', pg_column_size(data)), ('metadata', pg_column_size(metadata)),
		('idempotency_key', pg_column_size(idempotency_key)), ('type', pg_column_size(type)),
		('tenant', pg_column_size(tenant))) AS c(k, v) GROUP BY k
UNION ALL
SELECT 'data.' || key, sum(pg_column_size(value))::bigint FROM events, jsonb_each(data) GROUP BY key`

// benchRetention runs the retention phase: a ledger with every role (the pass runs beside the
// projector) and the retention block set, webhook deliveries to the sink at a fixed rate (open
// loop) for periods × keep, a sample at the end of each period, then the accept's latencies
// tagged by the archive's windows and the sizes at the end, table by table.
func benchRetention(ctx context.Context, base app.Config, opts Options, rep *Report, sink *benchSink, track benchTrack, out io.Writer) error {
	keep, part, periods, rate := opts.retentionKeep(), opts.retentionPartition(), opts.retentionPeriods(), opts.retentionRate()
	run := time.Duration(periods) * keep
	ctx, cancel := context.WithTimeout(ctx, run+retentionAfterTheRun)
	defer cancel()
	tmp, err := os.MkdirTemp("", "ledger-bench-retention-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	archiveDir := filepath.Join(tmp, "archive")
	file := filepath.Join(tmp, "ledger.yaml")
	body := fmt.Sprintf("retention: {keep: %s, partition: %s, archive_dir: %s}\nchannels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n",
		retention.FormatDuration(keep), retention.FormatDuration(part), archiveDir)
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		return err
	}
	cfg := base
	cfg.ConfigFile = file
	benchLog(out, "retention: keep %s, partitions of %s, %d/s for %d periods (%s); load average at the start %s", keep, part, rate, periods, run, loadAverage())
	env, err := track(newBenchEnv(ctx, cfg, opts.Logs, "retention", "api,relay,worker,projector"))
	if err != nil {
		return err
	}
	defer env.stop(base)

	res := &RetentionResult{Keep: retention.FormatDuration(keep), Partition: retention.FormatDuration(part), Rate: rate, Periods: periods,
		Tables: map[string]float64{}, EventsParts: map[string]float64{}, Relations: map[string]float64{}}
	rep.Retention = res
	var accepted, failed atomic.Int64
	var firstErr atomic.Value
	seconds := make([][]float64, int(run/time.Second)+2)
	var mu sync.Mutex
	origin := time.Now()
	sampled := make(chan error, 1)
	go func() { sampled <- retentionSamples(ctx, env, archiveDir, origin, keep, periods, &accepted, res) }()
	_ = openLoop(rate, rate*int(run/time.Second), nil, func(_ int, at time.Time) error {
		if _, err := acceptOne(env.base, sink.url); err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
			return nil
		}
		ms := float64(time.Since(at).Microseconds()) / 1000
		accepted.Add(1)
		if s := int(at.Sub(origin) / time.Second); s < len(seconds) {
			mu.Lock()
			seconds[s] = append(seconds[s], ms)
			mu.Unlock()
		}
		return nil
	})
	if err := <-sampled; err != nil {
		return fmt.Errorf("retention samples: %w", err)
	}
	rep.Counts["retention_accepted"], rep.Counts["retention_accept_errors"] = int(accepted.Load()), int(failed.Load())
	if n := failed.Load(); n > 0 {
		rep.Void, rep.VoidReason = true, fmt.Sprintf("retention: %d accepts failed, the first: %v", n, firstErr.Load())
	}
	windows, err := retentionWindows(ctx, env.pool)
	if err != nil {
		return err
	}
	env.stop(base)
	during, outside, boundary := retentionSeconds(res, seconds, origin, part, windows)
	if err := retentionEnd(ctx, env, res); err != nil {
		return err
	}
	retentionFigures(rep, res, during, outside, boundary)
	retentionPrint(res, rep, out)
	return nil
}

// retentionSamples samples the hot store and the archive at the end of each of periods periods
// of keep from origin, into res.Samples.
func retentionSamples(ctx context.Context, env *benchEnv, dir string, origin time.Time, keep time.Duration, periods int, accepted *atomic.Int64, res *RetentionResult) error {
	for k := 1; k <= periods; k++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(origin.Add(time.Duration(k) * keep))):
		}
		s := RetentionSample{AtSeconds: time.Since(origin).Seconds(), Accepted: accepted.Load()}
		if err := env.pool.QueryRow(ctx, retentionSizesGet, env.schema).Scan(&s.SchemaBytes, &s.OutboxBytes, &s.AheadBytes); err != nil {
			return fmt.Errorf("schema size: %w", err)
		}
		if err := env.pool.QueryRow(ctx, retentionHotGet).Scan(&s.HotDeliveries, &s.HotEvents, &s.StatusRows, &s.Segments, &s.ArchivedDeliveries); err != nil {
			return fmt.Errorf("hot store: %w", err)
		}
		var err error
		if s.ArchiveBytes, s.ArchiveFiles, err = dirBytes(dir); err != nil {
			return fmt.Errorf("archive size: %w", err)
		}
		s.TookSeconds = time.Since(origin).Seconds() - s.AtSeconds
		res.Samples = append(res.Samples, s)
	}
	return nil
}

// dirBytes sums the sizes of the files under dir (none when it does not exist yet).
func dirBytes(dir string) (int64, int, error) {
	var size int64
	files := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			size += info.Size()
			files++
		}
		return nil
	})
	return size, files, err
}

// retentionWindow is when one segment was leaving: [from, to).
type retentionWindow struct{ from, to time.Time }

// retentionWindows reads when each segment was leaving, widened by retentionDropSlack for the
// drops of its followers.
func retentionWindows(ctx context.Context, pool *pgxpool.Pool) ([]retentionWindow, error) {
	rows, err := pool.Query(ctx, retentionWindowsList)
	if err != nil {
		return nil, fmt.Errorf("archive windows: %w", err)
	}
	defer rows.Close()
	var out []retentionWindow
	for rows.Next() {
		var w retentionWindow
		if err := rows.Scan(&w.from, &w.to); err != nil {
			return nil, fmt.Errorf("archive windows: %w", err)
		}
		w.to = w.to.Add(retentionDropSlack)
		out = append(out, w)
	}
	return out, rows.Err()
}

// retentionSeconds fills res.Seconds from the latencies of each second since origin, tagged
// archiving when the second overlaps a window, and returns the latencies of the seconds during
// and outside the windows (sorted), the warm-up and the seconds of the phase's own samples left
// out.
func retentionSeconds(res *RetentionResult, seconds [][]float64, origin time.Time, width time.Duration, windows []retentionWindow) (during, outside, boundary []float64) {
	for s, lat := range seconds {
		if len(lat) == 0 {
			continue
		}
		from := origin.Add(time.Duration(s) * time.Second)
		to := from.Add(time.Second)
		archiving := slices.ContainsFunc(windows, func(w retentionWindow) bool { return w.from.Before(to) && w.to.After(from) })
		sampling := slices.ContainsFunc(res.Samples, func(x RetentionSample) bool {
			start := origin.Add(time.Duration(x.AtSeconds * float64(time.Second)))
			end := start.Add(time.Duration(x.TookSeconds*float64(time.Second)) + retentionSampleSlack)
			return start.Before(to) && end.After(from)
		})
		// The boundary at or after from, in the epoch's multiples of width, is before to.
		w := width.Milliseconds()
		atBoundary := (from.UnixMilli()+w-1)/w*w < to.UnixMilli()
		sorted := slices.Clone(lat)
		sort.Float64s(sorted)
		res.Seconds = append(res.Seconds, RetentionSecond{Second: s, Accepts: len(sorted), P50: percentile(sorted, .5), P99: percentile(sorted, .99),
			Archiving: archiving, Boundary: atBoundary, Sampling: sampling})
		if s < retentionWarmUp || sampling {
			continue
		}
		switch {
		case archiving:
			during = append(during, lat...)
		case atBoundary:
			boundary = append(boundary, lat...)
			outside = append(outside, lat...)
		default:
			outside = append(outside, lat...)
		}
	}
	sort.Float64s(during)
	sort.Float64s(outside)
	sort.Float64s(boundary)
	return during, outside, boundary
}

// retentionEnd reads, with the ledger stopped, what each table and each part of events keeps
// per hot delivery.
func retentionEnd(ctx context.Context, env *benchEnv, res *RetentionResult) error {
	var deliveries int64
	if err := env.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE version = 1`).Scan(&deliveries); err != nil {
		return fmt.Errorf("hot deliveries: %w", err)
	}
	if deliveries == 0 {
		return nil
	}
	per := func(b int64) float64 { return float64(b) / float64(deliveries) }
	rows, err := env.pool.Query(ctx, retentionTablesList, env.schema)
	if err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			rows.Close()
			return err
		}
		if size > 0 {
			res.Tables[name] = per(size)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = env.pool.Query(ctx, retentionRelationsList, env.schema)
	if err != nil {
		return fmt.Errorf("indexes: %w", err)
	}
	for rows.Next() {
		var table, name string
		var size int64
		if err := rows.Scan(&table, &name, &size); err != nil {
			rows.Close()
			return err
		}
		res.Relations[table+"."+name] = per(size)
		if table == "events" {
			res.EventsParts["relation "+name] = per(size)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = env.pool.Query(ctx, retentionEventsColumnsList)
	if err != nil {
		return fmt.Errorf("events columns: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			return err
		}
		res.EventsParts[name] = per(size)
	}
	return rows.Err()
}

// retentionFigures puts the phase's figures in the report's maps: sizes per period after the
// first two (max/min), hot and archive bytes per delivery, the accept's p99 during and outside
// the archive's windows.
func retentionFigures(rep *Report, res *RetentionResult, during, outside, boundary []float64) {
	rep.Counts["retention_periods"] = len(res.Samples)
	if n := len(res.Samples); n > 0 {
		last := res.Samples[n-1]
		rep.Counts["retention_segments_archived"] = int(last.Segments)
		rep.Counts["retention_archived_deliveries"] = int(last.ArchivedDeliveries)
		rep.Counts["retention_archive_bytes"] = int(last.ArchiveBytes)
		if last.ArchivedDeliveries > 0 {
			rep.BytesPerDelivery["retention_archive"] = float64(last.ArchiveBytes) / float64(last.ArchivedDeliveries)
		}
	}
	if len(res.Samples) > retentionSteadyAfter {
		steady := res.Samples[retentionSteadyAfter:]
		lo, hi := steady[0].SchemaBytes, steady[0].SchemaBytes
		loHot, hiHot := hotBytes(steady[0]), hotBytes(steady[0])
		// Sizes and hot deliveries are averaged apart: a sample taken just before a partition
		// leaves counts a partition's more deliveries than one just after.
		var all, hot, live, deliveries float64
		for _, s := range steady {
			lo, hi = min(lo, s.SchemaBytes), max(hi, s.SchemaBytes)
			loHot, hiHot = min(loHot, hotBytes(s)), max(hiHot, hotBytes(s))
			all, hot, live = all+float64(s.SchemaBytes), hot+float64(hotBytes(s)), live+float64(hotBytes(s)-s.AheadBytes)
			deliveries += float64(s.HotDeliveries)
		}
		perHot, perAll, perLive := hot/max(deliveries, 1), all/max(deliveries, 1), live/max(deliveries, 1)
		rep.Counts["retention_size_min_bytes"], rep.Counts["retention_size_max_bytes"] = int(lo), int(hi)
		if lo > 0 {
			rep.Ratios["retention_size_max_over_min"] = float64(hi) / float64(lo)
		}
		if loHot > 0 {
			rep.Ratios["retention_size_max_over_min_without_outbox"] = float64(hiHot) / float64(loHot)
		}
		rep.BytesPerDelivery["retention_hot"] = perHot
		rep.BytesPerDelivery["retention_hot_with_outbox"] = perAll
		rep.BytesPerDelivery["retention_hot_without_partitions_ahead"] = perLive
	}
	seconds, sampling := 0, 0
	for _, s := range res.Seconds {
		if s.Archiving {
			seconds++
		}
		if s.Sampling {
			sampling++
		}
	}
	rep.Counts["retention_seconds_archiving"], rep.Counts["retention_seconds"] = seconds, len(res.Seconds)
	rep.Counts["retention_seconds_sampling"] = sampling
	rep.LatencyMS["retention_accept_p99_at_boundaries_outside_archive"] = percentile(boundary, .99)
	rep.LatencyMS["retention_accept_p50_during_archive"], rep.LatencyMS["retention_accept_p99_during_archive"] = percentile(during, .5), percentile(during, .99)
	rep.LatencyMS["retention_accept_p50_outside_archive"], rep.LatencyMS["retention_accept_p99_outside_archive"] = percentile(outside, .5), percentile(outside, .99)
	if len(during) > 0 && len(outside) > 0 {
		rep.Ratios["retention_accept_p99_during_vs_outside"] = percentile(during, .99) / percentile(outside, .99)
	}
}

// hotBytes is what a sample's schema keeps besides the outbox: the hot store proper.
func hotBytes(s RetentionSample) int64 { return s.SchemaBytes - s.OutboxBytes }

// retentionPrint writes the phase's lines of the text report.
func retentionPrint(res *RetentionResult, rep *Report, out io.Writer) {
	for i, s := range res.Samples {
		benchLog(out, "retention period %2d (%5.1f s): schema %6.1f MB (outbox %5.1f MB, partitions ahead %4.1f MB), %6d deliveries hot (%d events, %d status rows), archive %d segments, %d deliveries, %.1f MB in %d files",
			i+1, s.AtSeconds, float64(s.SchemaBytes)/1e6, float64(s.OutboxBytes)/1e6, float64(s.AheadBytes)/1e6, s.HotDeliveries, s.HotEvents, s.StatusRows, s.Segments, s.ArchivedDeliveries, float64(s.ArchiveBytes)/1e6, s.ArchiveFiles)
	}
	r, b, l := rep.Ratios, rep.BytesPerDelivery, rep.LatencyMS
	within := func(v float64) string {
		if v > 0 && v <= retentionSizeTarget {
			return "within ±10 %"
		}
		return "NOT within ±10 %"
	}
	benchLog(out, "retention: size after the first %d periods max/min %.3f (%s), without the outbox %.3f (%s)", retentionSteadyAfter,
		r["retention_size_max_over_min"], within(r["retention_size_max_over_min"]), r["retention_size_max_over_min_without_outbox"], within(r["retention_size_max_over_min_without_outbox"]))
	benchLog(out, "retention: bytes per hot delivery %.0f (target <= %d), %.0f with the outbox, %.0f without the empty partitions ahead; archive bytes per delivery %.0f",
		b["retention_hot"], retentionHotTarget, b["retention_hot_with_outbox"], b["retention_hot_without_partitions_ahead"], b["retention_archive"])
	benchLog(out, "retention: accept p99 while a partition leaves %.2f ms (%d s), outside %.2f ms, %.2fx (<= %.2f); p50 %.2f / %.2f ms; p99 in the seconds of a partition boundary when none leaves %.2f ms; %d s of the phase's own samples left out",
		l["retention_accept_p99_during_archive"], rep.Counts["retention_seconds_archiving"], l["retention_accept_p99_outside_archive"],
		r["retention_accept_p99_during_vs_outside"], retentionAcceptTarget, l["retention_accept_p50_during_archive"], l["retention_accept_p50_outside_archive"],
		l["retention_accept_p99_at_boundaries_outside_archive"], rep.Counts["retention_seconds_sampling"])
	if len(res.Tables) > 0 {
		benchLog(out, "retention: bytes per hot delivery at the end, by table: %s", sizesLine(res.Tables))
		benchLog(out, "retention: events bytes per hot delivery, by part: %s", sizesLine(res.EventsParts))
		benchLog(out, "retention: partitioned tables' bytes per hot delivery, by relation: %s", sizesLine(res.Relations))
	}
}

// sizesLine lists sizes largest first.
func sizesLine(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return m[names[i]] > m[names[j]] })
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	return strings.Join(parts, ", ")
}

package projections_test

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// indexNames lists a table's index names.
func (b *bundle) indexNames(t *testing.T, table string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1`, table)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// TestRebuildUnderConcurrentWrites rebuilds every view while writers append and a projector
// keeps the live views, and a reader polls them: the reader never sees fewer rows than before
// the rebuild began, and the rebuilt views end equal to a fresh fold.
func TestRebuildUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rng := rand.New(rand.NewPCG(11, 12))
	b.seed(t, rng, 150, time.Now())
	b.catchUp(t)
	indexesBefore := b.indexNames(t, "status_view")
	rowsBefore := b.count(t, `SELECT count(*) FROM status_view`)
	countedBefore := b.count(t, `SELECT sum(deliveries) FROM counters_view`)

	// The live projector keeps running through the rebuild.
	runDone := make(chan error, 1)
	go func() { runDone <- b.runner(t, 5).Run(ctx) }()

	// Writers: new deliveries, one step per transaction.
	writing, stopWriting := context.WithCancel(ctx)
	var writers sync.WaitGroup
	var written atomic.Int64
	for w := range 3 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			for writing.Err() == nil {
				h := newHistory(t, rng, "acme", time.Now())
				h.run(rng)
				for _, step := range h.steps {
					if err := b.store.Append(ctx, step, nil); err != nil {
						t.Errorf("append: %v", err)
						return
					}
				}
				written.Add(1)
			}
		}()
	}

	// The reader: through the read API's snapshot and through plain statements.
	reader := b.views
	var reads atomic.Int64
	readErr := make(chan error, 1)
	stopReading := make(chan struct{})
	go func() {
		defer close(readErr)
		for {
			select {
			case <-stopReading:
				return
			default:
			}
			var n, counted int
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM status_view`).Scan(&n); err != nil {
				readErr <- err
				return
			}
			if err := b.pool.QueryRow(ctx, `SELECT coalesce(sum(deliveries), 0) FROM counters_view`).Scan(&counted); err != nil {
				readErr <- err
				return
			}
			page, err := reader.Deliveries(ctx, "acme", projections.Filter{Limit: 1})
			if err != nil {
				readErr <- err
				return
			}
			if n < rowsBefore || counted < countedBefore || len(page.Items) == 0 {
				readErr <- errors.New("a reader saw a partial view")
				return
			}
			reads.Add(1)
		}
	}()

	for _, p := range projections.All() {
		res, err := projections.Rebuild(ctx, b.views, b.store, p, projections.RebuildConfig{BatchSize: 40, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatalf("rebuild %s: %v", p.Name(), err)
		}
		if res.Resumed != 0 || res.Applied == 0 {
			t.Fatalf("rebuild %s: resumed %d, applied %d", p.Name(), res.Resumed, res.Applied)
		}
	}
	close(stopReading)
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}
	stopWriting()
	writers.Wait()
	if reads.Load() < 10 || written.Load() < 3 {
		t.Fatalf("only %d reads and %d deliveries written during the rebuild; the test did not overlap them", reads.Load(), written.Load())
	}
	waitFor(t, 20*time.Second, "live projector catches up", func() (bool, error) { return b.caughtUp(ctx) })
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	b.verifyAll(t)
	if n := b.count(t, `SELECT count(*) FROM status_view`); n != rowsBefore+int(written.Load()) {
		t.Fatalf("status view has %d rows, want %d", n, rowsBefore+int(written.Load()))
	}
	if got := b.indexNames(t, "status_view"); !equalStrings(got, indexesBefore) {
		t.Fatalf("indexes after the rebuild %v, before %v", got, indexesBefore)
	}
	if n := b.count(t, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE '%\_rebuild'`); n != 0 {
		t.Fatalf("%d shadow tables left", n)
	}
	if n := b.count(t, `SELECT count(*) FROM projection_checkpoints`); n != 3 {
		t.Fatalf("%d checkpoints, want the 3 live ones", n)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRebuildResumesAfterKill cancels a rebuild mid-way, checks that the live view is untouched
// and the shadow kept, then reruns it: the second run continues where the first stopped.
func TestRebuildResumesAfterKill(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.seed(t, rand.New(rand.NewPCG(14, 15)), 150, time.Now())
	b.catchUp(t)
	total := int64(b.totalEvents(t))
	p := projections.StatusProjection{}

	killed, kill := context.WithCancel(ctx)
	_, err := projections.Rebuild(killed, b.views, b.store, p, projections.RebuildConfig{BatchSize: 25,
		Progress: func(pr projections.RebuildProgress) {
			if pr.Applied >= total/3 {
				kill()
			}
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("killed rebuild returned %v, want context.Canceled", err)
	}
	var shadowEvents int64
	if err := b.pool.QueryRow(ctx, `SELECT events FROM projection_checkpoints WHERE name = 'status.rebuild'`).Scan(&shadowEvents); err != nil {
		t.Fatalf("shadow checkpoint after the kill: %v", err)
	}
	if shadowEvents < total/3 || shadowEvents >= total {
		t.Fatalf("shadow holds %d of %d events after the kill", shadowEvents, total)
	}
	if n := b.count(t, `SELECT count(*) FROM status_view_rebuild`); n == 0 {
		t.Fatal("the shadow table is empty after the kill")
	}
	b.verifyAll(t) // the live view is whole and untouched
	rebuilds, err := b.views.Rebuilds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rebuilds) != 1 || rebuilds[0].Name != "status.rebuild" || rebuilds[0].Events != shadowEvents || rebuilds[0].LagEvents != total-shadowEvents {
		t.Fatalf("rebuilds in progress: %+v", rebuilds)
	}

	var phases []string
	res, err := projections.Rebuild(ctx, b.views, b.store, p, projections.RebuildConfig{BatchSize: 25,
		Progress: func(pr projections.RebuildProgress) {
			if len(phases) == 0 || phases[len(phases)-1] != pr.Phase {
				phases = append(phases, pr.Phase)
			}
			if pr.Resumed != shadowEvents {
				t.Errorf("progress says resumed from %d events, the shadow held %d", pr.Resumed, shadowEvents)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != shadowEvents || res.Resumed+res.Applied != total {
		t.Fatalf("rerun resumed from %d and applied %d; the log has %d events", res.Resumed, res.Applied, total)
	}
	if want := []string{projections.PhaseBuilding, projections.PhaseSwitching, projections.PhaseDone}; !equalStrings(phases, want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
	b.verifyAll(t)
	if n := b.count(t, `SELECT count(*) FROM projection_checkpoints WHERE name = 'status.rebuild'`); n != 0 {
		t.Fatal("the shadow checkpoint survived the switch")
	}
	var events int64
	if err := b.pool.QueryRow(ctx, `SELECT events FROM projection_checkpoints WHERE name = 'status'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != total {
		t.Fatalf("live checkpoint counts %d events after the switch, want %d", events, total)
	}

	// --restart throws a shadow away instead of resuming it.
	kill2Ctx, kill2 := context.WithCancel(ctx)
	_, _ = projections.Rebuild(kill2Ctx, b.views, b.store, p, projections.RebuildConfig{BatchSize: 25,
		Progress: func(pr projections.RebuildProgress) {
			if pr.Applied > 0 {
				kill2()
			}
		}})
	res, err = projections.Rebuild(ctx, b.views, b.store, p, projections.RebuildConfig{BatchSize: 25, Restart: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 0 || res.Applied != total {
		t.Fatalf("restart resumed from %d and applied %d, want 0 and %d", res.Resumed, res.Applied, total)
	}
	b.verifyAll(t)
}

// TestRebuildFillsTheNewColumn is the schema change of migration 0004 end to end: a view built
// before the column existed has no first_attempt_at; verify says so; a rebuild fills it.
func TestRebuildFillsTheNewColumn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hs := b.seed(t, rand.New(rand.NewPCG(16, 17)), 60, time.Now())
	b.catchUp(t)
	// Back to the schema before 0004, then forward again: the column comes back empty, as it
	// was when 0004 first ran on a populated view.
	if _, err := postgres.Migrate(ctx, b.pool, 3, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, b.pool, -1, nil); err != nil {
		t.Fatal(err)
	}
	attempted := 0
	for _, h := range hs {
		if firstAttemptAt(h.events) != nil {
			attempted++
		}
	}
	if attempted == 0 {
		t.Fatal("no delivery has an attempt; the column is not exercised")
	}
	res, err := projections.Verify(ctx, b.views, projections.StatusProjection{})
	if err != nil {
		t.Fatal(err)
	}
	// 0009's columns came back empty too: one difference for each value a fold gives them.
	waits := 0
	for _, h := range hs {
		row, err := projections.FoldStatus(h.events)
		if err != nil {
			t.Fatal(err)
		}
		if row.CheckAt != nil {
			waits++
		}
		if row.GiveUpAt != nil {
			waits++
		}
	}
	if res.Total != attempted+waits {
		t.Fatalf("verify found %d differences, want one per attempted delivery (%d) and one per receipt wait value (%d)",
			res.Total, attempted, waits)
	}
	for _, d := range res.Differences {
		if (d.Column != "first_attempt_at" && d.Column != "check_at" && d.Column != "give_up_at") || d.Live != "NULL" {
			t.Fatalf("difference %v, want first_attempt_at, check_at or give_up_at live NULL", d)
		}
	}
	var version int
	if err := b.pool.QueryRow(ctx, `SELECT version FROM projection_checkpoints WHERE name = 'status'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != 1 {
		t.Fatalf("view version %d after the column came back empty, want 1", version)
	}

	if _, err := projections.Rebuild(ctx, b.views, b.store, projections.StatusProjection{}, projections.RebuildConfig{}); err != nil {
		t.Fatal(err)
	}
	b.verifyAll(t)
	if n := b.count(t, `SELECT count(*) FROM status_view WHERE first_attempt_at IS NOT NULL`); n != attempted {
		t.Fatalf("%d rows have first_attempt_at after the rebuild, want %d", n, attempted)
	}
	if err := b.pool.QueryRow(ctx, `SELECT version FROM projection_checkpoints WHERE name = 'status'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if want := (projections.StatusProjection{}).Version(); version != want {
		t.Fatalf("view version %d after the rebuild, want %d", version, want)
	}
	for _, h := range hs {
		var first *time.Time
		if err := b.pool.QueryRow(ctx, `SELECT first_attempt_at FROM status_view WHERE id = $1`, h.id).Scan(&first); err != nil {
			t.Fatal(err)
		}
		want := firstAttemptAt(h.events)
		if (first == nil) != (want == nil) || first != nil && !first.Equal(*want) {
			t.Fatalf("delivery %s: first_attempt_at %v, want %v", h.id, first, want)
		}
	}
}

// firstAttemptAt is when attempt 1 started, read straight from the history.
func firstAttemptAt(events []domain.Event) *time.Time {
	for _, e := range events {
		if e.Type == domain.EventAttemptStarted {
			at := e.RecordedAt
			return &at
		}
	}
	return nil
}

func TestRebuildRefusesASecondRebuildOfTheSameView(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.seed(t, rand.New(rand.NewPCG(18, 19)), 30, time.Now())
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := projections.Rebuild(ctx, b.views, b.store, projections.DLQProjection{}, projections.RebuildConfig{BatchSize: 10,
			Progress: func(projections.RebuildProgress) {
				once.Do(func() { close(started); <-release })
			}})
		done <- err
	}()
	<-started
	_, err := projections.Rebuild(ctx, b.views, b.store, projections.DLQProjection{}, projections.RebuildConfig{})
	close(release)
	if !errors.Is(err, projections.ErrRebuildRunning) {
		t.Fatalf("second rebuild: %v, want ErrRebuildRunning", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Another view may be rebuilt meanwhile.
	if _, err := projections.Rebuild(ctx, b.views, b.store, projections.CountersProjection{}, projections.RebuildConfig{}); err != nil {
		t.Fatal(err)
	}
	b.verifyAll(t)
}

// TestVerifyReportsEveryKindOfDifference tampers with each view and checks that verify names
// the row and column.
func TestVerifyReportsEveryKindOfDifference(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	hs := b.seed(t, rand.New(rand.NewPCG(20, 21)), 40, time.Now())
	b.catchUp(t)
	b.verifyAll(t)

	victim, gone := hs[0].id, hs[1].id
	for _, q := range []string{
		`UPDATE status_view SET state = 'delivered', attempts = attempts + 7 WHERE id = '` + victim + `'`,
		`DELETE FROM status_view WHERE id = '` + gone + `'`,
		`UPDATE counters_view SET deliveries = deliveries + 1 WHERE (tenant, channel, state) = (SELECT tenant, channel, state FROM counters_view LIMIT 1)`,
		`DELETE FROM dlq_view WHERE id = (SELECT id FROM dlq_view LIMIT 1)`,
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	status, err := projections.Verify(ctx, b.views, projections.StatusProjection{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, d := range status.Differences {
		got[d.Key+"/"+d.Column] = true
	}
	wantState := hs[0].d.State() != domain.StateDelivered
	if got[victim+"/attempts"] != true || got[victim+"/state"] != wantState || got[gone+"/"] != true || status.Total != len(got) {
		t.Fatalf("status differences %v", status.Differences)
	}
	for _, p := range []projections.Projection{projections.DLQProjection{}, projections.CountersProjection{}} {
		res, err := projections.Verify(ctx, b.views, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Total != 1 {
			t.Fatalf("%s: %d differences %v, want 1", p.Name(), res.Total, res.Differences)
		}
	}
}

// TestRebuildSwitchRetriesWhenItCannotLock holds a reader's lock on the live table through the
// first switch: the switch times out, rolls back (including the events it had applied to the
// shadow), catches up again and switches once the reader is gone.
func TestRebuildSwitchRetriesWhenItCannotLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(22, 23))
	b.seed(t, rng, 40, time.Now())
	b.catchUp(t)

	var switches int
	var readerTx pgx.Tx
	res, err := projections.Rebuild(ctx, b.views, b.store, projections.StatusProjection{}, projections.RebuildConfig{
		BatchSize: 10, SwitchLockTimeout: 200 * time.Millisecond,
		Progress: func(pr projections.RebuildProgress) {
			if pr.Phase != projections.PhaseSwitching {
				return
			}
			switches++
			switch switches {
			case 1:
				// New events for the switch to apply inside its transaction, and a reader that
				// holds the live table.
				b.seed(t, rng, 5, time.Now())
				var err error
				if readerTx, err = b.pool.Begin(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := readerTx.Exec(ctx, `SELECT count(*) FROM status_view`); err != nil {
					t.Fatal(err)
				}
			case 2:
				if err := readerTx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if switches != 2 {
		t.Fatalf("%d switch attempts, want 2", switches)
	}
	if res.Applied != int64(b.totalEvents(t)) {
		t.Fatalf("applied %d events, the log has %d", res.Applied, b.totalEvents(t))
	}
	b.catchUp(t)
	b.verifyAll(t)
}

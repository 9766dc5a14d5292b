package projections_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/metrics"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

func TestProjectorBuildsEveryView(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rng := rand.New(rand.NewPCG(1, 2))
	hs := b.seed(t, rng, 120, time.Now())
	b.catchUp(t)
	b.verifyAll(t)

	if n := b.count(t, `SELECT count(*) FROM status_view`); n != len(hs) {
		t.Fatalf("status view has %d rows, want %d", n, len(hs))
	}
	inDLQ := 0
	for _, h := range hs {
		if s := h.d.State(); s == domain.StateDead || s == domain.StateUnknown {
			inDLQ++
		}
		var state string
		var version int
		if err := b.pool.QueryRow(context.Background(), `SELECT state, version FROM status_view WHERE id = $1`, h.id).Scan(&state, &version); err != nil {
			t.Fatal(err)
		}
		if state != string(h.d.State()) || version != h.d.Version() {
			t.Fatalf("delivery %s: view says %s v%d, the aggregate %s v%d", h.id, state, version, h.d.State(), h.d.Version())
		}
	}
	if inDLQ == 0 {
		t.Fatal("the seed produced no dead or unknown delivery; the DLQ is not exercised")
	}
	if n := b.count(t, `SELECT count(*) FROM dlq_view`); n != inDLQ {
		t.Fatalf("dlq view has %d rows, want %d", n, inDLQ)
	}
	if n := b.count(t, `SELECT sum(deliveries) FROM counters_view`); n != len(hs) {
		t.Fatalf("counters sum to %d deliveries, want %d", n, len(hs))
	}
	var events int
	if err := b.pool.QueryRow(context.Background(), `SELECT events FROM projection_checkpoints WHERE name = 'status'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != b.totalEvents(t) {
		t.Fatalf("checkpoint counts %d events, the log has %d", events, b.totalEvents(t))
	}
}

// TestProjectorDoesNotSkipLateCommit: transaction A writes first but commits after B. A
// projector that passed B while A was open would never see A.
func TestProjectorDoesNotSkipLateCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	early, late := newHistory(t, rng, "acme", time.Now()), newHistory(t, rng, "acme", time.Now())

	txA, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx) //nolint:errcheck
	e := early.events[0]
	if _, err := txA.Exec(ctx, `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
		VALUES ($1, $2, 1, $3, $4, $5, $6)`, e.DeliveryID, e.Tenant, string(e.Type), e.Key, string(e.Data), e.RecordedAt); err != nil {
		t.Fatal(err)
	}
	b.appendSteps(t, late.steps)
	if err := b.runner(t, 7).CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM status_view`); n != 0 {
		t.Fatalf("the projector applied %d rows past an open earlier transaction", n)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.catchUp(t)
	if n := b.count(t, `SELECT count(*) FROM status_view WHERE id IN ($1, $2)`, early.id, late.id); n != 2 {
		t.Fatalf("%d of the 2 deliveries are in the view after both committed", n)
	}
	b.verifyAll(t)
}

// TestProjectorUnderConcurrentLateCommits runs a projector while writers hold their
// transactions open for random times, so commits land out of position order all the time.
func TestProjectorUnderConcurrentLateCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- b.runner(t, 5).Run(ctx) }()

	const writers, perWriter = 6, 15
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for range perWriter {
				h := newHistory(t, rng, "acme", time.Now())
				h.run(rng)
				err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					for _, e := range h.events {
						if _, err := tx.Exec(ctx, `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
							VALUES ($1, $2, $3, $4, $5, $6, $7)`, e.DeliveryID, e.Tenant, e.Version, string(e.Type), e.Key, string(e.Data), e.RecordedAt); err != nil {
							return err
						}
						// Hold the transaction open (its position is taken) while others commit.
						if _, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, float64(rng.IntN(4))/1000); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "projector catches up", func() (bool, error) { return b.caughtUp(ctx) })
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM status_view`); n != writers*perWriter {
		t.Fatalf("status view has %d rows, want %d", n, writers*perWriter)
	}
	b.verifyAll(t)
}

// failing applies the batch through the real projection, then fails on its nth call: the rows
// are written when the failure comes, so only a rollback that takes rows and checkpoint
// together leaves the view consistent.
type failing struct {
	projections.Projection
	failOn int
	calls  atomic.Int32
	// applied counts the events of the calls that succeeded.
	applied atomic.Int64
}

var errInjected = errors.New("injected failure after the rows were written")

func (f *failing) Apply(ctx context.Context, tx projections.Tx, table string, batch []projections.LoggedEvent) error {
	if err := f.Projection.Apply(ctx, tx, table, batch); err != nil {
		return err
	}
	if int(f.calls.Add(1)) == f.failOn {
		return errInjected
	}
	f.applied.Add(int64(len(batch)))
	return nil
}

func TestFailedBatchRollsBackRowsAndCheckpointTogether(t *testing.T) {
	t.Parallel()
	for _, p := range projections.All() {
		t.Run(p.Name(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			b.seed(t, rand.New(rand.NewPCG(5, 6)), 40, time.Now())
			const batch = 9
			f := &failing{Projection: p, failOn: 3}
			r := b.runner(t, batch, f)
			waitFor(t, 20*time.Second, "the injected failure", func() (bool, error) {
				err := r.CatchUp(ctx)
				if errors.Is(err, errInjected) {
					return true, nil
				}
				return false, err
			})
			var events int
			if err := b.pool.QueryRow(ctx, `SELECT events FROM projection_checkpoints WHERE name = $1`, p.Name()).Scan(&events); err != nil {
				t.Fatal(err)
			}
			// The two good batches are full unless the log's visible horizon (the oldest
			// transaction running anywhere on the server, other tests' included) cut one short:
			// the checkpoint is what they applied, never a row of the failed one.
			if applied := f.applied.Load(); events != int(applied) || applied == 0 || applied > 2*batch {
				t.Fatalf("checkpoint at %d events after two good batches of %d events and a failed one", events, applied)
			}
			// The view holds exactly the first two batches: verify compares it with a fold of
			// the log up to the checkpoint, so a row of the failed batch would show.
			res, err := projections.Verify(ctx, b.views, p)
			if err != nil {
				t.Fatal(err)
			}
			if res.Total != 0 {
				t.Fatalf("after the failed batch: %d differences, first %v", res.Total, res.Differences[0])
			}
			// A restarted projector applies the failed batch once and ends equal to a fresh fold.
			r = b.runner(t, batch, p)
			waitFor(t, 20*time.Second, "catch up after the failure", func() (bool, error) {
				if err := r.CatchUp(ctx); err != nil {
					return false, err
				}
				return b.caughtUp(ctx, p.Name())
			})
			res, err = projections.Verify(ctx, b.views, p)
			if err != nil {
				t.Fatal(err)
			}
			if res.Total != 0 {
				t.Fatalf("after the restart: %d differences, first %v", res.Total, res.Differences[0])
			}
			if res.Position.Position == 0 {
				t.Fatal("verify compared at position zero")
			}
		})
	}
}

// TestProjectorKilledAtRandomMomentsNeverDoubleApplies stops a running projector at random
// moments (mid-batch or between batches) and starts another, until the log is applied.
func TestProjectorKilledAtRandomMomentsNeverDoubleApplies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rng := rand.New(rand.NewPCG(7, 8))
	b.seed(t, rng, 80, time.Now())
	for kills := 0; ; kills++ {
		ok, err := b.caughtUp(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if kills < 3 {
				t.Fatalf("caught up after %d kills; the test did not kill mid-way", kills)
			}
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+rng.IntN(60))*time.Millisecond)
		if err := b.runner(t, 6).Run(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	b.verifyAll(t)
}

func TestProjectorReportsLag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.seed(t, rand.New(rand.NewPCG(9, 10)), 20, time.Now())
	total := b.totalEvents(t)

	positions, err := b.views.Positions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range positions {
		if v.LagEvents != int64(total) || v.LagSeconds <= 0 {
			t.Fatalf("%s before projecting: lag %d events, %.3fs; want %d events and a positive age", v.Name, v.LagEvents, v.LagSeconds, total)
		}
	}

	m := metrics.New()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := projections.NewRunner(b.views, b.store, projections.All(), projections.RunnerConfig{
		BatchSize: 10, PollInterval: 10 * time.Millisecond, LagInterval: 10 * time.Millisecond, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	waitFor(t, 10*time.Second, "lag gauges reach zero", func() (bool, error) {
		body := scrape()
		for _, name := range []string{"status", "dlq", "counters"} {
			if !strings.Contains(body, `ledger_projection_lag_events{projection="`+name+`"} 0`) ||
				!strings.Contains(body, `ledger_projection_lag_seconds{projection="`+name+`"} 0`) {
				return false, nil
			}
		}
		return true, nil
	})
	body := scrape()
	if want := `ledger_projection_applied_events_total{projection="status"} ` + strconv.Itoa(total); !strings.Contains(body, want) {
		t.Fatalf("metrics lack %q", want)
	}
	if !strings.Contains(body, `ledger_view_deliveries{`) {
		t.Fatal("metrics lack ledger_view_deliveries")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// batchCounter counts the batches each projection applied.
type batchCounter struct {
	mu      sync.Mutex
	batches map[string]int
	events  map[string]int
}

func (c *batchCounter) ProjectionApplied(projection string, events int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches[projection]++
	c.events[projection] += events
}
func (c *batchCounter) ProjectionLag(string, int64, time.Duration) {}
func (c *batchCounter) ViewDeliveries(string, string, int64)       {}

func (c *batchCounter) counts(projection string) (batches, events int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batches[projection], c.events[projection]
}

// TestProjectorGathersWakeUps: woken by every append, a projection that has caught up reads the
// log at most once per Gather, so the events of appends close together are applied in one
// transaction, not one each; and every event is applied.
func TestProjectorGathersWakeUps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counter := &batchCounter{batches: map[string]int{}, events: map[string]int{}}
	wake := make(chan struct{}, 1)
	r, err := projections.NewRunner(b.views, b.store, projections.All(), projections.RunnerConfig{
		PollInterval: 10 * time.Millisecond, Gather: 400 * time.Millisecond, Metrics: counter,
		Wake: func(context.Context) <-chan struct{} { return wake },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	rng := rand.New(rand.NewPCG(11, 12))
	const appends = 20
	start := time.Now()
	for range appends { // one append and one wake-up every 40 ms, for 0.8 s
		h := newHistory(t, rng, "acme", time.Now())
		b.appendSteps(t, h.steps)
		select {
		case wake <- struct{}{}:
		default:
		}
		time.Sleep(40 * time.Millisecond)
	}
	waitFor(t, 10*time.Second, "every append applied", func() (bool, error) {
		_, n := counter.counts("status")
		return n == appends, nil
	})
	batches, _ := counter.counts("status")
	// 0.8 s of appends and the wait for the last: a read at most every 0.4 s, and a first one.
	if most := 2 + int(time.Since(start)/(400*time.Millisecond)); batches > most {
		t.Errorf("%d appends applied in %d batches, want at most %d: the projection read at every wake-up", appends, batches, most)
	}
	t.Logf("%d appends, %d batches", appends, batches)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

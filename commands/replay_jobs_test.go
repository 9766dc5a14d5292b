package commands_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/commands/commandstest"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// replays counts the replays in a delivery's history: the log, not what a caller was told,
// since a runner cut off mid-commit may not hear that its replay was recorded.
func replays(t *testing.T, store *postgres.EventStore, id string) int {
	t.Helper()
	events, err := store.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.Type == domain.EventReplayed {
			n++
		}
	}
	return n
}

// replayJobFixture is a schema with a store, and what builds replay job runners over it.
type replayJobFixture struct {
	schema *pgtest.Schema
	store  *postgres.EventStore
	replay *commands.ReplayHandler
}

func newReplayJobFixture(t *testing.T) *replayJobFixture {
	t.Helper()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	topics := amqp.Topology{Prefix: "t", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	replay := commands.NewReplayHandler(store, topics, commands.SystemClock{})
	replay.Requests = store
	return &replayJobFixture{schema: schema, store: store, replay: replay}
}

// catchUp brings the views (the DLQ view a job selects from) up to the log. The projector reads
// below the oldest transaction open in the database, which another test's may hold a moment: it
// catches up again until the DLQ view's checkpoint has passed the log's last event.
func (f *replayJobFixture) catchUp(t *testing.T) {
	t.Helper()
	runner, err := projections.NewRunner(postgres.NewViews(f.schema.Pool), f.store, projections.All(), projections.RunnerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := runner.CatchUp(context.Background()); err != nil {
			t.Fatal(err)
		}
		var behind bool
		err := f.schema.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM events e, projection_checkpoints c
			WHERE c.name = $1 AND (e.transaction_id, e.position) > (c.transaction_id, c.position))`, projections.NameDLQ).Scan(&behind)
		if err != nil {
			t.Fatal(err)
		}
		if !behind {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the DLQ view did not catch up with the log in 10s")
		}
	}
}

// jobs is a replay job runner over the fixture's store, with the default page and lease.
func (f *replayJobFixture) jobs() *commands.ReplayJobs {
	return commands.NewReplayJobs(f.store, f.replay, commands.SystemClock{}, nil)
}

// TestReplayJobSurvivesItsRunnerAndReplaysEachOnce: a job over 230 dead deliveries (and one
// unknown it leaves alone) is cut off mid-page; a second runner takes it over when the lease
// runs out and finishes it. Every dead delivery is replayed exactly once, the counts add up,
// and the same key answers the same job.
func TestReplayJobSurvivesItsRunnerAndReplaysEachOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newReplayJobFixture(t)
	store := f.store
	var dead []string
	for range 230 {
		dead = append(dead, commandstest.DeadDelivery(t, store, "acme", "https://example.com/h", false))
	}
	unknown := commandstest.DeadDelivery(t, store, "acme", "https://example.com/h", true)
	other := commandstest.DeadDelivery(t, store, "globex", "https://example.com/h", false)
	f.catchUp(t)

	first := f.jobs()
	first.Page, first.Lease = 40, 300*time.Millisecond
	ask := commands.ReplayJob{Tenant: "acme", RequestKey: "bulk-1", RequestHash: []byte("h1"), Reason: "receiver fixed"}
	job, created, err := first.Create(ctx, ask)
	if err != nil || !created || job.Matched != 230 {
		t.Fatalf("create: %+v created %v err %v, want 230 matched", job, created, err)
	}
	again, created, err := first.Create(ctx, ask)
	if err != nil || created || again.ID != job.ID {
		t.Fatalf("same key: %+v created %v err %v, want the same job", again, created, err)
	}
	ask.RequestHash = []byte("h2")
	if _, _, err := first.Create(ctx, ask); !errors.Is(err, commands.ErrRequestMismatch) {
		t.Fatalf("same key, other request: %v", err)
	}

	// The first runner is cut off after about two pages, in the middle of one.
	cut, cancel := context.WithCancel(ctx)
	go func() {
		for cut.Err() == nil {
			if j, err := first.Get(ctx, "acme", job.ID); err == nil && j.Replayed >= 60 {
				cancel()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	if worked, _ := first.RunOnce(cut); !worked {
		t.Fatal("the first runner found no job")
	}
	cancel()
	mid, _ := first.Get(ctx, "acme", job.ID)
	if mid.State != commands.ReplayJobRunning || mid.Replayed == 0 || mid.Replayed >= 230 {
		t.Fatalf("after the cut: %+v, want a running job part-way", mid)
	}
	// While the lease holds, no one else takes the job.
	second := f.jobs()
	if worked, err := second.RunOnce(ctx); worked || err != nil {
		t.Fatalf("a leased job was taken: %v %v", worked, err)
	}
	time.Sleep(350 * time.Millisecond)
	if worked, err := second.RunOnce(ctx); !worked || err != nil {
		t.Fatalf("second runner: %v %v", worked, err)
	}
	done, _ := second.Get(ctx, "acme", job.ID)
	if done.State != commands.ReplayJobDone || done.Replayed != 230 || done.Skipped != 0 || done.FinishedAt == nil {
		t.Fatalf("finished job %+v", done)
	}
	for _, id := range dead {
		if n := replays(t, store, id); n != 1 {
			t.Fatalf("delivery %s replayed %d times", id, n)
		}
	}
	if n := replays(t, store, unknown); n != 0 {
		t.Fatalf("the unknown delivery was replayed %d times without include_unknown", n)
	}
	if _, err := first.Get(ctx, "globex", job.ID); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("another tenant sees the job: %v", err)
	}
	events, _ := store.Load(ctx, other)
	if events[len(events)-1].Type != domain.EventDeadLettered {
		t.Fatalf("another tenant's delivery was touched")
	}

	// With include_unknown the unknown one is replayed, and says so; the replayed ones (now
	// queued) are not dead any more and are not selected.
	f.catchUp(t)
	uj, _, err := first.Create(ctx, commands.ReplayJob{Tenant: "acme", RequestKey: "bulk-2", RequestHash: []byte("h3"),
		Reason: "receiver dedupes", IncludeUnknown: true})
	if err != nil || uj.Matched != 1 {
		t.Fatalf("job with unknowns: %+v %v", uj, err)
	}
	if _, err := first.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	events, _ = store.Load(ctx, unknown)
	var r domain.Replayed
	_ = json.Unmarshal(events[len(events)-1].Data, &r)
	if events[len(events)-1].Type != domain.EventReplayed || !r.FromUnknown || r.Reason != fmt.Sprintf("receiver dedupes (replay job %s)", uj.ID) ||
		r.Actor != "tenant:acme" {
		t.Fatalf("unknown's last event %s %+v", events[len(events)-1].Type, r)
	}
}

// TestReplayJobPausesBetweenPages: with a pause, a job's pages are spread over time (its
// replays reach the workers a page at a time) and the job still ends done.
func TestReplayJobPausesBetweenPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newReplayJobFixture(t)
	for range 3 {
		commandstest.DeadDelivery(t, f.store, "acme", "https://example.com/h", false)
	}
	f.catchUp(t)
	jobs := f.jobs()
	const pause = 300 * time.Millisecond
	jobs.Page, jobs.Pause = 1, pause
	job, _, err := jobs.Create(ctx, commands.ReplayJob{Tenant: "acme", RequestKey: "slow-1", RequestHash: []byte("h"), Reason: "spread"})
	if err != nil || job.Matched != 3 {
		t.Fatalf("create: %+v %v", job, err)
	}
	start := time.Now()
	if worked, err := jobs.RunOnce(ctx); !worked || err != nil {
		t.Fatalf("run: worked %v err %v", worked, err)
	}
	// Three pages of one: at least the two pauses between them.
	if took := time.Since(start); took < 2*pause {
		t.Fatalf("a job of three pages of one took %s, want at least two pauses of %s", took, pause)
	}
	done, err := jobs.Get(ctx, "acme", job.ID)
	if err != nil || done.State != commands.ReplayJobDone || done.Replayed != 3 {
		t.Fatalf("job %+v %v, want done with 3 replayed", done, err)
	}
}

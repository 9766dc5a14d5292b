package commands_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/commands/commandstest"
)

// TestCancelledReplayJobStopsAtItsNextPage: a job of three pages of one, cancelled while its
// runner pauses after the first page, replays nothing more: the runner returns, the job is
// cancelled with one replayed and two left dead. Cancelling again answers the same; a done job
// cannot be cancelled (its state named); another tenant's job is not found.
func TestCancelledReplayJobStopsAtItsNextPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newReplayJobFixture(t)
	var dead []string
	for range 3 {
		dead = append(dead, commandstest.DeadDelivery(t, f.store, "acme", "https://example.com/h", false))
	}
	f.catchUp(t)
	jobs := f.jobs()
	jobs.Page, jobs.Pause = 1, time.Second
	job, _, err := jobs.Create(ctx, commands.ReplayJob{Tenant: "acme", RequestKey: "cancel-1", RequestHash: []byte("h"), Reason: "oops"})
	if err != nil || job.Matched != 3 {
		t.Fatalf("create: %+v %v", job, err)
	}
	ran := make(chan error, 1)
	go func() {
		_, err := jobs.RunOnce(ctx)
		ran <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := jobs.Get(ctx, "acme", job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Replayed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first page was not recorded: %+v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancelled, err := jobs.Cancel(ctx, "acme", job.ID)
	if err != nil || cancelled.State != commands.ReplayJobCancelled || cancelled.FinishedAt == nil {
		t.Fatalf("cancel: %+v %v, want cancelled with finished_at", cancelled, err)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("the cancelled job's runner: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the runner of a cancelled job did not stop")
	}
	after, err := jobs.Get(ctx, "acme", job.ID)
	if err != nil || after.State != commands.ReplayJobCancelled || after.Replayed != 1 || after.Skipped != 0 {
		t.Fatalf("after the runner stopped: %+v %v, want cancelled, 1 replayed", after, err)
	}
	total := 0
	for _, id := range dead {
		total += replays(t, f.store, id)
	}
	if total != 1 {
		t.Fatalf("%d replays in the log, want the first page's one", total)
	}
	if again, err := jobs.Cancel(ctx, "acme", job.ID); err != nil || again.State != commands.ReplayJobCancelled ||
		!again.FinishedAt.Equal(*cancelled.FinishedAt) {
		t.Fatalf("cancel again: %+v %v, want the same cancelled job", again, err)
	}
	if worked, err := jobs.RunOnce(ctx); worked || err != nil {
		t.Fatalf("a runner after the cancel: worked %v, %v; want nothing to claim", worked, err)
	}
	if _, err := jobs.Cancel(ctx, "globex", job.ID); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("another tenant's cancel: %v, want ErrNotFound", err)
	}

	empty, _, err := jobs.Create(ctx, commands.ReplayJob{Tenant: "acme", RequestKey: "cancel-2", RequestHash: []byte("h"),
		Reason: "nothing", Filters: commands.ReplayFilters{Recipient: "https://example.com/none"}})
	if err != nil {
		t.Fatal(err)
	}
	if worked, err := jobs.RunOnce(ctx); !worked || err != nil {
		t.Fatalf("run the empty job: %v %v", worked, err)
	}
	var finished *commands.ReplayJobFinishedError
	if _, err := jobs.Cancel(ctx, "acme", empty.ID); !errors.As(err, &finished) || finished.State != commands.ReplayJobDone {
		t.Fatalf("cancel a done job: %v, want ReplayJobFinishedError naming done", err)
	}
}

package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// manualClock is a clock a test sets.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// TestDuePassesShareTheRowsWithoutDoubleHandOut: scheduled deliveries are recorded with their
// due rows; two passes run at once when they fall due, and each delivery is queued once with one
// work message, the rows gone. None is handed out before its time.
func TestDuePassesShareTheRowsWithoutDoubleHandOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sendAt := now.Add(time.Hour)
	const n = 60
	ids := make([]string, n)
	for i := range ids {
		d, events := acceptedEvents(t)
		more, err := d.Schedule(sendAt, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.Append(ctx, append(events, more...), nil); err != nil {
			t.Fatal(err)
		}
		ids[i] = d.ID()
	}
	var rows int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM due_work WHERE kind = 'send' AND due_at = $1`, sendAt).Scan(&rows); err != nil || rows != n {
		t.Fatalf("due rows: %d (%v), want %d", rows, err, n)
	}

	topology := amqp.Topology{Prefix: "due-test", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	clock := &manualClock{now: now}
	pass := func() *commands.DuePass {
		return commands.NewDuePass(postgres.NewDueStore(b.schema.Pool), b.store, topology, clock, nil)
	}
	if got := pass().Round(ctx); got != 0 {
		t.Fatalf("a round before send_at handed out %d rows", got)
	}
	clock.set(sendAt)
	var wg sync.WaitGroup
	handed := make([]int, 2)
	for i := range handed {
		p := pass()
		wg.Go(func() {
			for range 20 {
				handed[i] += p.Round(ctx)
			}
		})
	}
	wg.Wait()
	if handed[0]+handed[1] != n {
		t.Fatalf("the passes handed out %d and %d rows, want %d in all", handed[0], handed[1], n)
	}
	for _, id := range ids {
		events, err := b.store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		d, err := domain.Rehydrate(events)
		if err != nil || d.State() != domain.StateQueued || d.Version() != 3 {
			t.Fatalf("delivery %s: %v, %s at version %d, want queued at 3", id, err, d.State(), d.Version())
		}
	}
	var messages int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_outbox_all`).Scan(&messages); err != nil || messages != n {
		t.Fatalf("outbox holds %d messages (%v), want one per delivery: %d", messages, err, n)
	}
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM due_work`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d due rows left (%v)", rows, err)
	}
}

// TestDueRowOfACancelledDeliveryIsRetired: a cancel that committed before the due time leaves
// a row that the pass retires without queueing anything.
func TestDueRowOfACancelledDeliveryIsRetired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	d, events := acceptedEvents(t)
	more, err := d.Schedule(now.Add(time.Minute), now)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := d.Cancel("no longer needed", "test", now)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Append(ctx, append(append(events, more...), cancelled...), nil); err != nil {
		t.Fatal(err)
	}
	topology := amqp.Topology{Prefix: "due-test", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	clock := &manualClock{now: now.Add(time.Hour)}
	if got := commands.NewDuePass(postgres.NewDueStore(b.schema.Pool), b.store, topology, clock, nil).Round(ctx); got != 1 {
		t.Fatalf("round handled %d rows, want the cancelled one's", got)
	}
	var messages, rows int
	_ = b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_outbox_all`).Scan(&messages)
	_ = b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM due_work`).Scan(&rows)
	if messages != 0 || rows != 0 {
		t.Fatalf("after the round: %d outbox messages, %d due rows; want none", messages, rows)
	}
}

// TestDueRowsOfRetriesThatCameBackAreRetiredUnseen: of two retrying deliveries past their due
// time and the grace, the one whose delayed copy came back (queued since) has its row retired
// by the bulk statement, never handed to a step; the one still retrying is handed out, once,
// and only after the grace.
func TestDueRowsOfRetriesThatCameBackAreRetiredUnseen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	policy := domain.RetryPolicy{Strategy: domain.Exponential{Base: time.Second, Cap: time.Second}, MaxAttempts: 3}
	retrying := func() *domain.Delivery {
		d, events := acceptedEvents(t)
		for _, step := range []func() ([]domain.Event, error){
			func() ([]domain.Event, error) { return d.Queue(now) },
			func() ([]domain.Event, error) { return d.StartAttempt("webhook", now) },
			func() ([]domain.Event, error) {
				return d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeTransient, Provider: "webhook"}, policy, now, 0.5)
			},
		} {
			more, err := step()
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, more...)
		}
		if err := b.store.Append(ctx, events, nil); err != nil {
			t.Fatal(err)
		}
		return d
	}
	came := retrying()
	queued, err := came.Queue(now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Append(ctx, queued, nil); err != nil {
		t.Fatal(err)
	}
	lost := retrying()

	due := postgres.NewDueStore(b.schema.Pool)
	var handed []string
	step := func(_ context.Context, row commands.DueRow) ([]domain.Event, []commands.OutboxMessage, error) {
		handed = append(handed, row.DeliveryID)
		return nil, nil, nil
	}
	at := *lost.NextAttemptAt() // both retries are due then (the same jitter)
	if n, err := due.TakeDue(ctx, at.Add(time.Hour), at.Add(-time.Millisecond), 10, step); err != nil || n != 0 || len(handed) != 0 {
		t.Fatalf("within the grace: %d rows (%v), handed %v", n, err, handed)
	}
	n, err := due.TakeDue(ctx, at.Add(time.Hour), at.Add(time.Minute), 10, step)
	if err != nil || n != 2 || len(handed) != 1 || handed[0] != lost.ID() {
		t.Fatalf("after the grace: %d rows (%v), handed %v; want 2, only %s handed", n, err, handed, lost.ID())
	}
	var rows int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM due_work`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d due rows left (%v)", rows, err)
	}
}

// TestDueBatchThatCannotCommitLeavesOnlyTheFailingRow: the rows due are handed out many to a
// transaction; when one row's decision cannot commit (here an event at a version the delivery
// already has, as when a cancel took it first), the batch is taken again a row at a time, so the
// others are handled and only that row stays, its failure reported.
func TestDueBatchThatCannotCommitLeavesOnlyTheFailingRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sendAt := now.Add(time.Minute)
	const n = 8
	opening := map[string][]domain.Event{}
	var bad string
	for i := range n {
		d, events := acceptedEvents(t)
		more, err := d.Schedule(sendAt.Add(time.Duration(i)*time.Millisecond), now)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.Append(ctx, append(events, more...), nil); err != nil {
			t.Fatal(err)
		}
		opening[d.ID()] = events
		if i == n/2 {
			bad = d.ID()
		}
	}
	step := func(_ context.Context, row commands.DueRow) ([]domain.Event, []commands.OutboxMessage, error) {
		if row.DeliveryID == bad {
			return opening[bad], nil, nil // version 1 again: cannot commit
		}
		return nil, nil, nil // retire the row
	}
	handled, err := postgres.NewDueStore(b.schema.Pool).TakeDue(ctx, sendAt.Add(time.Second), sendAt, 100, step)
	if handled != n-1 || err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("handled %d (%v), want the %d good rows and an error naming %s", handled, err, n-1, bad)
	}
	var left []string
	rows, err := b.schema.Pool.Query(ctx, `SELECT delivery_id::text FROM due_work`)
	if err != nil {
		t.Fatal(err)
	}
	if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(left) != 1 || left[0] != bad {
		t.Fatalf("due rows left %v (%v), want only %s", left, err, bad)
	}
}

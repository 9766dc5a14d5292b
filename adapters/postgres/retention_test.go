package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
	"github.com/deliveryledger/ledger/retention"
)

// retentionWidth is the width of the partitions of the retention tests: a delivery written now
// and one written a width later sit in different partitions.
const retentionWidth = 2 * time.Second

type retentionBundle struct {
	db     *pgtest.Schema
	store  *postgres.EventStore
	dir    *archive.Dir
	seen   *observed
	pass   *retention.Pass
	views  *postgres.Views
	runner *projections.Runner
}

// observed records what a pass reported.
type observed struct {
	mu                    sync.Mutex
	archived              int64
	held, overdue, failed int
}

func (o *observed) Archived(n int64) { o.mu.Lock(); o.archived += n; o.mu.Unlock() }
func (o *observed) Held(h, d int)    { o.mu.Lock(); o.held, o.overdue = h, d; o.mu.Unlock() }
func (o *observed) Failed()          { o.mu.Lock(); o.failed++; o.mu.Unlock() }

func setupRetention(t *testing.T) *retentionBundle {
	t.Helper()
	db := pgtest.NewWithPartitions(t, postgres.PartitionConfig{Width: retentionWidth, Ahead: 20 * time.Second})
	dir, err := archive.NewDir(filepath.Join(t.TempDir(), "archive"))
	if err != nil {
		t.Fatal(err)
	}
	b := &retentionBundle{db: db, store: postgres.NewEventStore(db.Pool), dir: dir, seen: &observed{}, views: postgres.NewViews(db.Pool)}
	b.runner, err = projections.NewRunner(b.views, b.store, projections.All(),
		projections.RunnerConfig{BatchSize: 50, PollInterval: 10 * time.Millisecond, LagInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.pass = &retention.Pass{Store: postgres.NewRetentionStore(db.Pool), Archive: archive.ForRetention{Store: dir}, Observer: b.seen,
		Config: retention.Config{Keep: 4 * time.Second, Partition: retentionWidth, ArchiveDir: dir.Root}}
	return b
}

// delivery records a webhook delivery of tenant accepted now, taken as far as end: "delivered",
// "dead" or "retrying".
func (b *retentionBundle) delivery(t *testing.T, tenant, end string) string {
	t.Helper()
	return b.deliveryAt(t, tenant, end, time.Now().UTC())
}

// deliveryAt is delivery accepted at now (its id's time: the partition it lands in).
func (b *retentionBundle) deliveryAt(t *testing.T, tenant, end string, now time.Time) string {
	t.Helper()
	id := commands.DeliveryID(commands.NotificationID(tenant, t.Name()+end+now.String()), commands.Recipient{Channel: "webhook", Recipient: "http://127.0.0.1:9/" + end}, now)
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: tenant, Channel: "webhook",
		Recipient: "http://127.0.0.1:9/" + end, Payload: json.RawMessage(`{"n":1}`), Priority: domain.PriorityNormal, MaxAttempts: 3}, now)
	if err != nil {
		t.Fatal(err)
	}
	add := func(more []domain.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, more...)
	}
	add(d.Queue(now))
	add(d.StartAttempt("webhook", now))
	switch end {
	case "delivered":
		add(d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeDelivered, StatusCode: 200}, domain.DefaultRetryPolicy(), now, 0))
	case "dead":
		add(d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomePermanent, StatusCode: 404, Err: "not found"}, domain.DefaultRetryPolicy(), now, 0))
	case "retrying":
		add(d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeTransient, StatusCode: 503, Err: "busy"}, domain.DefaultRetryPolicy(), now, 0))
	}
	if err := b.store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}
	return id
}

// partitionOf names the events partition that holds delivery id.
func (b *retentionBundle) partitionOf(t *testing.T, id string) string {
	t.Helper()
	var name string
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT tableoid::regclass::text FROM events WHERE delivery_id = $1 LIMIT 1`, id).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// round lets the projector apply the whole log, then runs a retention round.
func (b *retentionBundle) round(t *testing.T) (int, error) {
	t.Helper()
	catchUpViews(t, b.runner, b.views)
	return b.pass.Round(context.Background())
}

// exists reports whether a table of that name is in the test's schema.
func (b *retentionBundle) exists(t *testing.T, name string) bool {
	t.Helper()
	var ok bool
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// nextPartition waits until the clock is in a later partition than the one of t0.
func nextPartition(t0 time.Time) {
	for time.Now().Truncate(retentionWidth).Equal(t0.Truncate(retentionWidth)) {
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRetentionArchivesTerminalPartitionsAndHoldsOpenOnes: a partition whose deliveries are all
// terminal and older than keep is archived (the archive verifies, and holds each event), its
// table dropped, and a read of its delivery answers archived naming the segment; a partition
// with a delivery still retrying stays, counted as held and, past twice keep, overdue; a tenant
// with a longer keep holds its partition without being overdue.
func TestRetentionArchivesTerminalPartitionsAndHoldsOpenOnes(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	ctx := context.Background()
	// Past the first partitions, which end where each table's migration happened to end its
	// first: from here every table's partitions share their bounds.
	nextPartition(time.Now())
	nextPartition(time.Now())

	t0 := time.Now()
	gone := []string{b.delivery(t, "acme", "delivered"), b.delivery(t, "acme", "dead"), b.delivery(t, "globex", "delivered")}
	nextPartition(t0)
	t1 := time.Now()
	open := b.delivery(t, "acme", "retrying")
	nextPartition(t1)
	t2 := time.Now()
	longer := b.delivery(t, "initech", "delivered")
	nextPartition(t2)
	goneAt, openAt, longerAt := b.partitionOf(t, gone[0]), b.partitionOf(t, open), b.partitionOf(t, longer)
	// The views' and the payloads' partitions of the same range follow the history out.
	followers := map[string]bool{}
	for _, table := range []string{"status_view", "dlq_view", "notification_payloads", "accept_requests"} {
		name := table + strings.TrimPrefix(goneAt, "events")
		followers[name] = b.exists(t, name)
		if !followers[name] {
			t.Fatalf("no partition %s beside %s", name, goneAt)
		}
		if kept := table + strings.TrimPrefix(openAt, "events"); !b.exists(t, kept) {
			t.Fatalf("no partition %s beside %s", kept, openAt)
		}
	}
	if b.partitionOf(t, gone[2]) != goneAt || goneAt == openAt || openAt == longerAt {
		t.Fatalf("partitions %s %s %s", goneAt, openAt, longerAt)
	}

	b.pass.Config.Tenants = map[string]retention.TenantPolicy{"initech": {Keep: time.Hour}}
	// Past twice keep for all three partitions, not past initech's keep.
	b.pass.Now = func() time.Time { return time.Now().Add(20 * time.Second) }
	if _, err := b.round(t); err != nil {
		t.Fatalf("round: %v", err)
	}
	if ms, err := b.dir.Manifests(ctx); err != nil || len(ms) != 1 || ms[0].ID != goneAt {
		t.Fatalf("archived segments %+v (%v): want only %s (empty partitions leave without one)", ms, err, goneAt)
	}
	if b.seen.archived != 12 || b.seen.held != 2 || b.seen.overdue != 1 || b.seen.failed != 0 {
		t.Fatalf("observed %+v", b.seen)
	}
	if b.exists(t, goneAt) {
		t.Fatalf("partition %s still exists", goneAt)
	}
	for name := range followers {
		if b.exists(t, name) {
			t.Fatalf("follower partition %s still exists after %s left", name, goneAt)
		}
		if kept := strings.Replace(name, strings.TrimPrefix(goneAt, "events"), strings.TrimPrefix(openAt, "events"), 1); !b.exists(t, kept) {
			t.Fatalf("follower partition %s of a held range was dropped", kept)
		}
	}
	if _, err := b.dir.Verify(ctx, goneAt); err != nil {
		t.Fatalf("verify segment: %v", err)
	}
	for _, id := range gone {
		lines, ms, err := archive.History(ctx, b.dir, id)
		if err != nil || len(lines) != 4 || len(ms) != 1 || ms[0].ID != goneAt {
			t.Fatalf("history of %s in the archive: %d lines in %v (%v)", id, len(lines), ms, err)
		}
		tenant := "acme"
		if id == gone[2] {
			tenant = "globex"
		}
		_, err = b.store.LoadOf(ctx, tenant, id)
		var archived *commands.ArchivedError
		if !errors.As(err, &archived) || archived.Segment != goneAt || !errors.Is(err, commands.ErrNotFound) {
			t.Fatalf("load of archived %s: %v", id, err)
		}
	}
	// Another tenant's id in the range is not told it was archived.
	if _, err := b.store.LoadOf(ctx, "initech", gone[0]); errors.As(err, new(*commands.ArchivedError)) || !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("load by another tenant: %v", err)
	}
	for _, id := range []string{open, longer} {
		if _, err := b.store.Load(ctx, id); err != nil {
			t.Fatalf("held delivery %s: %v", id, err)
		}
	}
	var state string
	var events int64
	if err := b.db.Pool.QueryRow(ctx, `SELECT state, events FROM archive_segments WHERE id = $1`, goneAt).Scan(&state, &events); err != nil || state != "archived" || events != 12 {
		t.Fatalf("segment row: %s %d (%v)", state, events, err)
	}
	// A second round finds nothing more to move.
	if left, err := b.round(t); err != nil || left != 0 {
		t.Fatalf("second round: %d left, %v", left, err)
	}
	// Once the open delivery ends, its partition leaves too.
	d, err := b.store.Load(ctx, open)
	if err != nil {
		t.Fatal(err)
	}
	del, err := domain.Rehydrate(d)
	if err != nil {
		t.Fatal(err)
	}
	more, err := del.Queue(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	started, err := del.StartAttempt("webhook", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	done, err := del.RecordOutcome(2, domain.Outcome{Kind: domain.OutcomeDelivered, StatusCode: 200}, domain.DefaultRetryPolicy(), time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Append(ctx, append(append(more, started...), done...), nil); err != nil {
		t.Fatal(err)
	}
	if left, err := b.round(t); err != nil || left != 1 || b.seen.held != 1 || b.seen.overdue != 0 {
		t.Fatalf("round after the open delivery ended: %d left, %v, %+v", left, err, b.seen)
	}
	if _, err := b.store.LoadOf(ctx, "acme", open); !errors.As(err, new(*commands.ArchivedError)) {
		t.Fatalf("load of the delivery that ended: %v", err)
	}
}

// corrupting is an archive whose reads differ from what was written: a check against the rows
// must fail.
type corrupting struct{ *archive.Dir }

func (c corrupting) Lines(ctx context.Context, id string, fn func(archive.Line) error) error {
	return c.Dir.Lines(ctx, id, func(l archive.Line) error {
		l.Data = json.RawMessage(`{"tampered":true}`)
		return fn(l)
	})
}

// TestRetentionDropsNothingWhenTheArchiveDoesNotMatchTheRows: a segment that reads back other
// than the rows fails the round, counts a failure, and the partition is attached again with
// every event, its segment row gone.
func TestRetentionDropsNothingWhenTheArchiveDoesNotMatchTheRows(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	ctx := context.Background()
	t0 := time.Now()
	id := b.delivery(t, "acme", "delivered")
	part := b.partitionOf(t, id)
	nextPartition(t0)
	b.pass.Archive = archive.ForRetention{Store: corrupting{b.dir}}
	b.pass.Now = func() time.Time { return time.Now().Add(20 * time.Second) }
	_, err := b.round(t)
	if !errors.Is(err, retention.ErrCheckFailed) || b.seen.failed != 1 {
		t.Fatalf("round: %v, %+v", err, b.seen)
	}
	events, err := b.store.Load(ctx, id)
	if err != nil || len(events) != 4 || b.partitionOf(t, id) != part {
		t.Fatalf("after a failed check: %d events (%v)", len(events), err)
	}
	var n int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM archive_segments`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("segment rows: %d (%v)", n, err)
	}
	// The failed segment is set aside: nothing lists it, and its files stay for inspection.
	if ms, err := b.dir.Manifests(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("after a failed check the archive lists %v (%v), want nothing", ms, err)
	}
	if aside, _ := filepath.Glob(filepath.Join(b.dir.Root, part+".*.discarded")); len(aside) != 2 {
		t.Fatalf("the failed segment's files set aside: %v, want its manifest and data", aside)
	}
	// Back in the hot store the partition changes (a delivery of its time arrives: a late
	// receipt or a replay would do the same); the next round must archive what it holds now.
	late := b.deliveryAt(t, "acme", "delivered", t0)
	if b.partitionOf(t, late) != part {
		t.Fatalf("the late delivery is in %s, not %s", b.partitionOf(t, late), part)
	}
	b.pass.Archive = archive.ForRetention{Store: b.dir}
	if _, err := b.round(t); err != nil {
		t.Fatalf("round after the fix: %v", err)
	}
	for _, d := range []string{id, late} {
		if _, err := b.store.Load(ctx, d); !errors.As(err, new(*commands.ArchivedError)) {
			t.Fatalf("load of %s after the fix: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(b.dir.Root, part+".manifest.json")); err != nil {
		t.Fatal(err)
	}
	if ms, err := b.dir.Manifests(ctx); err != nil || len(ms) != 1 || ms[0].Deliveries != 2 {
		t.Fatalf("the archive after the fix: %+v (%v), want one segment of both deliveries", ms, err)
	}
}

// TestRetentionWaitsForTheProjections: a partition whose events a view has not applied yet stays
// (the log would never give them to it again), attached, and leaves once the views caught up.
func TestRetentionWaitsForTheProjections(t *testing.T) {
	t.Parallel()
	b := setupRetention(t)
	ctx := context.Background()
	t0 := time.Now()
	id := b.delivery(t, "acme", "delivered")
	part := b.partitionOf(t, id)
	nextPartition(t0)
	b.pass.Now = func() time.Time { return time.Now().Add(20 * time.Second) }
	if _, err := b.pass.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if ms, _ := b.dir.Manifests(ctx); len(ms) != 0 || !b.exists(t, part) || b.partitionOf(t, id) != part {
		t.Fatalf("a partition the views have not applied left: segments %v", ms)
	}
	if _, err := b.round(t); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Load(ctx, id); !errors.As(err, new(*commands.ArchivedError)) {
		t.Fatalf("after the views caught up: %v", err)
	}
}

package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
	"github.com/deliveryledger/ledger/retention"
)

// retainedViews is a test's schema cut in 2s partitions, with its views kept by a projector and
// a retention pass over it.
type retainedViews struct {
	db     *pgtest.Schema
	store  *postgres.EventStore
	views  *postgres.Views
	runner *projections.Runner
	pass   *retention.Pass
	// base is the start of the first partition the test writes in, ahead of now: every table's
	// partitions share their bounds there.
	base time.Time
}

func setupRetainedViews(t *testing.T) *retainedViews {
	t.Helper()
	db := pgtest.NewWithPartitions(t, postgres.PartitionConfig{Width: retentionWidth, Ahead: 30 * time.Second})
	dir, err := archive.NewDir(filepath.Join(t.TempDir(), "archive"))
	if err != nil {
		t.Fatal(err)
	}
	b := &retainedViews{db: db, store: postgres.NewEventStore(db.Pool), views: postgres.NewViews(db.Pool),
		base: time.Now().UTC().Truncate(retentionWidth).Add(3 * retentionWidth)}
	b.runner, err = projections.NewRunner(b.views, b.store, projections.All(),
		projections.RunnerConfig{BatchSize: 5, PollInterval: 10 * time.Millisecond, LagInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.pass = &retention.Pass{Store: postgres.NewRetentionStore(db.Pool), Archive: archive.ForRetention{Store: dir},
		Config: retention.Config{Keep: 4 * time.Second, Partition: retentionWidth, ArchiveDir: dir.Root},
		// Past the keep of every partition the test writes in.
		Now: func() time.Time { return time.Now().Add(time.Minute) }}
	return b
}

// partition returns the suffix of the names of the k-th partition from base (_p<from>_<to>).
func (b *retainedViews) partition(k int) string {
	from := b.base.Add(time.Duration(k) * retentionWidth).Unix()
	return "_p" + strconv.FormatInt(from, 10) + "_" + strconv.FormatInt(from+int64(retentionWidth/time.Second), 10)
}

// delivery appends a delivery of tenant accepted in the k-th partition from base, taken to end
// ("delivered", "dead" or "retrying") through moves the counters must not count as transitions:
// a deferral (queued to queued) and a failover (processing to processing).
func (b *retainedViews) delivery(t *testing.T, k int, tenant, channel, end string) *domain.Delivery {
	t.Helper()
	at := b.base.Add(time.Duration(k)*retentionWidth + 500*time.Millisecond + time.Duration(len(end))*time.Millisecond)
	recipient := "http://127.0.0.1:9/" + end
	id := commands.DeliveryID(commands.NotificationID(tenant, fmt.Sprint(t.Name(), k, end, channel)), commands.Recipient{Channel: channel, Recipient: recipient}, at)
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: tenant, Channel: channel, Recipient: recipient,
		Payload: json.RawMessage(`{"n":1}`), Priority: domain.PriorityNormal, MaxAttempts: 3}, at)
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
	add(d.Queue(at))
	add(d.Defer("rate limited", at.Add(time.Millisecond), at))
	add(d.StartAttempt("webhook", at))
	add(d.FailOver("webhook", "webhook-b", "connection refused", at))
	policy := domain.DefaultRetryPolicy()
	switch end {
	case "delivered":
		add(d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeDelivered, StatusCode: 200}, policy, at, 0))
	case "dead":
		add(d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomePermanent, StatusCode: 404, Err: "not found"}, policy, at, 0))
	case "retrying":
		add(d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeTransient, StatusCode: 503, Err: "busy"}, policy, at, 0))
	}
	if err := b.store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// finish delivers a retrying delivery.
func (b *retainedViews) finish(t *testing.T, d *domain.Delivery) {
	t.Helper()
	var events []domain.Event
	for _, step := range []func() ([]domain.Event, error){
		func() ([]domain.Event, error) { return d.Queue(time.Now()) },
		func() ([]domain.Event, error) { return d.StartAttempt("webhook", time.Now()) },
		func() ([]domain.Event, error) {
			return d.RecordOutcome(d.Attempt(), domain.Outcome{Kind: domain.OutcomeDelivered, StatusCode: 200}, domain.DefaultRetryPolicy(), time.Now(), 0)
		},
	} {
		more, err := step()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, more...)
	}
	if err := b.store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}
}

// catchUp runs the projector until every view has applied the whole log.
func (b *retainedViews) catchUp(t *testing.T) {
	t.Helper()
	catchUpViews(t, b.runner, b.views)
}

// catchUpViews runs the projector until every view has applied the whole log (one CatchUp stops
// at the oldest transaction running in the shared cluster).
func catchUpViews(t *testing.T, runner *projections.Runner, views *postgres.Views) {
	t.Helper()
	ctx := context.Background()
	poll(t, 20*time.Second, "catch up", func() (bool, error) {
		if err := runner.CatchUp(ctx); err != nil {
			return false, err
		}
		positions, err := views.Positions(ctx)
		if err != nil {
			return false, err
		}
		for _, v := range positions {
			if v.LagEvents != 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

// archive runs retention rounds until n segments are archived. A round that finds another
// test's pass holding the (cluster-wide) retention lock does nothing, so it is tried again.
func (b *retainedViews) archive(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	poll(t, 30*time.Second, fmt.Sprintf("%d segments archived", n), func() (bool, error) {
		if _, err := b.pass.Round(ctx); err != nil {
			return false, err
		}
		return b.count(t, `SELECT count(*) FROM archive_segments WHERE state = 'archived'`) == n, nil
	})
}

func (b *retainedViews) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (b *retainedViews) exists(t *testing.T, name string) bool {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relname = $1`, name) == 1
}

// counters reads the counters view, in key order.
func (b *retainedViews) counters(t *testing.T) []projections.CountRow {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT tenant, channel, state, deliveries, entered FROM counters_view
WHERE deliveries <> 0 OR entered <> 0 ORDER BY tenant, channel, state`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[projections.CountRow])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// verify fails the test unless each named view equals a fresh fold of the hot log.
func (b *retainedViews) verify(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		p, err := projections.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		res, err := projections.Verify(context.Background(), b.views, p)
		if err != nil {
			t.Fatalf("verify %s: %v", name, err)
		}
		if res.Total != 0 {
			t.Fatalf("verify %s: %d differences: %v", name, res.Total, res.Differences)
		}
	}
}

func (b *retainedViews) rebuild(t *testing.T, name string, cfg projections.RebuildConfig) {
	t.Helper()
	p, err := projections.ByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := projections.Rebuild(context.Background(), b.views, b.store, p, cfg); err != nil {
		t.Fatalf("rebuild %s: %v", name, err)
	}
}

// poll calls cond until it holds or the time is up.
func poll(t *testing.T, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProjectionsHoldOverTheHotWindowAfterRetention: once partitions left for the archive, one
// wholly before the oldest partition that stays (its view partitions leave with it) and one
// after a held partition (its view partitions stay a while, with their rows), verify of every
// view finds no difference; a rebuild of the counters gives the live rows back, the archived
// deliveries' counts included (and a deferral or a failover is no transition into a state); a
// rebuild of the status and DLQ views holds the hot window and verifies.
func TestProjectionsHoldOverTheHotWindowAfterRetention(t *testing.T) {
	t.Parallel()
	b := setupRetainedViews(t)
	b.delivery(t, 0, "acme", "webhook", "delivered")
	b.delivery(t, 0, "acme", "webhook", "dead")
	b.delivery(t, 0, "globex", "sms", "delivered")
	b.delivery(t, 1, "acme", "webhook", "retrying") // holds partition 1
	b.delivery(t, 2, "acme", "webhook", "delivered")
	b.delivery(t, 2, "acme", "sms", "dead")
	b.delivery(t, 3, "acme", "webhook", "retrying") // holds partition 3
	b.delivery(t, 3, "globex", "sms", "delivered")
	b.catchUp(t)
	b.verify(t, projections.NameStatus, projections.NameDLQ, projections.NameCounters)
	before := b.counters(t)

	b.archive(t, 2)
	for _, gone := range []string{"events" + b.partition(0), "events" + b.partition(2), "status_view" + b.partition(0), "dlq_view" + b.partition(0)} {
		if b.exists(t, gone) {
			t.Fatalf("%s is still there", gone)
		}
	}
	// Partition 2's view rows stay while partition 1, older, is held.
	if n := b.count(t, `SELECT count(*) FROM `+pgx.Identifier{"status_view" + b.partition(2)}.Sanitize()); n != 2 {
		t.Fatalf("status rows of partition 2 after it left: %d, want 2 (kept with their partition)", n)
	}
	if n := b.count(t, `SELECT count(*) FROM `+pgx.Identifier{"dlq_view" + b.partition(2)}.Sanitize()); n != 1 {
		t.Fatalf("dlq rows of partition 2 after it left: %d, want 1", n)
	}
	if got := b.counters(t); !slices.Equal(got, before) {
		t.Fatalf("counters after retention:\n%+v\nwant\n%+v", got, before)
	}
	b.verify(t, projections.NameStatus, projections.NameDLQ, projections.NameCounters)

	b.rebuild(t, projections.NameCounters, projections.RebuildConfig{BatchSize: 4})
	if got := b.counters(t); !slices.Equal(got, before) {
		t.Fatalf("counters rebuilt after retention:\n%+v\nwant the live rows\n%+v", got, before)
	}
	b.verify(t, projections.NameCounters)

	for _, name := range []string{projections.NameStatus, projections.NameDLQ} {
		b.rebuild(t, name, projections.RebuildConfig{BatchSize: 4})
	}
	// Built from the hot log: the partitions stay (the swap mirrors the live view's), the rows
	// of the deliveries that left do not.
	if n := b.count(t, `SELECT count(*) FROM `+pgx.Identifier{"status_view" + b.partition(2)}.Sanitize()); n != 0 {
		t.Fatalf("status rows of partition 2 after a rebuild: %d, want none", n)
	}
	if n := b.count(t, `SELECT count(*) FROM status_view`); n != 3 {
		t.Fatalf("status rows after a rebuild: %d, want the 3 hot deliveries", n)
	}
	b.verify(t, projections.NameStatus, projections.NameDLQ, projections.NameCounters)
}

// TestRebuildSwitchDropsShadowPartitionsRetentionDropped: view partitions that a retention
// round drops while a rebuild of the view runs are dropped from its shadow at the switch; the
// view ends with the live partitions, by their names, and verifies.
func TestRebuildSwitchDropsShadowPartitionsRetentionDropped(t *testing.T) {
	t.Parallel()
	b := setupRetainedViews(t)
	b.delivery(t, 0, "acme", "webhook", "dead")
	open := b.delivery(t, 0, "acme", "webhook", "retrying") // holds partition 0
	b.delivery(t, 1, "acme", "webhook", "dead")
	b.delivery(t, 2, "acme", "webhook", "retrying") // holds partition 2
	b.catchUp(t)
	b.archive(t, 1) // partition 1 leaves; its view partitions stay behind partition 0
	if !b.exists(t, "status_view"+b.partition(1)) {
		t.Fatalf("status_view%s left before the held partition 0", b.partition(1))
	}
	b.finish(t, open)
	b.catchUp(t)

	shadow := projections.ShadowTable("status_view")
	dropped := false
	b.rebuild(t, projections.NameStatus, projections.RebuildConfig{BatchSize: 2, Progress: func(pr projections.RebuildProgress) {
		if dropped || pr.Phase != projections.PhaseBuilding {
			return
		}
		dropped = true
		if !b.exists(t, shadow+b.partition(1)) {
			t.Errorf("the shadow has no partition %s", b.partition(1))
		}
		// Partition 0 leaves, and the views' partitions 0 and 1 with it.
		b.archive(t, 2)
		if b.exists(t, "status_view"+b.partition(1)) {
			t.Errorf("status_view%s is still there", b.partition(1))
		}
	}})
	if !dropped {
		t.Fatal("the rebuild reported no building phase")
	}
	for _, k := range []int{0, 1} {
		for _, table := range []string{"status_view", shadow} {
			if b.exists(t, table+b.partition(k)) {
				t.Fatalf("%s%s is still there after the switch", table, b.partition(k))
			}
		}
	}
	if !b.exists(t, "status_view"+b.partition(2)) {
		t.Fatalf("status_view%s is gone", b.partition(2))
	}
	if n := b.count(t, `SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relname LIKE 'status_view_rebuild%'`); n != 0 {
		t.Fatalf("%d tables named after the shadow are left", n)
	}
	b.verify(t, projections.NameStatus, projections.NameCounters)
}

// TestCountersRebuildAndRetentionTakeTurns: a partition does not leave while the counters are
// rebuilt (their shadow folds the log from its start and was seeded with the segments archived
// before it), it leaves after the switch, and the counters stay whole-life; a rebuild or a
// verify of the counters refuses, busy, while a segment is archiving.
func TestCountersRebuildAndRetentionTakeTurns(t *testing.T) {
	t.Parallel()
	b := setupRetainedViews(t)
	ctx := context.Background()
	b.delivery(t, 0, "acme", "webhook", "delivered")
	b.delivery(t, 0, "acme", "sms", "dead")
	b.delivery(t, 1, "globex", "webhook", "retrying") // holds partition 1
	b.catchUp(t)
	before := b.counters(t)

	tried := false
	b.rebuild(t, projections.NameCounters, projections.RebuildConfig{BatchSize: 2, Progress: func(pr projections.RebuildProgress) {
		if tried || pr.Phase != projections.PhaseBuilding {
			return
		}
		tried = true
		// Rounds until one ran here (another test's pass may hold the cluster-wide lock).
		poll(t, 30*time.Second, "a round held by the rebuild", func() (bool, error) {
			var held observed
			b.pass.Observer = &held
			defer func() { b.pass.Observer = nil }()
			if _, err := b.pass.Round(ctx); err != nil {
				return false, err
			}
			return held.held > 0, nil
		})
		if !b.exists(t, "events"+b.partition(0)) {
			t.Errorf("events%s left while the counters were rebuilt", b.partition(0))
		}
	}})
	if !tried {
		t.Fatal("the rebuild reported no building phase")
	}
	b.archive(t, 1)
	if b.exists(t, "events"+b.partition(0)) {
		t.Fatalf("events%s stays after the rebuild", b.partition(0))
	}
	if got := b.counters(t); !slices.Equal(got, before) {
		t.Fatalf("counters:\n%+v\nwant\n%+v", got, before)
	}
	b.verify(t, projections.NameCounters)

	// A segment archiving: its events are out of the log, its counts not recorded yet.
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO archive_segments (id, state, to_at, tenants) VALUES ('events_p0_1', 'archiving', '1970-01-01 00:00:01Z', '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := projections.Verify(ctx, b.views, projections.CountersProjection{}); !errors.Is(err, projections.ErrBusy) {
		t.Fatalf("verify while a segment is archiving: %v, want busy", err)
	}
	if _, err := projections.Rebuild(ctx, b.views, b.store, projections.CountersProjection{}, projections.RebuildConfig{Restart: true}); !errors.Is(err, projections.ErrBusy) {
		t.Fatalf("rebuild while a segment is archiving: %v, want busy", err)
	}
}

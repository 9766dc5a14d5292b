package projections_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/projections"
)

// partitionedViews are the views partitioned by delivery id (migration 0020).
var partitionedViews = []postgres.PartitionedTable{
	{Name: "status_view", Key: postgres.KeyDeliveryID},
	{Name: "dlq_view", Key: postgres.KeyDeliveryID},
}

// partitionedHistory are the tables a delivery's events are written to (migration 0019): a
// test that cuts the views' partitions at a time cuts theirs too, or the append finds none.
var partitionedHistory = []postgres.PartitionedTable{
	{Name: "events", Key: postgres.KeyDeliveryID},
	{Name: "notification_payloads", Key: postgres.KeyTime},
}

// secondPartitions cuts n one-second partitions of the views after the hour-wide ones pgtest
// made, and returns the first one's lower bound.
func (b *bundle) secondPartitions(t *testing.T, n int) time.Time {
	t.Helper()
	ctx := context.Background()
	have, err := postgres.Partitions(ctx, b.pool, "status_view")
	if err != nil || len(have) == 0 {
		t.Fatalf("partitions of status_view: %+v (%v)", have, err)
	}
	base := have[len(have)-1].To
	b.cutPartitions(t, base, n)
	return base
}

// cutPartitions runs EnsurePartitions over the views with one-second partitions up to n seconds
// past now.
func (b *bundle) cutPartitions(t *testing.T, now time.Time, n int) []postgres.Partition {
	t.Helper()
	cfg := postgres.PartitionConfig{Width: time.Second, Ahead: time.Duration(n) * time.Second}
	if _, err := postgres.EnsurePartitionsOf(context.Background(), b.pool, partitionedHistory, cfg, now); err != nil {
		t.Fatal(err)
	}
	created, err := postgres.EnsurePartitionsOf(context.Background(), b.pool, partitionedViews, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// checkRowsInTheirPartitions fails the test unless every row of table sits in the partition of
// its delivery id's time, and returns the rows per partition.
func (b *bundle) checkRowsInTheirPartitions(t *testing.T, table string) map[string]int {
	t.Helper()
	ctx := context.Background()
	parts, err := postgres.Partitions(ctx, b.pool, table)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(ctx, `SELECT id::text, tableoid::regclass::text FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	type placed struct{ ID, Partition string }
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[placed])
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, r := range all {
		at, ok := postgres.UUIDv7Time(r.ID)
		if !ok {
			t.Fatalf("%s row %s: not a UUIDv7", table, r.ID)
		}
		i := slices.IndexFunc(parts, func(p postgres.Partition) bool { return !at.Before(p.From) && at.Before(p.To) })
		if i < 0 || parts[i].Name != r.Partition {
			t.Fatalf("%s row %s of %s is in %s; partitions %+v", table, r.ID, at, r.Partition, parts)
		}
		per[r.Partition]++
	}
	return per
}

// TestViewsArePartitionedByAcceptTime: the projector writes each delivery's status and DLQ rows
// into the partition of its accept time, across partitions within one batch, and the views end
// equal to a fresh fold of the log.
func TestViewsArePartitionedByAcceptTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rng := rand.New(rand.NewPCG(40, 41))
	base := b.secondPartitions(t, 4)
	b.seed(t, rng, 10, time.Now())
	for k := range 4 {
		b.seed(t, rng, 15, base.Add(time.Duration(k)*time.Second+300*time.Millisecond))
	}
	b.catchUp(t)
	b.verifyAll(t)

	status := b.checkRowsInTheirPartitions(t, "status_view")
	if len(status) != 5 {
		t.Fatalf("status rows per partition: %v, want five partitions", status)
	}
	for k := range 4 {
		from := base.Add(time.Duration(k) * time.Second)
		name := "status_view_p" + strconv.FormatInt(from.Unix(), 10) + "_" + strconv.FormatInt(from.Unix()+1, 10)
		if status[name] != 15 {
			t.Fatalf("status rows per partition: %v, want 15 in %s", status, name)
		}
	}
	dlq := b.checkRowsInTheirPartitions(t, "dlq_view")
	if len(dlq) < 3 {
		t.Fatalf("dlq rows per partition: %v, want rows in several partitions", dlq)
	}
}

// partitionLayout is a table's partitions with their bounds as the catalog holds them, and the
// names of each one's indexes, one line each.
func (b *bundle) partitionLayout(t *testing.T, table string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT c.relname || ' ' || pg_get_expr(c.relpartbound, c.oid) || ' [' ||
	(SELECT string_agg(x.indexname, ', ' ORDER BY x.indexname) FROM pg_indexes x
	 WHERE x.schemaname = current_schema() AND x.tablename = c.relname) || ']'
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1) ORDER BY c.relname`, table)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// layoutLine is the start of partitionLayout's line of the partition [from, to) of table.
func layoutLine(table string, from, to time.Time) string {
	bound := "MINVALUE"
	name := table + "_p0_" + strconv.FormatInt(to.Unix(), 10)
	if !from.IsZero() {
		bound = "'" + postgres.UUIDv7Floor(from) + "'"
		name = table + "_p" + strconv.FormatInt(from.Unix(), 10) + "_" + strconv.FormatInt(to.Unix(), 10)
	}
	return name + " FOR VALUES FROM (" + bound + ") TO ('" + postgres.UUIDv7Floor(to) + "') ["
}

// TestRebuildOfAPartitionedView rebuilds the partitioned views, whose rows span one-second
// partitions, while the clock moves on: during the catch-up a round of EnsurePartitions cuts a
// partition and deliveries are accepted in it (the shadow must have it before the switch), and a
// partition is attached to the live view alone (the switch must add it to the shadow). After the
// switch the view has the live partitions' names, bounds and index names, every row in the
// partition of its time, no relation of the shadow left, and equals a fresh fold; EnsurePartitions
// continues from the last bound.
func TestRebuildOfAPartitionedView(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(42, 43))
	base := b.secondPartitions(t, 3)
	for k := range 3 {
		b.seed(t, rng, 10, base.Add(time.Duration(k)*time.Second+500*time.Millisecond))
	}
	b.catchUp(t)
	sec := func(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }

	for k, p := range []projections.Projection{projections.StatusProjection{}, projections.DLQProjection{}} {
		table, moved := p.Table(), 3+2*k // the clock moves to base+moved during this rebuild
		parentIndexes := b.indexNames(t, table)
		before := b.partitionLayout(t, table)
		added := false
		_, err := projections.Rebuild(ctx, b.views, b.store, p, projections.RebuildConfig{BatchSize: 5,
			Progress: func(pr projections.RebuildProgress) {
				if added || pr.Phase != projections.PhaseBuilding || pr.Applied == 0 {
					return
				}
				added = true
				if got := b.cutPartitions(t, sec(moved), 1); len(got) == 0 {
					t.Fatal("no partition cut during the rebuild")
				}
				b.seed(t, rng, 8, sec(moved).Add(200*time.Millisecond))
				name := table + "_p" + strconv.FormatInt(sec(moved+1).Unix(), 10) + "_" + strconv.FormatInt(sec(moved+2).Unix(), 10)
				for _, sql := range []string{
					`CREATE TABLE ` + name + ` (LIKE ` + table + ` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
					`ALTER TABLE ` + table + ` ATTACH PARTITION ` + name + ` FOR VALUES FROM ('` +
						postgres.UUIDv7Floor(sec(moved+1)) + `') TO ('` + postgres.UUIDv7Floor(sec(moved+2)) + `')`,
				} {
					if _, err := b.pool.Exec(ctx, sql); err != nil {
						t.Fatal(err)
					}
				}
			}})
		if err != nil {
			t.Fatalf("rebuild %s: %v", p.Name(), err)
		}
		if !added {
			t.Fatalf("rebuild %s: no progress report to move the clock in", p.Name())
		}
		if got := b.indexNames(t, table); !equalStrings(got, parentIndexes) {
			t.Fatalf("%s indexes after the rebuild: %v, want %v", table, got, parentIndexes)
		}
		after := b.partitionLayout(t, table)
		show := "after the rebuild:\n" + strings.Join(after, "\n") + "\nbefore:\n" + strings.Join(before, "\n")
		for _, line := range before {
			if !slices.Contains(after, line) {
				t.Fatalf("%s partition %q changed; %s", table, line, show)
			}
		}
		listed, err := postgres.Partitions(ctx, b.pool, table)
		if err != nil || len(listed) != len(after) {
			t.Fatalf("Partitions(%s) = %+v (%v); %s", table, listed, err, show)
		}
		for i, lp := range listed {
			if i > 0 && !lp.From.Equal(listed[i-1].To) {
				t.Fatalf("%s partitions not contiguous at %s; %s", table, lp.Name, show)
			}
			if !slices.ContainsFunc(after, func(s string) bool { return strings.HasPrefix(s, layoutLine(table, lp.From, lp.To)) }) {
				t.Fatalf("%s partition %s: name and bounds disagree; %s", table, lp.Name, show)
			}
		}
		if last := listed[len(listed)-1]; !last.To.Equal(sec(moved+2)) || !slices.ContainsFunc(after, func(s string) bool {
			return strings.HasPrefix(s, layoutLine(table, sec(moved), sec(moved+1)))
		}) {
			t.Fatalf("%s lacks the partitions added during the rebuild; %s", table, show)
		}
		if n := b.count(t, `SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relname LIKE '%rebuild%'`); n != 0 {
			t.Fatalf("%d relations of the shadow left after the switch", n)
		}
		b.checkRowsInTheirPartitions(t, table)
	}
	b.catchUp(t)
	if n := b.count(t, `SELECT count(*) FROM status_view WHERE id >= $1::uuid`, postgres.UUIDv7Floor(sec(3))); n != 16 {
		t.Fatalf("%d status rows of deliveries accepted during the rebuilds, want 16", n)
	}
	b.verifyAll(t)
	b.checkRowsInTheirPartitions(t, "status_view")
	b.checkRowsInTheirPartitions(t, "dlq_view")
	// Maintenance goes on from the bounds the names record: status_view ends at base+6s, dlq_view
	// at base+7s.
	if next := b.cutPartitions(t, sec(7), 1); len(next) != 3 {
		t.Fatalf("partitions cut after the rebuilds: %+v", next)
	}
}

// TestMigrationPartitionViewsKeepsRows migrates the partitioning of the views down and up again
// with rows in them, some of deliveries accepted seconds ahead of the database's clock: the rows,
// the index names and the projector's work survive both ways.
func TestMigrationPartitionViewsKeepsRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	all, err := postgres.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(m postgres.Migration) bool { return strings.Contains(m.Name, "partition_views") })
	if i < 0 {
		t.Fatal("no partition_views migration")
	}
	version := all[i].Version
	b.seed(t, rand.New(rand.NewPCG(44, 45)), 40, time.Now())
	// Accepted by a host whose clock runs ahead: the first partition must take them too.
	b.seed(t, rand.New(rand.NewPCG(48, 49)), 3, time.Now().Add(3*time.Second))
	b.catchUp(t)
	snapshot := func(table string) []string {
		rows, err := b.pool.Query(ctx, `SELECT v::text FROM `+table+` v ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	kind := func(table string) string {
		var k string
		if err := b.pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, table).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	tables := []string{"status_view", "dlq_view"}
	rows, indexes := map[string][]string{}, map[string][]string{}
	for _, table := range tables {
		rows[table], indexes[table] = snapshot(table), b.indexNames(t, table)
		if kind(table) != "p" || len(rows[table]) == 0 {
			t.Fatalf("%s: relkind %s, %d rows; want a partitioned table with rows", table, kind(table), len(rows[table]))
		}
	}
	check := func(when, wantKind string) {
		t.Helper()
		for _, table := range tables {
			if k := kind(table); k != wantKind {
				t.Fatalf("%s %s: relkind %s, want %s", table, when, k, wantKind)
			}
			if got := snapshot(table); !equalStrings(got, rows[table]) {
				t.Fatalf("%s %s: %d rows differ from the %d before", table, when, len(got), len(rows[table]))
			}
			if got := b.indexNames(t, table); !equalStrings(got, indexes[table]) {
				t.Fatalf("%s %s: indexes %v, want %v", table, when, got, indexes[table])
			}
		}
	}
	if _, err := postgres.Migrate(ctx, b.pool, version-1, nil); err != nil {
		t.Fatal(err)
	}
	check("migrated down", "r")
	if _, err := postgres.Migrate(ctx, b.pool, -1, nil); err != nil {
		t.Fatal(err)
	}
	check("migrated up again", "p")
	if _, err := postgres.EnsurePartitions(ctx, b.pool, postgres.PartitionConfig{Width: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	b.seed(t, rand.New(rand.NewPCG(46, 47)), 10, time.Now())
	b.catchUp(t)
	b.verifyAll(t)
	b.checkRowsInTheirPartitions(t, "status_view")

	// A row whose id does not carry its time (ids made before they were version 7) fits no
	// partition: the migration says so.
	if _, err := postgres.Migrate(ctx, b.pool, version-1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE status_view SET id = 'f0000000-0000-5000-8000-000000000000' WHERE id = (SELECT id FROM status_view ORDER BY id LIMIT 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, b.pool, -1, nil); err == nil || !strings.Contains(err.Error(), "not a time-ordered (version 7) UUID") {
		t.Fatalf("migrating a view with a version 5 id: %v", err)
	}
}

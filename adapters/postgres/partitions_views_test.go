package postgres_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/projections"
)

// TestStatusUpdateKeepsToTheBatchsPartitions: with the status view cut in 30 partitions, the
// projector's update of a batch of rows of one partition plans that partition only, not a join
// with every partition of the view (which grows with the view).
func TestStatusUpdateKeepsToTheBatchsPartitions(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	have, err := postgres.Partitions(ctx, db.Pool, "status_view")
	if err != nil || len(have) == 0 {
		t.Fatalf("partitions %+v (%v)", have, err)
	}
	base, minutes := have[len(have)-1].To, 30-len(have)
	if _, err := postgres.EnsurePartitionsOf(ctx, db.Pool, []postgres.PartitionedTable{{Name: "status_view", Key: postgres.KeyDeliveryID}},
		postgres.PartitionConfig{Width: time.Minute, Ahead: time.Duration(minutes) * time.Minute}, base); err != nil {
		t.Fatal(err)
	}
	if have, err = postgres.Partitions(ctx, db.Pool, "status_view"); err != nil || len(have) < 30 {
		t.Fatalf("%d partitions (%v), want 30", len(have), err)
	}
	// 50 rows in each of the minute-wide partitions.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO status_view (id, tenant, notification_id, channel, recipient, priority, state,
	version, attempts, max_attempts, provider, provider_operation_id, last_error_class, last_error, last_status_code,
	idempotency_key, accepted_at, updated_at)
SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 1, 3) || '-8' || substr(r, 4, 3) || '-' || substr(r, 7, 12))::uuid,
	'acme', 'n' || g, 'webhook', 'r', 'normal', 'queued', 2, 0, 3, '', '', '', '', 0, 'k' || g, to_timestamp(ms / 1000.0), to_timestamp(ms / 1000.0)
FROM (SELECT g, $1::bigint + g * 1200 AS ms, md5(g::text) AS r FROM generate_series(0, $2::int - 1) g) s,
	LATERAL (SELECT lpad(to_hex(ms), 12, '0') AS h) hh`, base.UnixMilli(), minutes*50); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE status_view`); err != nil {
		t.Fatal(err)
	}
	target := have[len(have)-3] // a minute-wide partition
	views := postgres.NewViews(db.Pool)
	var rows []projections.StatusRow
	err = views.InTx(ctx, projections.TxOptions{}, func(tx projections.Tx) error {
		var ids []string
		if err := db.Pool.QueryRow(ctx, `SELECT array_agg(id::text) FROM (SELECT id FROM `+target.Name+` LIMIT 20) x`).Scan(&ids); err != nil {
			return err
		}
		rows, err = tx.StatusRowsGet(ctx, "status_view", ids)
		return err
	})
	if err != nil || len(rows) != 20 {
		t.Fatalf("read %d rows (%v), want 20", len(rows), err)
	}
	expected := make([]int, len(rows))
	for i := range rows {
		expected[i] = rows[i].Version
		rows[i].Version++
		rows[i].State = "processing"
	}
	plan, err := postgres.ExplainStatusRowsUpdate(ctx, db.Pool, rows, expected)
	if err != nil {
		t.Fatal(err)
	}
	var touched []string
	for _, m := range regexp.MustCompile(`status_view_p\d+_\d+`).FindAllString(plan, -1) {
		if !slices.Contains(touched, m) {
			touched = append(touched, m)
		}
	}
	if len(touched) != 1 || touched[0] != target.Name {
		t.Fatalf("the update of 20 rows of %s plans partitions %v:\n%s", target.Name, touched, plan)
	}
	if !strings.Contains(plan, "rows=20 ") {
		t.Fatalf("the update did not meet its 20 rows:\n%s", plan)
	}
}

package postgres_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/projections"
)

// TestViewColumnsAreTheMigratedTables holds the one column list of each view, from which its
// SELECT, COPY, unnest and UPDATE derive, to the table the migrations build: a column added by a
// migration but not to the list (never written, so every rebuild leaves it empty), or to the list
// but not by a migration (every batch fails), fails here, as does a type that differs. The list
// is held to the row's db tags too, which name the columns in Verify's differences.
func TestViewColumnsAreTheMigratedTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rows := map[string]any{"status_view": projections.StatusRow{}, "dlq_view": projections.DLQRow{}}
	for table, list := range postgres.ViewColumns {
		if missing, extra := columnsDiffer(t, b.schema.Pool, table, list); len(missing)+len(extra) > 0 {
			t.Errorf("%s: the migrations have %v that the column list lacks, the list has %v that the table lacks", table, missing, extra)
		}
		var tags []string
		row := reflect.TypeOf(rows[table])
		for i := range row.NumField() {
			if tag := row.Field(i).Tag.Get("db"); tag != "" {
				tags = append(tags, tag)
			}
		}
		var names []string
		for _, c := range list {
			names = append(names, c[0])
		}
		if !slices.Equal(tags, names) {
			t.Errorf("%s: the column list %v is not the db tags of %s, %v", table, names, row.Name(), tags)
		}
	}

	// The comparison sees a column a migration adds and the list lacks.
	if _, err := b.schema.Pool.Exec(ctx, `ALTER TABLE status_view ADD COLUMN channel_region text`); err != nil {
		t.Fatal(err)
	}
	if missing, _ := columnsDiffer(t, b.schema.Pool, "status_view", postgres.ViewColumns["status_view"]); !slices.Equal(missing, []string{"channel_region text"}) {
		t.Fatalf("after a migration added a column: missing %v, want [channel_region text]", missing)
	}
}

// columnsDiffer compares a table's columns, as "name type", with a column list.
func columnsDiffer(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, table string, list [][2]string) (missing, extra []string) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT column_name || ' ' || data_type FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = $1 ORDER BY column_name`, table)
	if err != nil {
		t.Fatal(err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(have) == 0 {
		t.Fatalf("%s: no columns; is the schema migrated?", table)
	}
	var want []string
	for _, c := range list {
		want = append(want, c[0]+" "+c[1])
	}
	for _, h := range have {
		if !slices.Contains(want, h) {
			missing = append(missing, h)
		}
	}
	for _, w := range want {
		if !slices.Contains(have, w) {
			extra = append(extra, w)
		}
	}
	return missing, extra
}

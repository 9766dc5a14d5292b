package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/projections"
)

// ExplainStatusRowsUpdate is the plan of the projector's update of rows in the status view, run
// (EXPLAIN ANALYZE) in a transaction that is rolled back, for a test to read.
func ExplainStatusRowsUpdate(ctx context.Context, pool *pgxpool.Pool, rows []projections.StatusRow, expected []int) (string, error) {
	versions := make([]int32, len(expected))
	for i, v := range expected {
		versions[i] = int32(v)
	}
	var lines []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF) `+fmt.Sprintf(statusRowsUpdate, ident("status_view")),
			append(statusColumns.arrays(rows), versions)...)
		if err != nil {
			return err
		}
		if lines, err = pgx.CollectRows(res, pgx.RowTo[string]); err != nil {
			return err
		}
		return errRollback
	})
	if err != errRollback {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}

var errRollback = fmt.Errorf("roll back")

// ViewColumns are the views' column lists as (name, type) pairs in their order, for a test to
// hold them to the migrated tables and to the rows' db tags.
var ViewColumns = map[string][][2]string{
	"status_view": statusColumns.pairs(),
	"dlq_view":    dlqColumns.pairs(),
}

func (cs columns[R]) pairs() [][2]string {
	out := make([][2]string, len(cs))
	for i, c := range cs {
		out[i] = [2]string{c.name, c.sqlType}
	}
	return out
}

// AnalyzeStaleOf is AnalyzeStale over the given tables (name: the columns to sample).
var AnalyzeStaleOf = analyzeStale

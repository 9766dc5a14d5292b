package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/projections"
)

// The read API's side of Views: each answer is read in one snapshot together with the view's
// checkpoint, so the position it reports is exactly the one its rows reflect.

// tenantPendingGet reads a view's version and how many of a tenant's events lie past its
// checkpoint. The ORDER BY is the plan: without it the planner, who cannot know the checkpoint,
// reads the whole table sequentially for a view that is caught up (268 ms at 800,000 events,
// against 0.1 ms along the log order's key; docs/benchmarks.md, "Indexes on events").
const tenantPendingGet = `SELECT c.version, (SELECT count(*) FROM (SELECT 1 FROM events e
	WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position) AND e.tenant = $2
	ORDER BY e.transaction_id, e.position LIMIT $3) p)
FROM projection_checkpoints c WHERE c.name = $1`

// readView runs read in a read-only snapshot of a view (see Snapshot) and returns how far the
// view is behind the tenant's history.
func (v *Views) readView(ctx context.Context, p projections.Projection, tenant string, read func(pgx.Tx) error) (projections.TenantView, error) {
	tv := projections.TenantView{Name: p.Name()}
	err := v.snapshot(ctx, p.Table(), func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, tenantPendingGet, p.Name(), tenant, projections.MaxPending).Scan(&tv.Version, &tv.Pending)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("projection %s: %w", p.Name(), projections.ErrNoCheckpoint)
		}
		if err != nil {
			return err
		}
		return read(tx)
	})
	if err != nil {
		return tv, fmt.Errorf("read %s view: %w", p.Name(), err)
	}
	return tv, nil
}

// listQuery builds the query and arguments of a list, tenant first, with one row more than the
// page so that CutPage knows whether another follows.
func listQuery(columns, table, tenant string, f projections.Filter) (string, []any) {
	args := []any{tenant}
	where := []string{"tenant = $1"}
	arg := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if f.State != "" {
		arg("state = ?", string(f.State))
	}
	if f.Channel != "" {
		arg("channel = ?", f.Channel)
	}
	if f.Recipient != "" {
		arg("recipient = ?", f.Recipient)
	}
	if f.FailureClass != "" {
		arg("failure_class = ?", string(f.FailureClass))
	}
	if !f.Since.IsZero() {
		arg("accepted_at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		arg("accepted_at < ?", f.Until)
	}
	if f.After != nil {
		args = append(args, f.After.AcceptedAt, f.After.ID)
		where = append(where, fmt.Sprintf("(accepted_at, id) < ($%d, $%d::uuid)", len(args)-1, len(args)))
	}
	args = append(args, f.PageLimit()+1)
	// ORDER BY names the table's columns (v.id is the uuid, id alone the text output column), so
	// the order is the one the cursor condition and the (tenant, accepted_at, id) index use.
	return fmt.Sprintf(`SELECT %s FROM %s AS v WHERE %s ORDER BY v.accepted_at DESC, v.id DESC LIMIT $%d`,
		columns, ident(table), strings.Join(where, " AND "), len(args)), args
}

// Deliveries lists a tenant's deliveries from the status view, newest first.
func (v *Views) Deliveries(ctx context.Context, tenant string, f projections.Filter) (projections.Page[projections.StatusRow], error) {
	return listView(ctx, v, projections.StatusProjection{}, statusColumns, tenant, f, func(s projections.StatusRow) projections.Cursor {
		return projections.Cursor{AcceptedAt: s.AcceptedAt, ID: s.ID}
	})
}

// DeadLetters lists a tenant's dead and unknown deliveries from the DLQ view, newest first.
func (v *Views) DeadLetters(ctx context.Context, tenant string, f projections.Filter) (projections.Page[projections.DLQRow], error) {
	return listView(ctx, v, projections.DLQProjection{}, dlqColumns, tenant, f, func(d projections.DLQRow) projections.Cursor {
		return projections.Cursor{AcceptedAt: d.AcceptedAt, ID: d.ID}
	})
}

// listView reads one page of a tenant's rows of p's view, whose columns are cols.
func listView[R any](ctx context.Context, v *Views, p projections.Projection, cols columns[R], tenant string, f projections.Filter,
	cursorOf func(R) projections.Cursor) (projections.Page[R], error) {
	var out projections.Page[R]
	view, err := v.readView(ctx, p, tenant, func(tx pgx.Tx) error {
		query, args := listQuery(cols.selectList(), p.Table(), tenant, f)
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		out.Items, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (R, error) { return cols.scan(row) })
		return err
	})
	if err != nil {
		return out, err
	}
	out.View = view
	out.Items, out.Next = projections.CutPage(out.Items, f, cursorOf)
	return out, nil
}

// countersGetByTenant reads a tenant's counters.
const countersGetByTenant = `SELECT tenant, channel, state, deliveries, entered FROM counters_view
WHERE tenant = $1 ORDER BY channel, state`

// Stats returns a tenant's counters.
func (v *Views) Stats(ctx context.Context, tenant string) (projections.Stats, error) {
	var out projections.Stats
	view, err := v.readView(ctx, projections.CountersProjection{}, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, countersGetByTenant, tenant)
		if err != nil {
			return err
		}
		out.Counts, err = pgx.CollectRows(rows, pgx.RowToStructByPos[projections.CountRow])
		return err
	})
	out.View = view
	return out, err
}

// Positions returns every projection's checkpoint and lag, for `ledger projections status`.
func (v *Views) Positions(ctx context.Context) ([]projections.ViewPosition, error) {
	var out []projections.ViewPosition
	for _, p := range projections.All() {
		pos, err := viewPosition(ctx, v.pool, p.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, pos)
	}
	return out, nil
}

// checkpointsListRebuilds lists the checkpoints of shadows, whose names end in ".rebuild".
const checkpointsListRebuilds = `SELECT name FROM projection_checkpoints WHERE name LIKE '%.rebuild' ORDER BY name`

// Rebuilds returns the position and lag of every shadow a rebuild has left (running, or killed
// and waiting to be resumed), for `ledger projections status`.
func (v *Views) Rebuilds(ctx context.Context) ([]projections.ViewPosition, error) {
	rows, err := v.pool.Query(ctx, checkpointsListRebuilds)
	if err != nil {
		return nil, fmt.Errorf("list rebuilds: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list rebuilds: %w", err)
	}
	out := make([]projections.ViewPosition, 0, len(names))
	for _, name := range names {
		pos, err := viewPosition(ctx, v.pool, name)
		if err != nil {
			return nil, err
		}
		out = append(out, pos)
	}
	return out, nil
}

// statusOldestWaiting is the age of the oldest delivery per channel that waits for a worker.
const statusOldestWaiting = `SELECT channel, extract(epoch FROM now() - min(updated_at))
FROM status_view WHERE state IN ('accepted', 'queued') GROUP BY channel`

// OldestWaiting returns, per channel, how long the oldest delivery that is accepted or queued
// (not yet started) has been waiting, as the status view knows it, over all tenants (for
// metrics).
func (v *Views) OldestWaiting(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := v.pool.Query(ctx, statusOldestWaiting)
	if err != nil {
		return nil, fmt.Errorf("oldest waiting delivery: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var channel string
		var secs float64
		if err := rows.Scan(&channel, &secs); err != nil {
			return nil, err
		}
		out[channel] = time.Duration(secs * float64(time.Second))
	}
	return out, rows.Err()
}

// statusStale lists deliveries the status view says wait for a worker since before $1.
const statusStale = `SELECT id::text FROM status_view
WHERE (state IN ('accepted', 'queued') AND updated_at < $1) OR (state = 'retrying' AND next_attempt_at < $1)
ORDER BY updated_at LIMIT $2`

// StaleDeliveries returns up to limit deliveries, over all tenants, that by the status view have
// waited for a worker since before olderThan (candidates for a redrive, which checks each
// against its history; commands.StaleLister).
func (v *Views) StaleDeliveries(ctx context.Context, olderThan time.Time, limit int) ([]string, error) {
	rows, err := v.pool.Query(ctx, statusStale, olderThan, limit)
	if err != nil {
		return nil, fmt.Errorf("stale deliveries: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// statusDue lists the deliveries whose check time has come and that either a lookup can help
// (their provider is askable) or are past their give-up time; the partial index on check_at
// holds only such deliveries.
const statusDue = `SELECT id::text, provider, state, check_at, give_up_at FROM status_view
WHERE check_at IS NOT NULL AND check_at <= $1 AND (provider = ANY($2::text[]) OR give_up_at <= $1)
ORDER BY check_at LIMIT $3`

// DueChecks returns up to limit deliveries, over all tenants, due a look by the reconciler at
// now: an attempt a provider accepted whose receipt is overdue, or an unknown outcome, whose
// provider is one of askable; or an accepted attempt past its give-up time, whatever its provider.
func (v *Views) DueChecks(ctx context.Context, now time.Time, askable []string, limit int) ([]projections.DueRow, error) {
	if askable == nil {
		askable = []string{}
	}
	rows, err := v.pool.Query(ctx, statusDue, now, askable, limit)
	if err != nil {
		return nil, fmt.Errorf("deliveries due a look: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (projections.DueRow, error) {
		var d projections.DueRow
		err := row.Scan(&d.ID, &d.Provider, &d.State, &d.CheckAt, &d.GiveUpAt)
		d.CheckAt, d.GiveUpAt = d.CheckAt.UTC(), utcPtr(d.GiveUpAt)
		return d, err
	})
}

// statusMinutesGet counts, per minute of [$2, $3), a tenant's deliveries accepted in it (the
// (tenant, accepted_at, id) index) and those whose delivery ended in it as delivered or dead
// (terminal_at, the partial (tenant, terminal_at) index). A delivery is counted by what the view
// holds now: one dead and replayed since is no longer dead, and counts where it ends next.
const statusMinutesGet = `SELECT minute, sum(accepted)::bigint, sum(delivered)::bigint, sum(dead)::bigint FROM (
	SELECT date_trunc('minute', accepted_at) AS minute, 1 AS accepted, 0 AS delivered, 0 AS dead
	FROM status_view WHERE tenant = $1 AND accepted_at >= $2 AND accepted_at < $3
	UNION ALL
	SELECT date_trunc('minute', terminal_at), 0, (state = 'delivered')::int, (state = 'dead')::int
	FROM status_view WHERE tenant = $1 AND terminal_at >= $2 AND terminal_at < $3 AND terminal_at IS NOT NULL
) m GROUP BY minute`

// Minutes returns, for each of the projections.SeriesMinutes minutes up to the current one, how
// many of a tenant's deliveries the status view says were accepted, and became delivered or dead,
// in it. Counted in the database from the view's times rather than from a page of deliveries, it
// is right at any rate and counts a delivery accepted earlier that ended within the hour.
func (v *Views) Minutes(ctx context.Context, tenant string) (projections.Minutes, error) {
	out, start, end := projections.NewMinutes(time.Now())
	view, err := v.readView(ctx, projections.StatusProjection{}, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, statusMinutesGet, tenant, start, end)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var m projections.MinuteRow
			if err := rows.Scan(&m.Minute, &m.Accepted, &m.Delivered, &m.Dead); err != nil {
				return err
			}
			out.Set(m)
		}
		return rows.Err()
	})
	out.View = view
	return out, err
}

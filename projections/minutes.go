package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// MinuteRow counts a tenant's deliveries in one minute: accepted in it, and become delivered or
// dead in it.
type MinuteRow struct {
	// Minute is the minute's start (UTC).
	Minute    time.Time
	Accepted  int64
	Delivered int64
	Dead      int64
}

// Minutes is a tenant's per-minute series, oldest minute first, every minute present.
type Minutes struct {
	Minutes []MinuteRow
	View    TenantView
}

// SeriesMinutes is how many minutes Reader.Minutes covers: the last hour, the current minute
// included.
const SeriesMinutes = 60

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

// Minutes returns, for each of the SeriesMinutes minutes up to the current one, how many of a
// tenant's deliveries the status view says were accepted, and became delivered or dead, in it.
// Counted in the database from the view's times rather than from a page of deliveries, it is
// right at any rate and counts a delivery accepted earlier that ended within the hour.
func (r *Reader) Minutes(ctx context.Context, tenant string) (Minutes, error) {
	return r.minutesAt(ctx, tenant, time.Now())
}

// minutesAt is Minutes for the hour up to the minute now is in.
func (r *Reader) minutesAt(ctx context.Context, tenant string, now time.Time) (Minutes, error) {
	end := now.UTC().Truncate(time.Minute).Add(time.Minute)
	start := end.Add(-SeriesMinutes * time.Minute)
	out := Minutes{Minutes: make([]MinuteRow, SeriesMinutes)}
	for i := range out.Minutes {
		out.Minutes[i].Minute = start.Add(time.Duration(i) * time.Minute)
	}
	view, err := r.readView(ctx, StatusProjection{}, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, statusMinutesGet, tenant, start, end)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var m MinuteRow
			if err := rows.Scan(&m.Minute, &m.Accepted, &m.Delivered, &m.Dead); err != nil {
				return err
			}
			if i := int(m.Minute.Sub(start) / time.Minute); i >= 0 && i < SeriesMinutes {
				m.Minute = out.Minutes[i].Minute
				out.Minutes[i] = m
			}
		}
		return rows.Err()
	})
	out.View = view
	return out, err
}

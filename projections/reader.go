package projections

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/domain"
)

// Limits of a page.
const (
	DefaultPageLimit = 50
	MaxPageLimit     = 500
)

// Filter selects the deliveries of a list. Zero fields do not filter.
type Filter struct {
	State     domain.State
	Channel   string
	Recipient string
	// FailureClass selects the DLQ view's entries of one failure class; the status view has no
	// such column (a list of it with one is an error).
	FailureClass domain.ErrorClass
	// Since and Until bound accepted_at: Since <= accepted_at < Until.
	Since, Until time.Time
	// Limit is the page size (1..MaxPageLimit); zero means DefaultPageLimit.
	Limit int
	// After continues a list after the last item of the previous page.
	After *Cursor
}

// Cursor is a place in a list ordered by (accepted_at, id), newest first. Both are fixed when a
// delivery is accepted, so deliveries that arrive while a client pages never shift the pages:
// the next page is "everything older than the last item", whatever was added meanwhile.
type Cursor struct {
	AcceptedAt time.Time
	ID         string
}

// cursorWire is a cursor's encoded form: microseconds keep the database's precision exactly.
type cursorWire struct {
	At int64  `json:"a"`
	ID string `json:"i"`
}

// String encodes the cursor as an opaque token.
func (c Cursor) String() string {
	b, _ := json.Marshal(cursorWire{At: c.AcceptedAt.UnixMicro(), ID: c.ID}) // an int and a string marshal
	return base64.RawURLEncoding.EncodeToString(b)
}

// ErrBadCursor is returned by ParseCursor for a token it did not make.
var ErrBadCursor = errors.New("not a cursor this API returned")

// maxCursorMicros is the year 10000 in Unix microseconds.
const maxCursorMicros = 253402300800 * 1_000_000

// ParseCursor decodes a token made by Cursor.String.
func ParseCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	var w cursorWire
	// A time outside [1970, 10000) was not made here, and PostgreSQL's timestamps would refuse
	// the extremes of an int64.
	if err := json.Unmarshal(b, &w); err != nil || w.At <= 0 || w.At >= maxCursorMicros {
		return Cursor{}, ErrBadCursor
	}
	// The id travels in its canonical form: uuid.Parse takes spellings PostgreSQL refuses.
	id, err := uuid.Parse(w.ID)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	return Cursor{AcceptedAt: time.UnixMicro(w.At).UTC(), ID: id.String()}, nil
}

// Page is one page of a list, with the position of the view it was read from.
type Page[T any] struct {
	Items []T
	// Next continues the list; nil on the last page.
	Next *Cursor
	View TenantView
}

// Stats are a tenant's counters.
type Stats struct {
	Counts []CountRow
	View   TenantView
}

// Reader answers the read API from the views. Each answer is read in one snapshot together with
// the view's checkpoint, so the position it reports is exactly the one its rows reflect.
type Reader struct {
	pool *pgxpool.Pool
}

// NewReader returns a reader over pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

// TenantView says how far a view is behind one tenant's own history, and nothing about any
// other tenant's: not the log's global position, not the events others append.
type TenantView struct {
	// Name is the projection's name.
	Name string
	// Version is the projection code version that built the view.
	Version int
	// Pending is the number of the tenant's committed events the view has not applied yet,
	// counted up to MaxPending (a larger number is reported as MaxPending).
	Pending int64
}

// MaxPending bounds the count of a tenant's events a view has not applied: counting them reads
// the log past the view's checkpoint, which is short unless the projector has stopped.
const MaxPending = 1000

// tenantPendingGet reads a view's version and how many of a tenant's events lie past its
// checkpoint.
const tenantPendingGet = `SELECT c.version, (SELECT count(*) FROM (SELECT 1 FROM events e
	WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position) AND e.tenant = $2 LIMIT $3) p)
FROM projection_checkpoints c WHERE c.name = $1`

// readView runs read in a read-only snapshot of a view and returns how far the view is behind
// the tenant's history.
//
// The table is locked (ACCESS SHARE, which only a rebuild's switch conflicts with) before the
// snapshot is taken: a reader that queues behind a switch then sees the new table with a
// snapshot in which its rows and its checkpoint are both committed. A snapshot taken before the
// switch could otherwise see the new table with rows of the old checkpoint.
func (r *Reader) readView(ctx context.Context, p Projection, tenant string, read func(pgx.Tx) error) (TenantView, error) {
	v := TenantView{Name: p.Name()}
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE `+ident(p.Table())+` IN ACCESS SHARE MODE`); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, tenantPendingGet, p.Name(), tenant, MaxPending).Scan(&v.Version, &v.Pending)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("projection %s: %w", p.Name(), errNoCheckpoint)
		}
		if err != nil {
			return err
		}
		return read(tx)
	})
	if err != nil {
		return v, fmt.Errorf("read %s view: %w", p.Name(), err)
	}
	return v, nil
}

// listQuery builds the WHERE clause and arguments of a list, tenant first.
func listQuery(columns, table, tenant string, f Filter) (string, []any) {
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
	args = append(args, limitOf(f)+1)
	// ORDER BY names the table's columns (v.id is the uuid, id alone the text output column), so
	// the order is the one the cursor condition and the (tenant, accepted_at, id) index use.
	return fmt.Sprintf(`SELECT %s FROM %s AS v WHERE %s ORDER BY v.accepted_at DESC, v.id DESC LIMIT $%d`,
		columns, ident(table), strings.Join(where, " AND "), len(args)), args
}

func limitOf(f Filter) int {
	if f.Limit <= 0 {
		return DefaultPageLimit
	}
	return min(f.Limit, MaxPageLimit)
}

// page cuts the extra row a list reads to know whether another page follows.
func page[T any](items []T, f Filter, cursorOf func(T) Cursor) ([]T, *Cursor) {
	if len(items) <= limitOf(f) {
		return items, nil
	}
	items = items[:limitOf(f)]
	c := cursorOf(items[len(items)-1])
	return items, &c
}

// Deliveries lists a tenant's deliveries from the status view, newest first.
func (r *Reader) Deliveries(ctx context.Context, tenant string, f Filter) (Page[StatusRow], error) {
	var out Page[StatusRow]
	p := StatusProjection{}
	view, err := r.readView(ctx, p, tenant, func(tx pgx.Tx) error {
		query, args := listQuery(statusColumns, p.Table(), tenant, f)
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		out.Items, err = pgx.CollectRows(rows, scanStatus)
		return err
	})
	if err != nil {
		return out, err
	}
	out.View = view
	out.Items, out.Next = page(out.Items, f, func(s StatusRow) Cursor { return Cursor{AcceptedAt: s.AcceptedAt, ID: s.ID} })
	return out, nil
}

// DeadLetters lists a tenant's dead and unknown deliveries from the DLQ view, newest first.
func (r *Reader) DeadLetters(ctx context.Context, tenant string, f Filter) (Page[DLQRow], error) {
	var out Page[DLQRow]
	p := DLQProjection{}
	view, err := r.readView(ctx, p, tenant, func(tx pgx.Tx) error {
		query, args := listQuery(dlqColumns, p.Table(), tenant, f)
		rows, err := tx.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		out.Items, err = pgx.CollectRows(rows, scanDLQ)
		return err
	})
	if err != nil {
		return out, err
	}
	out.View = view
	out.Items, out.Next = page(out.Items, f, func(d DLQRow) Cursor { return Cursor{AcceptedAt: d.AcceptedAt, ID: d.ID} })
	return out, nil
}

// countersGetByTenant reads a tenant's counters.
const countersGetByTenant = `SELECT tenant, channel, state, deliveries, entered FROM counters_view
WHERE tenant = $1 ORDER BY channel, state`

// Stats returns a tenant's counters.
func (r *Reader) Stats(ctx context.Context, tenant string) (Stats, error) {
	var out Stats
	view, err := r.readView(ctx, CountersProjection{}, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, countersGetByTenant, tenant)
		if err != nil {
			return err
		}
		out.Counts, err = pgx.CollectRows(rows, pgx.RowToStructByPos[CountRow])
		return err
	})
	out.View = view
	return out, err
}

// Positions returns every projection's checkpoint and lag, for `ledger projections status`.
func (r *Reader) Positions(ctx context.Context) ([]ViewPosition, error) {
	var out []ViewPosition
	for _, p := range All() {
		v, err := viewPosition(ctx, r.pool, p.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// checkpointsListRebuilds lists the checkpoints of shadows, whose names end in ".rebuild".
const checkpointsListRebuilds = `SELECT name FROM projection_checkpoints WHERE name LIKE '%.rebuild' ORDER BY name`

// Rebuilds returns the position and lag of every shadow a rebuild has left (running, or killed
// and waiting to be resumed), for `ledger projections status`.
func (r *Reader) Rebuilds(ctx context.Context) ([]ViewPosition, error) {
	rows, err := r.pool.Query(ctx, checkpointsListRebuilds)
	if err != nil {
		return nil, fmt.Errorf("list rebuilds: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list rebuilds: %w", err)
	}
	out := make([]ViewPosition, 0, len(names))
	for _, name := range names {
		v, err := viewPosition(ctx, r.pool, name)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// statusOldestWaiting is the age of the oldest delivery per channel that waits for a worker.
const statusOldestWaiting = `SELECT channel, extract(epoch FROM now() - min(updated_at))
FROM status_view WHERE state IN ('accepted', 'queued') GROUP BY channel`

// OldestWaiting returns, per channel, how long the oldest delivery that is accepted or queued
// (not yet started) has been waiting, as the status view knows it, over all tenants (for
// metrics).
func (r *Reader) OldestWaiting(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := r.pool.Query(ctx, statusOldestWaiting)
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
func (r *Reader) StaleDeliveries(ctx context.Context, olderThan time.Time, limit int) ([]string, error) {
	rows, err := r.pool.Query(ctx, statusStale, olderThan, limit)
	if err != nil {
		return nil, fmt.Errorf("stale deliveries: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// DueRow is a delivery the status view says is due a look at its provider.
type DueRow struct {
	ID       string
	Provider string
	State    domain.State
	CheckAt  time.Time
	GiveUpAt *time.Time
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
func (r *Reader) DueChecks(ctx context.Context, now time.Time, askable []string, limit int) ([]DueRow, error) {
	if askable == nil {
		askable = []string{}
	}
	rows, err := r.pool.Query(ctx, statusDue, now, askable, limit)
	if err != nil {
		return nil, fmt.Errorf("deliveries due a look: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (DueRow, error) {
		var d DueRow
		err := row.Scan(&d.ID, &d.Provider, &d.State, &d.CheckAt, &d.GiveUpAt)
		d.CheckAt, d.GiveUpAt = d.CheckAt.UTC(), utcPtr(d.GiveUpAt)
		return d, err
	})
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// Views owns the projections' tables (status_view, dlq_view, counters_view, their rebuilds'
// shadows, projection_checkpoints) and the reads of the events log they need: every statement
// on them is here, behind the ports the projections declare (projections.Store, Tx, Snapshot),
// and the read API's (views_read.go).
type Views struct {
	pool *pgxpool.Pool
}

var (
	_ projections.Store    = (*Views)(nil)
	_ projections.Tx       = viewTx{}
	_ projections.Snapshot = viewSnapshot{}
	_ commands.StaleLister = (*Views)(nil)
)

// NewViews returns the views of the database pool connects to.
func NewViews(pool *pgxpool.Pool) *Views { return &Views{pool: pool} }

// Statements on projection_checkpoints.
const (
	checkpointGet          = `SELECT transaction_id::text, position, events, version FROM projection_checkpoints WHERE name = $1`
	checkpointGetForUpdate = checkpointGet + ` FOR UPDATE`
	checkpointAdvance      = `UPDATE projection_checkpoints SET transaction_id = $2::text::xid8, position = $3,
	events = events + $4, version = $5, last_recorded_at = coalesce($6, last_recorded_at), updated_at = now()
WHERE name = $1`
	checkpointEnsure = `INSERT INTO projection_checkpoints (name, version) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`
	checkpointReset  = `INSERT INTO projection_checkpoints (name, version) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET transaction_id = '0', position = 0, events = 0, version = excluded.version,
	last_recorded_at = NULL, updated_at = now()`
	// checkpointMove gives the live view the shadow's checkpoint, at the switch of a rebuild.
	checkpointMove = `UPDATE projection_checkpoints AS live SET transaction_id = s.transaction_id,
	position = s.position, events = s.events, version = s.version, last_recorded_at = s.last_recorded_at,
	updated_at = now()
FROM projection_checkpoints AS s WHERE live.name = $1 AND s.name = $2`
	checkpointDelete = `DELETE FROM projection_checkpoints WHERE name = $1`

	// checkpointLagGet reads a checkpoint and how far the log has moved past it. The age is
	// measured from the oldest unapplied event, so it says how stale the view may be.
	checkpointLagGet = `SELECT c.transaction_id::text, c.position, c.version, c.events, c.updated_at,
	(SELECT count(*) FROM events e WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position)),
	(SELECT extract(epoch FROM now() - e.recorded_at)::float8 FROM events e
	 WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position)
	 ORDER BY e.transaction_id, e.position LIMIT 1)
FROM projection_checkpoints c WHERE c.name = $1`

	// commitAsyncSet turns off the wait for the commit's WAL flush (projections.TxOptions).
	commitAsyncSet = `SET LOCAL synchronous_commit = off`
)

// Statements of a rebuild; they name tables, so the names are quoted into the text.
const (
	rebuildLock   = `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/rebuild/' || $1, 0))`
	rebuildUnlock = `SELECT pg_advisory_unlock(hashtextextended(current_schema() || '/rebuild/' || $1, 0))`
	// tableColumnsGet describes a table's columns, to tell whether a shadow still has the live
	// table's shape (a migration may have run since it was started).
	tableColumnsGet = `SELECT coalesce(string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attname), '')
FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`
	tableIndexesList = `SELECT ci.relname FROM pg_index i JOIN pg_class ci ON ci.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1) ORDER BY ci.relname`
)

// querier is a pool, a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func getCheckpoint(ctx context.Context, q querier, name string, forUpdate bool) (projections.Checkpoint, error) {
	query := checkpointGet
	if forUpdate {
		query = checkpointGetForUpdate
	}
	var cp projections.Checkpoint
	var txid string
	err := q.QueryRow(ctx, query, name).Scan(&txid, &cp.At.Position, &cp.Events, &cp.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, fmt.Errorf("projection %s: %w", name, projections.ErrNoCheckpoint)
	}
	if err != nil {
		return cp, fmt.Errorf("read checkpoint of %s: %w", name, err)
	}
	cp.At.TransactionID, err = strconv.ParseUint(txid, 10, 64)
	return cp, err
}

// viewPosition reads a projection's checkpoint and lag.
func viewPosition(ctx context.Context, q querier, name string) (projections.ViewPosition, error) {
	v := projections.ViewPosition{Name: name}
	var txid string
	var age *float64
	err := q.QueryRow(ctx, checkpointLagGet, name).Scan(&txid, &v.Position.Position, &v.Version, &v.Events,
		&v.UpdatedAt, &v.LagEvents, &age)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, fmt.Errorf("projection %s: %w", name, projections.ErrNoCheckpoint)
	}
	if err != nil {
		return v, fmt.Errorf("read position of %s: %w", name, err)
	}
	v.UpdatedAt = v.UpdatedAt.UTC()
	if age != nil && *age > 0 {
		v.LagSeconds = *age
	}
	v.Position.TransactionID, err = strconv.ParseUint(txid, 10, 64)
	return v, err
}

// CheckpointEnsure implements projections.Store.
func (v *Views) CheckpointEnsure(ctx context.Context, name string, version int) error {
	if _, err := v.pool.Exec(ctx, checkpointEnsure, name, version); err != nil {
		return fmt.Errorf("create checkpoint of %s: %w", name, err)
	}
	return nil
}

// CheckpointGet implements projections.Store.
func (v *Views) CheckpointGet(ctx context.Context, name string) (projections.Checkpoint, error) {
	return getCheckpoint(ctx, v.pool, name, false)
}

// Position implements projections.Store.
func (v *Views) Position(ctx context.Context, name string) (projections.ViewPosition, error) {
	return viewPosition(ctx, v.pool, name)
}

// InTx implements projections.Store. A lock wait past opts.LockTimeout (55P03) and a lost
// deadlock (40P01) are reported as projections.ErrBusy.
func (v *Views) InTx(ctx context.Context, opts projections.TxOptions, fn func(projections.Tx) error) error {
	err := pgx.BeginFunc(ctx, v.pool, func(tx pgx.Tx) error {
		if opts.AsyncCommit {
			if _, err := tx.Exec(ctx, commitAsyncSet); err != nil {
				return err
			}
		}
		if opts.LockTimeout > 0 {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, opts.LockTimeout.Milliseconds())); err != nil {
				return err
			}
		}
		return fn(viewTx{tx})
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01") {
		return fmt.Errorf("%w: %w", projections.ErrBusy, err)
	}
	return err
}

// Snapshot implements projections.Store.
//
// The table is locked (ACCESS SHARE, which only a rebuild's switch conflicts with) before the
// snapshot is taken: a reader that queues behind a switch then sees the new table with a
// snapshot in which its rows and its checkpoint are both committed. A snapshot taken before the
// switch could otherwise see the new table with rows of the old checkpoint.
func (v *Views) Snapshot(ctx context.Context, table string, fn func(projections.Snapshot) error) error {
	return v.snapshot(ctx, table, func(tx pgx.Tx) error { return fn(viewSnapshot{tx}) })
}

func (v *Views) snapshot(ctx context.Context, table string, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, v.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE `+ident(table)+` IN ACCESS SHARE MODE`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// RebuildLock implements projections.Store with a session advisory lock on a connection of its
// own, named after the schema and the projection.
func (v *Views) RebuildLock(ctx context.Context, name string) (release func(), ok bool, err error) {
	conn, err := v.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	if err := conn.QueryRow(ctx, rebuildLock, name).Scan(&ok); err != nil || !ok {
		conn.Release()
		return nil, false, err
	}
	return func() {
		conn.Exec(context.WithoutCancel(ctx), rebuildUnlock, name) //nolint:errcheck // the session ends the lock anyway
		conn.Release()
	}, true, nil
}

// countersTotalsGet sums the counters view over tenants, for the deliveries gauge.
const countersTotalsGet = `SELECT channel, state, sum(deliveries)::bigint FROM counters_view GROUP BY channel, state`

// CountersTotals implements projections.Store.
func (v *Views) CountersTotals(ctx context.Context) ([]projections.CountRow, error) {
	rows, err := v.pool.Query(ctx, countersTotalsGet)
	if err != nil {
		return nil, fmt.Errorf("counters totals: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (projections.CountRow, error) {
		var r projections.CountRow
		err := row.Scan(&r.Channel, &r.State, &r.Deliveries)
		return r, err
	})
}

// viewTx is a projections.Tx.
type viewTx struct{ tx pgx.Tx }

// Statements of the projections' batches; %[1]s is the table (live or shadow). The status and
// DLQ views' statements derive from their column lists.
var (
	statusRowsGet = `SELECT ` + statusColumns.selectList() + ` FROM %[1]s WHERE id = ANY($1::uuid[])`

	// The update is guarded by the version the row had when it was read. The ids again as an
	// array ($1) let the planner keep only the partitions of the batch's deliveries: a join with
	// unnest alone is planned over every partition, a hash join of the whole view.
	statusRowsUpdate = `UPDATE %[1]s AS v SET ` + statusColumns.set("id", "u") + `
FROM ` + statusColumns.unnest("u", [2]string{"expected_version", "integer"}) + `
WHERE v.id = u.id AND v.version = u.expected_version AND v.id = ANY($1::uuid[])`

	// By the uuid column (the index), not the text output column of the same name; both orders
	// agree with the log's delivery_id order, which the merge in Verify relies on. The rows of
	// deliveries that left for the archive are outside the hot window the log holds.
	statusRowsList = `SELECT ` + statusColumns.selectList() + ` FROM %[1]s AS v
WHERE NOT EXISTS (` + segmentHolding("v.id") + `) ORDER BY v.id`

	// A row is replaced only by a later version of the same delivery.
	dlqRowsUpsert = `INSERT INTO %[1]s AS d (` + strings.Join(dlqColumns.names(), ", ") + `)
SELECT * FROM ` + dlqColumns.unnest("u") + `
ON CONFLICT (id) DO UPDATE SET ` + dlqColumns.set("id", "excluded") + `
WHERE d.version < excluded.version`

	dlqRowsList = `SELECT ` + dlqColumns.selectList() + ` FROM %[1]s AS v
WHERE NOT EXISTS (` + segmentHolding("v.id") + `) ORDER BY v.id`
)

// segmentHolding is the archive segment (archived, or archiving) whose range of delivery ids, the
// accept times [from_at, to_at), holds the delivery id: a handful of rows, one per partition that
// left.
func segmentHolding(id string) string {
	return `SELECT 1 FROM archive_segments g WHERE (g.from_at IS NULL OR ` + id + ` >= ledger_delivery_floor(g.from_at))
	AND ` + id + ` < ledger_delivery_floor(g.to_at)`
}

// Statements on the archive segments, for the whole-life counters.
const (
	// segmentsLock keeps a counters rebuild's seed and a retention pass's start of a segment
	// apart (retention.go, segmentBegin): either the seed sees the segment archiving and
	// refuses, or the pass sees the rebuild's shadow and holds the partition. A partition that
	// left while the shadow's catch-up was under way would leave some of its events folded in
	// the shadow and none of its counts.
	segmentsLock = `SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '/archive_segments', 0))`
	// segmentArchivingGet finds a segment a retention pass is moving: its events have left the
	// log (or are about to) and its counts are not recorded yet.
	segmentArchivingGet = `SELECT id FROM archive_segments WHERE state = 'archiving' ORDER BY to_at LIMIT 1`
	// archivedCountersList sums what the archived segments took with them per key.
	archivedCountersList = `SELECT c.tenant, c.channel, c.state, sum(c.deliveries)::bigint, sum(c.entered)::bigint
FROM archive_segments g
CROSS JOIN LATERAL jsonb_to_recordset(g.counters) AS c(tenant text, channel text, state text, deliveries bigint, entered bigint)
WHERE g.state = 'archived'
GROUP BY c.tenant, c.channel, c.state ORDER BY c.tenant, c.channel, c.state`
)

// archivedCounters reads what the archived segments took with them, or fails with
// projections.ErrBusy while a segment is archiving.
func archivedCounters(ctx context.Context, tx pgx.Tx) ([]projections.CountRow, error) {
	var busy string
	switch err := tx.QueryRow(ctx, segmentArchivingGet).Scan(&busy); {
	case err == nil:
		return nil, fmt.Errorf("%w: segment %s is being archived; try again once the retention pass has moved it", projections.ErrBusy, busy)
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("archived counters: %w", err)
	}
	rows, err := tx.Query(ctx, archivedCountersList)
	if err != nil {
		return nil, fmt.Errorf("archived counters: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[projections.CountRow])
	if err != nil {
		return nil, fmt.Errorf("archived counters: %w", err)
	}
	return out, nil
}

const (
	dlqRowsDelete  = `DELETE FROM %[1]s WHERE id = ANY($1::uuid[])`
	dlqRowsPresent = `SELECT id::text FROM %[1]s WHERE id = ANY($1::uuid[])`

	// streamsGet reads streams up to a version each.
	streamsGet = `SELECT e.delivery_id::text, e.tenant, e.version, e.type, e.data, e.recorded_at
FROM unnest($1::uuid[], $2::int[]) AS u(id, upto)
JOIN events e ON e.delivery_id = u.id AND e.version <= u.upto
ORDER BY e.delivery_id, e.version`

	// streamsContextGet reads the accepted event and the event before a batch.
	streamsContextGet = `SELECT e.delivery_id::text, e.version, e.type, coalesce(e.data->>'channel', '')
FROM unnest($1::uuid[], $2::int[]) AS u(id, before)
JOIN events e ON e.delivery_id = u.id AND (e.version = 1 OR e.version = u.before)`

	// streamsStateGet reads the latest event before a version whose type is not skipped.
	streamsStateGet = `SELECT u.id::text, l.type
FROM unnest($1::uuid[], $2::int[]) AS u(id, before)
CROSS JOIN LATERAL (SELECT e.type FROM events e
	WHERE e.delivery_id = u.id AND e.version < u.before AND e.type <> ALL($3::text[])
	ORDER BY e.version DESC LIMIT 1) l`

	countersAdd = `INSERT INTO %[1]s AS c (tenant, channel, state, deliveries, entered)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[])
ON CONFLICT (tenant, channel, state) DO UPDATE SET
	deliveries = c.deliveries + excluded.deliveries, entered = c.entered + excluded.entered`

	countersList = `SELECT tenant, channel, state, deliveries, entered FROM %[1]s ORDER BY tenant, channel, state`
)

// ident quotes a table name for SQL text.
func ident(name string) string {
	return pgx.Identifier{strings.TrimSpace(name)}.Sanitize()
}

// CheckpointLock implements projections.Tx.
func (t viewTx) CheckpointLock(ctx context.Context, name string) (projections.Checkpoint, error) {
	return getCheckpoint(ctx, t.tx, name, true)
}

// CheckpointAdvance implements projections.Tx.
func (t viewTx) CheckpointAdvance(ctx context.Context, name string, last projections.LoggedEvent, events int, version int) error {
	var recordedAt *time.Time
	if !last.RecordedAt.IsZero() {
		recordedAt = &last.RecordedAt
	}
	_, err := t.tx.Exec(ctx, checkpointAdvance, name, strconv.FormatUint(last.At.TransactionID, 10), last.At.Position,
		events, version, recordedAt)
	return err
}

// CheckpointReset implements projections.Tx.
func (t viewTx) CheckpointReset(ctx context.Context, name string, version int) error {
	_, err := t.tx.Exec(ctx, checkpointReset, name, version)
	return err
}

// CheckpointMove implements projections.Tx.
func (t viewTx) CheckpointMove(ctx context.Context, live, shadow string) error {
	if _, err := t.tx.Exec(ctx, checkpointMove, live, shadow); err != nil {
		return err
	}
	_, err := t.tx.Exec(ctx, checkpointDelete, shadow)
	return err
}

// ShadowMatches implements projections.Tx: same columns, and partitioned by the same key (or
// neither partitioned).
func (t viewTx) ShadowMatches(ctx context.Context, live, shadow string) (bool, error) {
	var liveCols, shadowCols, liveKey, shadowKey string
	for _, q := range []struct {
		sql, table string
		into       *string
	}{
		{tableColumnsGet, live, &liveCols}, {tableColumnsGet, shadow, &shadowCols},
		{tablePartitionKeyGet, live, &liveKey}, {tablePartitionKeyGet, shadow, &shadowKey},
	} {
		if err := t.tx.QueryRow(ctx, q.sql, q.table).Scan(q.into); err != nil {
			return false, err
		}
	}
	return shadowCols != "" && shadowCols == liveCols && shadowKey == liveKey, nil
}

// ShadowCreate implements projections.Tx. The shadow of a partitioned view is partitioned the
// same way, with the same partitions (partitions_views.go).
func (t viewTx) ShadowCreate(ctx context.Context, live, shadow string) error {
	var key string
	if err := t.tx.QueryRow(ctx, tablePartitionKeyGet, live).Scan(&key); err != nil {
		return err
	}
	create := `CREATE TABLE ` + ident(shadow) + ` (LIKE ` + ident(live) + ` INCLUDING ALL)`
	if key != "" {
		create += ` PARTITION BY ` + key
	}
	for _, stmt := range []string{`DROP TABLE IF EXISTS ` + ident(shadow), create} {
		if _, err := t.tx.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	if key != "" {
		return shadowPartitionsCreate(ctx, t.tx, live, shadow)
	}
	return nil
}

// ShadowSwitch implements projections.Tx: readers wait from its lock to the commit only. For a
// partitioned view it first takes the partitions' advisory lock (before the table, the order
// EnsurePartitions takes them in), so that the set of partitions holds still while the shadow's
// is made equal to it.
func (t viewTx) ShadowSwitch(ctx context.Context, live, shadow string) error {
	var key string
	if err := t.tx.QueryRow(ctx, tablePartitionKeyGet, live).Scan(&key); err != nil {
		return err
	}
	if key != "" {
		for _, stmt := range []string{
			`SELECT pg_advisory_xact_lock(` + partitionLock + `)`,
			`LOCK TABLE ` + ident(live) + ` IN ACCESS EXCLUSIVE MODE`,
		} {
			if _, err := t.tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return shadowPartitionsSwitch(ctx, t.tx, live, shadow)
	}
	retired := ident(live + "_retired")
	for _, stmt := range []string{
		`LOCK TABLE ` + ident(live) + ` IN ACCESS EXCLUSIVE MODE`,
		`ALTER TABLE ` + ident(live) + ` RENAME TO ` + retired,
		`ALTER TABLE ` + ident(shadow) + ` RENAME TO ` + ident(live),
		`DROP TABLE ` + retired,
	} {
		if _, err := t.tx.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return renameIndexes(ctx, t.tx, shadow, live)
}

// renameIndexes gives the indexes a table inherited from its shadow the names they would have
// had on the table created by the migrations (CREATE TABLE ... LIKE names them after the shadow).
func renameIndexes(ctx context.Context, tx pgx.Tx, from, to string) error {
	rows, err := tx.Query(ctx, tableIndexesList, to)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range names {
		suffix, ok := strings.CutPrefix(name, from+"_")
		if !ok {
			continue
		}
		if _, err := tx.Exec(ctx, `ALTER INDEX `+ident(name)+` RENAME TO `+ident(to+"_"+suffix)); err != nil {
			return fmt.Errorf("rename index %s: %w", name, err)
		}
	}
	return nil
}

func scanStatus(row pgx.CollectableRow) (projections.StatusRow, error) {
	return statusColumns.scan(row)
}

func scanDLQ(row pgx.CollectableRow) (projections.DLQRow, error) { return dlqColumns.scan(row) }

// StatusRowsGet implements projections.Tx.
func (t viewTx) StatusRowsGet(ctx context.Context, table string, ids []string) ([]projections.StatusRow, error) {
	rows, err := t.tx.Query(ctx, fmt.Sprintf(statusRowsGet, ident(table)), ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanStatus)
}

// StatusRowsInsert implements projections.Tx. COPY is the cheapest way in for the new rows,
// which are most rows of a rebuild.
func (t viewTx) StatusRowsInsert(ctx context.Context, table string, rows []projections.StatusRow) error {
	_, err := t.tx.CopyFrom(ctx, pgx.Identifier{table}, statusColumns.names(), &copySource[projections.StatusRow]{cs: statusColumns, rows: rows})
	return err
}

// StatusRowsUpdate implements projections.Tx.
func (t viewTx) StatusRowsUpdate(ctx context.Context, table string, rows []projections.StatusRow, expected []int) (int64, error) {
	versions := make([]int32, len(expected))
	for i, v := range expected {
		versions[i] = int32(v)
	}
	tag, err := t.tx.Exec(ctx, fmt.Sprintf(statusRowsUpdate, ident(table)), append(statusColumns.arrays(rows), versions)...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// DLQRowsPresent implements projections.Tx.
func (t viewTx) DLQRowsPresent(ctx context.Context, table string, ids []string) ([]string, error) {
	rows, err := t.tx.Query(ctx, fmt.Sprintf(dlqRowsPresent, ident(table)), ids)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// DLQRowsDelete implements projections.Tx.
func (t viewTx) DLQRowsDelete(ctx context.Context, table string, ids []string) error {
	_, err := t.tx.Exec(ctx, fmt.Sprintf(dlqRowsDelete, ident(table)), ids)
	return err
}

// DLQRowsUpsert implements projections.Tx.
func (t viewTx) DLQRowsUpsert(ctx context.Context, table string, rows []projections.DLQRow) (int64, error) {
	tag, err := t.tx.Exec(ctx, fmt.Sprintf(dlqRowsUpsert, ident(table)), dlqColumns.arrays(rows)...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func scanStreamEvent(rows pgx.CollectableRow) (domain.Event, error) {
	var e domain.Event
	var typ string
	err := rows.Scan(&e.DeliveryID, &e.Tenant, &e.Version, &typ, &e.Data, &e.RecordedAt)
	e.Type = domain.EventType(typ)
	e.RecordedAt = e.RecordedAt.UTC()
	return e, err
}

// StreamsGet implements projections.Tx.
func (t viewTx) StreamsGet(ctx context.Context, ids []string, upTo []int32) ([]domain.Event, error) {
	rows, err := t.tx.Query(ctx, streamsGet, ids, upTo)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanStreamEvent)
}

// StreamsContextGet implements projections.Tx.
func (t viewTx) StreamsContextGet(ctx context.Context, ids []string, before []int32) ([]projections.ContextEvent, error) {
	rows, err := t.tx.Query(ctx, streamsContextGet, ids, before)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (projections.ContextEvent, error) {
		var e projections.ContextEvent
		err := row.Scan(&e.DeliveryID, &e.Version, &e.Type, &e.Channel)
		return e, err
	})
}

// StreamsStateGet implements projections.Tx.
func (t viewTx) StreamsStateGet(ctx context.Context, ids []string, before []int32, skip []string) (map[string]domain.EventType, error) {
	rows, err := t.tx.Query(ctx, streamsStateGet, ids, before, skip)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]domain.EventType{}
	for rows.Next() {
		var id, typ string
		if err := rows.Scan(&id, &typ); err != nil {
			return nil, err
		}
		out[id] = domain.EventType(typ)
	}
	return out, rows.Err()
}

// CountersAdd implements projections.Tx.
func (t viewTx) CountersAdd(ctx context.Context, table string, rows []projections.CountRow) error {
	n := len(rows)
	tenants, channels, states := make([]string, n), make([]string, n), make([]string, n)
	deliveries, entered := make([]int64, n), make([]int64, n)
	for i, r := range rows {
		tenants[i], channels[i], states[i] = r.Tenant, r.Channel, string(r.State)
		deliveries[i], entered[i] = r.Deliveries, r.Entered
	}
	_, err := t.tx.Exec(ctx, fmt.Sprintf(countersAdd, ident(table)), tenants, channels, states, deliveries, entered)
	return err
}

// ArchivedCounters implements projections.Tx. It takes the segments' lock to the end of the
// transaction, the one that starts a counters rebuild's shadow: a retention pass then holds its
// partitions until the rebuild's switch (segmentsLock).
func (t viewTx) ArchivedCounters(ctx context.Context) ([]projections.CountRow, error) {
	if _, err := t.tx.Exec(ctx, segmentsLock); err != nil {
		return nil, fmt.Errorf("archived counters: %w", err)
	}
	return archivedCounters(ctx, t.tx)
}

// viewSnapshot is a projections.Snapshot.
type viewSnapshot struct{ tx pgx.Tx }

// Position implements projections.Snapshot.
func (s viewSnapshot) Position(ctx context.Context, name string) (projections.ViewPosition, error) {
	return viewPosition(ctx, s.tx, name)
}

// StatusRowsList implements projections.Snapshot.
func (s viewSnapshot) StatusRowsList(ctx context.Context, table string) (projections.Rows[projections.StatusRow], error) {
	return openCursor(ctx, s.tx, "verify_rows", fmt.Sprintf(statusRowsList, ident(table)), scanStatus)
}

// DLQRowsList implements projections.Snapshot.
func (s viewSnapshot) DLQRowsList(ctx context.Context, table string) (projections.Rows[projections.DLQRow], error) {
	return openCursor(ctx, s.tx, "verify_rows", fmt.Sprintf(dlqRowsList, ident(table)), scanDLQ)
}

// StreamsUpTo implements projections.Snapshot. ORDER BY names the table's columns: a bare
// delivery_id would be the text output column, sorted instead of read from the index. The
// position is formatted into the text because cursors take no parameters; it is two integers.
// The streams of a segment that is archiving are left out as the views' rows of its range are
// (between the segment's record and its partition's detach they are still in the log).
func (s viewSnapshot) StreamsUpTo(ctx context.Context, upTo projections.LogPosition) (projections.Rows[domain.Event], error) {
	query := fmt.Sprintf(`SELECT delivery_id::text, tenant, version, type, data, recorded_at FROM events
WHERE (transaction_id, position) <= ('%d'::xid8, %d) AND NOT EXISTS (%s)
ORDER BY events.delivery_id, events.version`, upTo.TransactionID, upTo.Position, segmentHolding("events.delivery_id"))
	return openCursor(ctx, s.tx, "verify_streams", query, scanStreamEvent)
}

// CountersList implements projections.Snapshot.
func (s viewSnapshot) CountersList(ctx context.Context, table string) ([]projections.CountRow, error) {
	rows, err := s.tx.Query(ctx, fmt.Sprintf(countersList, ident(table)))
	if err != nil {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[projections.CountRow])
}

// ArchivedCounters implements projections.Snapshot.
func (s viewSnapshot) ArchivedCounters(ctx context.Context) ([]projections.CountRow, error) {
	return archivedCounters(ctx, s.tx)
}

// cursorChunk is how many rows a cursor fetches at a time.
const cursorChunk = 2000

// cursor reads a query's rows in chunks through a server-side cursor. Verify reads a view and the
// log side by side in one transaction; a connection serves one result set at a time, and holding
// either side in memory would not scale with the log, so each side is a cursor.
type cursor[T any] struct {
	tx   pgx.Tx
	name string
	scan func(pgx.CollectableRow) (T, error)
	buf  []T
	done bool
}

// openCursor declares a cursor named name for query (which must not take parameters).
func openCursor[T any](ctx context.Context, tx pgx.Tx, name, query string, scan func(pgx.CollectableRow) (T, error)) (*cursor[T], error) {
	if _, err := tx.Exec(ctx, `DECLARE `+name+` NO SCROLL CURSOR FOR `+query); err != nil {
		return nil, fmt.Errorf("declare cursor %s: %w", name, err)
	}
	return &cursor[T]{tx: tx, name: name, scan: scan}, nil
}

// Next implements projections.Rows.
func (c *cursor[T]) Next(ctx context.Context) (row T, ok bool, err error) {
	if len(c.buf) == 0 && !c.done {
		// Describe each time rather than cache by text: the same FETCH names cursors of other
		// shapes in other transactions on this connection.
		rows, err := c.tx.Query(ctx, fmt.Sprintf(`FETCH FORWARD %d FROM %s`, cursorChunk, c.name), pgx.QueryExecModeDescribeExec)
		if err != nil {
			return row, false, fmt.Errorf("fetch from %s: %w", c.name, err)
		}
		c.buf, err = pgx.CollectRows(rows, c.scan)
		if err != nil {
			return row, false, fmt.Errorf("fetch from %s: %w", c.name, err)
		}
		c.done = len(c.buf) < cursorChunk
	}
	if len(c.buf) == 0 {
		return row, false, nil
	}
	row, c.buf = c.buf[0], c.buf[1:]
	return row, true, nil
}

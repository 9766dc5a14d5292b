package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
	"github.com/deliveryledger/ledger/retention"
)

// RetentionStore is the retention pass's hot store: the partitions of `events`, and the tables
// whose partitions follow them out (followerTables).
type RetentionStore struct {
	pool *pgxpool.Pool
}

var _ retention.Store = (*RetentionStore)(nil)

// NewRetentionStore returns the retention pass's store over pool.
func NewRetentionStore(pool *pgxpool.Pool) *RetentionStore { return &RetentionStore{pool: pool} }

// historyTable is the partitioned history; followerTables hold rows of the deliveries of a time
// range (their views, their payloads, their accept answers) and leave once no partition of the
// history overlaps their range.
const historyTable = "events"

var followerTables = []string{"status_view", "dlq_view", "notification_payloads", "accept_requests"}

// detachedOf lists tables named as partitions of the history that are no partition of it: a
// pass detached them and did not finish.
const detachedOf = `SELECT c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
  AND c.relname ~ ('^' || $1 || '_p[0-9]+_[0-9]+$')`

// Partitions lists the history's partitions, oldest first, with those a pass left detached.
func (s *RetentionStore) Partitions(ctx context.Context) ([]retention.Partition, error) {
	attached, err := Partitions(ctx, s.pool, historyTable)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, detachedOf, historyTable)
	if err != nil {
		return nil, fmt.Errorf("list detached partitions: %w", err)
	}
	detached, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list detached partitions: %w", err)
	}
	var out []retention.Partition
	for _, n := range detached {
		if p, ok := partitionOfName(historyTable, n); ok {
			out = append(out, retention.Partition{Name: p.Name, From: p.From, To: p.To, Detached: true})
		}
	}
	for _, p := range attached {
		out = append(out, retention.Partition{Name: p.Name, From: p.From, To: p.To})
	}
	slices.SortFunc(out, func(a, b retention.Partition) int { return a.To.Compare(b.To) })
	return out, nil
}

// The retention lock keeps retention passes of several processes apart. It is named after the
// schema, as the rebuild lock is: the ledgers (and the tests) of other schemas of the database
// have partitions of their own, and a pass of one must not make another's skip its round.
const (
	retentionLock   = `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/retention', 0))`
	retentionUnlock = `SELECT pg_advisory_unlock(hashtextextended(current_schema() || '/retention', 0))`
)

// Exclusive runs fn holding the retention lock, on a connection of its own, or reports false.
func (s *RetentionStore) Exclusive(ctx context.Context, fn func() error) (bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("retention lock: %w", err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, retentionLock).Scan(&got); err != nil || !got {
		return false, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), retentionUnlock) //nolint:errcheck
	return true, fn()
}

// Tenants counts the partition's deliveries per tenant, and those whose latest event that says
// a state does not end them.
func (s *RetentionStore) Tenants(ctx context.Context, p retention.Partition, terminal []domain.EventType) ([]retention.TenantCount, error) {
	q := `SELECT tenant, count(*), count(*) FILTER (WHERE NOT (type = ANY ($1::text[]))) FROM (
	SELECT DISTINCT ON (delivery_id) tenant, type FROM ` + pgx.Identifier{p.Name}.Sanitize() + `
	WHERE type <> $2 ORDER BY delivery_id, version DESC) s GROUP BY tenant ORDER BY tenant`
	rows, err := s.pool.Query(ctx, q, typeNames(terminal), string(domain.EventReceiptRecorded))
	if err != nil {
		return nil, fmt.Errorf("count partition %s: %w", p.Name, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (retention.TenantCount, error) {
		var c retention.TenantCount
		return c, r.Scan(&c.Tenant, &c.Deliveries, &c.Open)
	})
	if err != nil {
		return nil, fmt.Errorf("count partition %s: %w", p.Name, err)
	}
	return out, nil
}

func typeNames(ts []domain.EventType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

const segmentBegin = `INSERT INTO archive_segments (id, state, from_at, to_at, tenants) VALUES ($1, 'archiving', $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET tenants = EXCLUDED.tenants WHERE archive_segments.state = 'archiving'`

// countersRebuildGet finds a rebuild of the counters in progress (its shadow's checkpoint, from
// its start to its switch, or left by an interrupted one).
const countersRebuildGet = `SELECT EXISTS (SELECT 1 FROM projection_checkpoints WHERE name = $1)`

// Begin records the partition's segment as archiving, unless a rebuild of the counters is in
// progress: its shadow was seeded with the segments archived before it started and folds the
// log from its start, so a partition leaving under it would leave some of its events folded
// and none of its counts. The segments' lock (views.go) orders the two.
func (s *RetentionStore) Begin(ctx context.Context, p retention.Partition, tenants []string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, segmentsLock); err != nil {
			return err
		}
		var rebuilding bool
		if err := tx.QueryRow(ctx, countersRebuildGet, projections.NameCounters+".rebuild").Scan(&rebuilding); err != nil {
			return err
		}
		if rebuilding {
			return retention.ErrRebuilding
		}
		_, err := tx.Exec(ctx, segmentBegin, p.Name, nullTime(p.From), p.To, tenants)
		return err
	})
	if err != nil {
		return fmt.Errorf("begin segment %s: %w", p.Name, err)
	}
	return nil
}

// Detach takes the partition out of the history with DETACH ... CONCURRENTLY, which waits for
// the transactions that may use it but takes no lock that writes wait for; a detach a crash
// left pending is finished.
func (s *RetentionStore) Detach(ctx context.Context, p retention.Partition) error {
	return detachPartition(ctx, s.pool, historyTable, p.Name)
}

const detachState = `SELECT i.inhdetachpending FROM pg_inherits i
WHERE i.inhrelid = to_regclass($1) AND i.inhparent = to_regclass($2)`

// detachPartition detaches name from table, if it is attached, and finishes a pending detach.
func detachPartition(ctx context.Context, pool *pgxpool.Pool, table, name string) error {
	var pending bool
	switch err := pool.QueryRow(ctx, detachState, name, table).Scan(&pending); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // not attached
	case err != nil:
		return fmt.Errorf("detach %s: %w", name, err)
	}
	sql := `ALTER TABLE ` + pgx.Identifier{table}.Sanitize() + ` DETACH PARTITION ` + pgx.Identifier{name}.Sanitize()
	if pending {
		sql += ` FINALIZE`
	} else {
		sql += ` CONCURRENTLY`
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		return fmt.Errorf("detach %s: %w", name, err)
	}
	return nil
}

// Reattach attaches the partition again and forgets its segment.
func (s *RetentionStore) Reattach(ctx context.Context, p retention.Partition) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var attached bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1))`, p.Name).Scan(&attached); err != nil {
			return err
		}
		if !attached {
			sql := `ALTER TABLE ` + pgx.Identifier{historyTable}.Sanitize() + ` ATTACH PARTITION ` + pgx.Identifier{p.Name}.Sanitize() +
				` FOR VALUES FROM (` + partitionBound(KeyDeliveryID, p.From) + `) TO (` + partitionBound(KeyDeliveryID, p.To) + `)`
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("attach %s again: %w", p.Name, err)
			}
		}
		_, err := tx.Exec(ctx, `DELETE FROM archive_segments WHERE id = $1 AND state = 'archiving'`, p.Name)
		return err
	})
}

// Events streams the detached partition's events in log order, accepted events with their
// payload, as `ledger export` writes them.
func (s *RetentionStore) Events(ctx context.Context, p retention.Partition, emit func(projections.LoggedEvent) error) error {
	rows, err := s.pool.Query(ctx, exportOf(pgx.Identifier{p.Name}.Sanitize()))
	if err != nil {
		return fmt.Errorf("read partition %s: %w", p.Name, err)
	}
	defer rows.Close()
	for rows.Next() {
		le, err := scanLogged(rows)
		if err != nil {
			return fmt.Errorf("read partition %s: %w", p.Name, err)
		}
		if err := emit(le); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Counters sums what leaves with the partition per (tenant, channel, state): the deliveries
// that end there (their latest event that says a state) and every transition into it (an event
// of a type in keeping is none).
func (s *RetentionStore) Counters(ctx context.Context, p retention.Partition, states func(domain.EventType) (domain.State, bool), keeping []domain.EventType) ([]retention.Counter, error) {
	name := pgx.Identifier{p.Name}.Sanitize()
	q := `WITH acc AS (SELECT delivery_id, tenant, data->>'channel' AS channel FROM ` + name + ` WHERE version = 1),
last AS (SELECT DISTINCT ON (delivery_id) delivery_id, type FROM ` + name + ` WHERE type <> $1 ORDER BY delivery_id, version DESC)
SELECT a.tenant, a.channel, e.type, count(*), 0::bigint FROM ` + name + ` e JOIN acc a USING (delivery_id)
WHERE e.type <> $1 AND e.type <> ALL ($2::text[]) GROUP BY 1, 2, 3
UNION ALL
SELECT a.tenant, a.channel, l.type, 0::bigint, count(*) FROM last l JOIN acc a USING (delivery_id) GROUP BY 1, 2, 3`
	rows, err := s.pool.Query(ctx, q, string(domain.EventReceiptRecorded), typeNames(keeping))
	if err != nil {
		return nil, fmt.Errorf("count partition %s: %w", p.Name, err)
	}
	type key struct{ tenant, channel, state string }
	sums := map[key]*retention.Counter{}
	var order []key
	var tenant, channel, typ string
	var entered, ended int64
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &channel, &typ, &entered, &ended}, func() error {
		st, ok := states(domain.EventType(typ))
		if !ok {
			return fmt.Errorf("event type %q leads to no single state", typ)
		}
		k := key{tenant, channel, string(st)}
		c := sums[k]
		if c == nil {
			c = &retention.Counter{Tenant: tenant, Channel: channel, State: string(st)}
			sums[k] = c
			order = append(order, k)
		}
		c.Entered += entered
		c.Deliveries += ended
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count partition %s: %w", p.Name, err)
	}
	out := make([]retention.Counter, 0, len(order))
	for _, k := range order {
		out = append(out, *sums[k])
	}
	return out, nil
}

// payloadsExpire deletes the bodies of payloads accepted before $1 whose deliveries are all
// terminal in the status view (a notification's deliveries carry its accept's millisecond, so
// they are one range of its key), keeping their SHA-256 and size.
const payloadsExpire = `WITH due AS (
	SELECT p.notification_id, p.accepted_at FROM notification_payloads p
	WHERE p.payload IS NOT NULL AND p.accepted_at < $1
	  AND ($2 = '' OR p.tenant = $2) AND p.tenant <> ALL ($3::text[])
	  AND NOT EXISTS (SELECT 1 FROM status_view s
		WHERE s.id >= ledger_delivery_floor(p.accepted_at)
		  AND s.id < ledger_delivery_floor(p.accepted_at + interval '1 millisecond')
		  AND s.tenant = p.tenant AND s.notification_id = p.notification_id AND s.terminal_at IS NULL)
	ORDER BY p.accepted_at LIMIT $4)
UPDATE notification_payloads p SET size = octet_length(p.payload::text), payload = NULL, expired_at = now()
FROM due WHERE p.notification_id = due.notification_id AND p.accepted_at = due.accepted_at`

// ExpirePayloads deletes the bodies of up to limit payloads past their period.
func (s *RetentionStore) ExpirePayloads(ctx context.Context, tenant string, except []string, before time.Time, limit int) (int64, error) {
	if except == nil {
		except = []string{}
	}
	tag, err := s.pool.Exec(ctx, payloadsExpire, before, tenant, except, limit)
	if err != nil {
		return 0, fmt.Errorf("expire payloads: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Applied reports whether the live views' checkpoints are at or past the last event of the
// partition in the log order (a rebuild's shadow catches up from the log it can still read, and
// its counters from the archived segments).
func (s *RetentionStore) Applied(ctx context.Context, p retention.Partition) (bool, error) {
	q := `WITH last AS (SELECT transaction_id, position FROM ` + pgx.Identifier{p.Name}.Sanitize() + `
	ORDER BY transaction_id DESC, position DESC LIMIT 1)
SELECT NOT EXISTS (SELECT 1 FROM last, projection_checkpoints c
	WHERE c.name IN ('status', 'dlq', 'counters') AND (c.transaction_id, c.position) < (last.transaction_id, last.position))`
	var ok bool
	if err := s.pool.QueryRow(ctx, q).Scan(&ok); err != nil {
		return false, fmt.Errorf("projections of partition %s: %w", p.Name, err)
	}
	return ok, nil
}

// DropEmpty drops a detached partition that holds no event, and its segment row.
func (s *RetentionStore) DropEmpty(ctx context.Context, p retention.Partition) error {
	name := pgx.Identifier{p.Name}.Sanitize()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var any bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+name+`)`).Scan(&any); err != nil {
			return err
		}
		if any {
			return fmt.Errorf("partition %s is not empty", p.Name)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM archive_segments WHERE id = $1 AND state = 'archiving'`, p.Name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DROP TABLE `+name)
		return err
	})
	if err != nil {
		return fmt.Errorf("drop empty partition %s: %w", p.Name, err)
	}
	_, err = s.DropFollowers(ctx)
	return err
}

const segmentFinish = `UPDATE archive_segments SET state = 'archived', manifest = $2, counters = $3,
	deliveries = $4, events = $5, archived_at = now()
WHERE id = $1 AND state = 'archiving'`

// Finish checks the partition's rows against the manifest once more (their count), records the
// segment archived and drops the partition in one transaction, then drops what follows it out.
func (s *RetentionStore) Finish(ctx context.Context, p retention.Partition, m retention.Archived, counters []retention.Counter) error {
	name := pgx.Identifier{p.Name}.Sanitize()
	manifest := m.Manifest
	counts, err := json.Marshal(counters)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var events, deliveries int64
		if err := tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE version = 1) FROM `+name).Scan(&events, &deliveries); err != nil {
			return err
		}
		if events != m.Events || deliveries != m.Deliveries {
			return fmt.Errorf("%w: partition %s holds %d events of %d deliveries, the archive %d of %d",
				retention.ErrCheckFailed, p.Name, events, deliveries, m.Events, m.Deliveries)
		}
		tag, err := tx.Exec(ctx, segmentFinish, p.Name, manifest, counts, deliveries, events)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("segment %s is not archiving", p.Name)
		}
		_, err = tx.Exec(ctx, `DROP TABLE `+name)
		return err
	})
	if err != nil {
		return fmt.Errorf("finish segment %s: %w", p.Name, err)
	}
	_, err = s.DropFollowers(ctx)
	return err
}

// DropFollowers detaches and drops the partitions of the follower tables that no partition of
// the history overlaps any more (their deliveries all left), and returns how many. The views'
// partitions wait until every projection has applied the events that left: the projector may
// still write a row there.
func (s *RetentionStore) DropFollowers(ctx context.Context) (int, error) {
	history, err := s.Partitions(ctx)
	if err != nil {
		return 0, err
	}
	if len(history) == 0 {
		return 0, nil
	}
	dropped := 0
	for _, table := range followerTables {
		if !isPartitioned(table) {
			continue
		}
		parts, err := Partitions(ctx, s.pool, table)
		if err != nil {
			return dropped, err
		}
		for _, f := range parts {
			// Only what lies wholly before the oldest partition still in the history: its
			// deliveries all left (a range between two live partitions waits for the older).
			if history[0].From.IsZero() || f.To.After(history[0].From) {
				continue
			}
			if err := detachPartition(ctx, s.pool, table, f.Name); err != nil {
				return dropped, err
			}
			if _, err := s.pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{f.Name}.Sanitize()); err != nil {
				return dropped, fmt.Errorf("drop %s: %w", f.Name, err)
			}
			dropped++
		}
	}
	return dropped, nil
}

func isPartitioned(table string) bool {
	for _, t := range partitionedTables {
		if t.Name == table {
			return true
		}
	}
	return false
}

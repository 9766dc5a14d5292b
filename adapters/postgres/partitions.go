package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The tables that grow with deliveries are range-partitioned by time, so that what leaves the hot
// store leaves by dropping a partition (no row-by-row DELETE, no bloat) and what stays is found
// in the partitions of its time. The ledger creates the partitions itself, ahead of the clock
// (EnsurePartitions), rather than through pg_partman: docs/design.md, "Time partitions".
//
// A partition is named after its bounds, <table>_p<from>_<to> in Unix seconds (from 0 for the
// first partition, which holds everything before the table was partitioned): the names are the
// ledger's record of the bounds, read back by Partitions, and sort by time within a table.

// PartitionKey says what the key of a partitioned table holds.
type PartitionKey int

const (
	// KeyDeliveryID is a delivery id: a version 7 UUID whose first 48 bits are the delivery's
	// accept time in Unix milliseconds (commands.DeliveryID). Every row of a delivery (its events,
	// its status row) then lives in the partition of its accept time, and a partition holds whole
	// histories.
	KeyDeliveryID PartitionKey = iota
	// KeyTime is a timestamptz.
	KeyTime
	// KeyTimestamp is a timestamp without time zone holding UTC (the outbox's created_at).
	KeyTimestamp
)

// PartitionedTable is one table range-partitioned by time.
type PartitionedTable struct {
	Name string
	Key  PartitionKey
	// Width, when set, is the widest this table's partitions are, in place of a wider
	// PartitionConfig.Width (a narrower one applies; the default ahead follows the width in
	// use): a table whose rows leave in minutes (the outbox) need not keep the partitions of
	// the retention's days, and follows the retention's partitions when they are narrower.
	Width time.Duration
}

// config is cfg as it applies to t.
func (t PartitionedTable) config(cfg PartitionConfig) PartitionConfig {
	if t.Width > 0 && t.Width < cfg.Width {
		cfg.Width = t.Width
	}
	return cfg
}

// partitionedTables lists every table that migrations create range-partitioned by time, in the
// order EnsurePartitions creates their partitions.
var partitionedTables []PartitionedTable

// Partition is one partition of a partitioned table: the rows whose key's time is in [From, To).
// A zero From is the open lower bound (MINVALUE).
type Partition struct {
	Table string
	Name  string
	From  time.Time
	To    time.Time
}

// DefaultPartitionWidth is the time one partition covers when the configuration names none
// (retention.partition).
const DefaultPartitionWidth = 24 * time.Hour

// PartitionConfig says how partitions are cut.
type PartitionConfig struct {
	// Width is the time one partition covers; boundaries fall on multiples of it since the Unix
	// epoch. A whole number of milliseconds, at least one second.
	Width time.Duration
	// Ahead is how far past now partitions exist. Zero: the default, three widths and half a
	// minute more, so that a missed maintenance round or two never leaves a write without its
	// partition (the maintenance runs every quarter width, at most a minute apart; a round held
	// up by a lock gives up after lock_timeout, 5 s), and seconds-wide partitions (tests,
	// compressed time) are not created by the hundred. Each empty partition ahead costs a page
	// or two for each of its table's indexes: with thirty of them ahead, as an hour's rule had
	// at widths of seconds, the partitions ahead held a sixth of the hot store's bytes in the
	// retention benchmark (5.4 MB against 27 MB of history).
	Ahead time.Duration
}

// Validate reports what is wrong with c.
func (c PartitionConfig) Validate() error {
	var errs []error
	if c.Width < time.Second || c.Width%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("partition width %s: want a whole number of milliseconds, at least 1s", c.Width))
	}
	if c.Ahead < 0 {
		errs = append(errs, fmt.Errorf("partitions ahead %s: want zero (the default) or more", c.Ahead))
	}
	return errors.Join(errs...)
}

func (c PartitionConfig) ahead() time.Duration {
	if c.Ahead > 0 {
		return c.Ahead
	}
	return 3*c.Width + 30*time.Second
}

// partitionFloor is the boundary at or before t.
func partitionFloor(t time.Time, width time.Duration) time.Time {
	ms, w := t.UnixMilli(), width.Milliseconds()
	return time.UnixMilli(ms - ((ms%w)+w)%w).UTC()
}

// partitionName is the name of table's partition [from, to).
func partitionName(table string, from, to time.Time) string {
	var f int64
	if !from.IsZero() {
		f = from.Unix()
	}
	return fmt.Sprintf("%s_p%d_%d", table, f, to.Unix())
}

// partitionBound is the literal of time t as a bound of a key; a zero t is MINVALUE.
func partitionBound(key PartitionKey, t time.Time) string {
	if t.IsZero() {
		return "MINVALUE"
	}
	switch key {
	case KeyDeliveryID:
		return "'" + UUIDv7Floor(t) + "'"
	case KeyTime:
		return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "+00'"
	default:
		return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "'"
	}
}

// UUIDv7Floor is the least version 7 UUID of millisecond t: every delivery id accepted at or
// after t is at least this.
func UUIDv7Floor(t time.Time) string {
	ms := uint64(t.UnixMilli())
	return fmt.Sprintf("%08x-%04x-0000-0000-000000000000", ms>>16, ms&0xffff)
}

// UUIDv7Time is the time in the first 48 bits of a version 7 UUID (a delivery id), and whether
// id is one.
func UUIDv7Time(id string) (time.Time, bool) {
	if len(id) != 36 || id[14] != '7' {
		return time.Time{}, false
	}
	hi, err1 := strconv.ParseUint(id[0:8], 16, 64)
	lo, err2 := strconv.ParseUint(id[9:13], 16, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(hi<<16 | lo)).UTC(), true
}

const partitionsList = `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1)`

// Partitions lists table's partitions, ordered by time. Partitions whose names the ledger did not
// give are left out.
func Partitions(ctx context.Context, q Querier, table string) ([]Partition, error) {
	rows, err := q.Query(ctx, partitionsList, table)
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", table, err)
	}
	var out []Partition
	for _, n := range names {
		p, ok := partitionOfName(table, n)
		if !ok {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Partition) int { return a.To.Compare(b.To) })
	return out, nil
}

// partitionNamePattern is a partition's name: <table>_p<from>_<to>.
var partitionNamePattern = regexp.MustCompile(`^(.+)_p(\d+)_(\d+)$`)

// partitionOfName reads a partition's bounds from its name.
func partitionOfName(table, name string) (Partition, bool) {
	m := partitionNamePattern.FindStringSubmatch(name)
	if m == nil || m[1] != table {
		return Partition{}, false
	}
	from, _ := strconv.ParseInt(m[2], 10, 64)
	to, _ := strconv.ParseInt(m[3], 10, 64)
	p := Partition{Table: table, Name: name, To: time.Unix(to, 0).UTC()}
	if from > 0 {
		p.From = time.Unix(from, 0).UTC()
	}
	return p, true
}

// Querier is what reads need of a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// partitionLock is the key of the advisory lock that serialises partition maintenance across
// processes (and a view's rebuild switch, and the outbox's rotation): one per schema, so that
// deployments and tests sharing a database do not wait on each other.
const partitionLock = `hashtextextended(current_schema() || ':ledger partitions', 0)`

// EnsurePartitions creates, for every partitioned table, the partitions of cfg.Width that cover
// the time from the table's last partition (or from now's boundary, for a table with none) to
// now plus cfg.Ahead, and returns them. Boundaries fall on multiples of the width, but for the
// first partition after a bound that does not (a changed width, the migration's first
// partition), which ends at the next multiple. Every process that writes may call it: one
// advisory lock makes them take turns, and a round that finds the partitions there creates
// nothing. Each partition is created apart and attached (SHARE UPDATE EXCLUSIVE on the parent,
// which writes do not wait for), not created as PARTITION OF (ACCESS EXCLUSIVE), and a lock not
// had within lock_timeout fails the round, to be tried again, rather than queue writes behind it.
// The shadow of a rebuild in progress of a table gets the same partitions (partitions_views.go).
func EnsurePartitions(ctx context.Context, pool *pgxpool.Pool, cfg PartitionConfig, now time.Time) ([]Partition, error) {
	return EnsurePartitionsOf(ctx, pool, partitionedTables, cfg, now)
}

// EnsurePartitionsOf is EnsurePartitions for the given tables.
func EnsurePartitionsOf(ctx context.Context, pool *pgxpool.Pool, tables []PartitionedTable, cfg PartitionConfig, now time.Time) ([]Partition, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, t := range tables {
		if err := t.config(cfg).Validate(); err != nil {
			return nil, fmt.Errorf("partitions of %s: %w", t.Name, err)
		}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("ensure partitions: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(`+partitionLock+`)`); err != nil {
		return nil, fmt.Errorf("ensure partitions: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(`+partitionLock+`)`) //nolint:errcheck
	// A view being rebuilt has a shadow partitioned like it: cut its partitions too, or the
	// rebuild's catch-up meets a row with no partition.
	shadows, err := shadowsOf(ctx, conn, tables)
	if err != nil {
		return nil, fmt.Errorf("ensure partitions: %w", err)
	}
	var created []Partition
	for _, t := range append(slices.Clip(tables), shadows...) {
		cfg := t.config(cfg)
		until := now.Add(cfg.ahead())
		have, err := Partitions(ctx, conn, t.Name)
		if err != nil {
			return created, fmt.Errorf("ensure partitions: %w", err)
		}
		from := partitionFloor(now, cfg.Width)
		if len(have) > 0 {
			from = have[len(have)-1].To
		}
		for from.Before(until) {
			to := partitionFloor(from, cfg.Width).Add(cfg.Width)
			p := Partition{Table: t.Name, Name: partitionName(t.Name, from, to), From: from, To: to}
			// One transaction per partition: its locks (the table, its indexes, the parent's)
			// end with it, however many partitions a round creates.
			if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
					return err
				}
				return attachPartition(ctx, tx, t, p)
			}); err != nil {
				return created, fmt.Errorf("ensure partitions: %w", err)
			}
			created = append(created, p)
			from = to
		}
	}
	return created, nil
}

// attachPartition creates p as a table of its own and attaches it to its parent. ATTACH builds
// the parent's indexes on it (it is empty, so at once).
func attachPartition(ctx context.Context, tx pgx.Tx, t PartitionedTable, p Partition) error {
	name, parent := pgx.Identifier{p.Name}.Sanitize(), pgx.Identifier{t.Name}.Sanitize()
	create := `CREATE TABLE ` + name + ` (LIKE ` + parent + ` INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)`
	attach := `ALTER TABLE ` + parent + ` ATTACH PARTITION ` + name +
		` FOR VALUES FROM (` + partitionBound(t.Key, p.From) + `) TO (` + partitionBound(t.Key, p.To) + `)`
	for _, sql := range []string{create, attach} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("partition %s: %w", p.Name, err)
		}
	}
	return nil
}

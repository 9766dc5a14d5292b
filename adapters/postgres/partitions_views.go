package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/projections"
)

// The status and DLQ views are partitioned by delivery id (migration 0020), so that a delivery's
// row sits in the partition of its accept time, beside its events, and goes when the retention
// pass drops the partition. The counters view is per tenant and whole-life: one table.
func init() {
	partitionedTables = append(partitionedTables,
		PartitionedTable{Name: "status_view", Key: KeyDeliveryID},
		PartitionedTable{Name: "dlq_view", Key: KeyDeliveryID},
	)
}

// A rebuild's shadow of a partitioned view is partitioned the same way: its parent is created
// PARTITION BY the live parent's key, with one partition per live partition, of the same bounds,
// named <shadow>_p<from>_<to>. Two things keep the two sets equal until the switch:
// EnsurePartitions cuts each partition it adds to a live view in the view's shadow too, when one
// exists (shadowsOf), so that the catch-up never meets a row without a partition; and the switch,
// holding the partitions' advisory lock and the live table, adds to the shadow any live partition
// it still lacks (a shadow made while a round was committing) and drops those the live view no
// longer has (dropped by retention), before it renames parent and partitions into place.

// Catalog statements of partitioned shadows.
const (
	// tablePartitionKeyGet is the PARTITION BY clause of a partitioned table, '' for another.
	tablePartitionKeyGet = `SELECT coalesce(pg_get_partkeydef(to_regclass($1)), '')`
	// partitionsBoundsList lists a table's partitions with their bounds' text (FOR VALUES ...).
	partitionsBoundsList = `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass($1) ORDER BY c.relname`
	// partitionIndexesList maps each index of a partition to the index of its parent it is a
	// partition of.
	partitionIndexesList = `SELECT parent.relname, child.relname FROM pg_index x
JOIN pg_class child ON child.oid = x.indexrelid
JOIN pg_inherits i ON i.inhrelid = x.indexrelid
JOIN pg_class parent ON parent.oid = i.inhparent
WHERE x.indrelid = to_regclass($1)`
)

// shadowsOf returns the shadows of a rebuild in progress of the tables, as tables to partition
// like them: a shadow exists between a rebuild's start and its switch.
func shadowsOf(ctx context.Context, tx interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, tables []PartitionedTable) ([]PartitionedTable, error) {
	var out []PartitionedTable
	for _, t := range tables {
		shadow := projections.ShadowTable(t.Name)
		var key string
		if err := tx.QueryRow(ctx, tablePartitionKeyGet, shadow).Scan(&key); err != nil {
			return nil, fmt.Errorf("partition key of %s: %w", shadow, err)
		}
		if key != "" {
			out = append(out, PartitionedTable{Name: shadow, Key: t.Key, Width: t.Width})
		}
	}
	return out, nil
}

// indexPair is an index of a partition and the index of the parent it belongs to.
type indexPair struct{ Parent, Child string }

// boundedPartition is a partition as the catalog records it: its name and its bounds' text.
type boundedPartition struct{ Name, Bound string }

func partitionsWithBounds(ctx context.Context, tx pgx.Tx, table string) ([]boundedPartition, error) {
	rows, err := tx.Query(ctx, partitionsBoundsList, table)
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", table, err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[boundedPartition])
}

// renamedPartition is the name a live partition's counterpart in a shadow has: the live table's
// name as prefix is replaced by the shadow's.
func renamedPartition(name, from, to string) (string, bool) {
	rest, ok := strings.CutPrefix(name, from)
	if !ok {
		return "", false
	}
	return to + rest, true
}

// shadowPartitionsCreate gives a partitioned shadow, just created LIKE the live table, the live
// table's partition key and one partition per live partition, by the same bounds. It holds the
// partitions' advisory lock, so that no EnsurePartitions round adds a live partition meanwhile.
func shadowPartitionsCreate(ctx context.Context, tx pgx.Tx, live, shadow string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+partitionLock+`)`); err != nil {
		return err
	}
	parts, err := partitionsWithBounds(ctx, tx, live)
	if err != nil {
		return err
	}
	for _, p := range parts {
		name, ok := renamedPartition(p.Name, live, shadow)
		if !ok {
			return fmt.Errorf("partition %s of %s is not named after its table", p.Name, live)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE `+ident(name)+` PARTITION OF `+ident(shadow)+` `+p.Bound); err != nil {
			return fmt.Errorf("shadow partition %s: %w", name, err)
		}
	}
	return nil
}

// shadowPartitionsSwitch is the switch of a partitioned shadow, in the transaction that holds the
// live table in ACCESS EXCLUSIVE mode and the partitions' advisory lock: it makes the shadow's
// partitions those of the live table, drops the live table, and renames the shadow, its
// partitions, and their indexes to the live names, so that Partitions and the retention pass read
// the same names and bounds as before and a later rebuild finds the names it expects.
func shadowPartitionsSwitch(ctx context.Context, tx pgx.Tx, live, shadow string) error {
	liveParts, err := partitionsWithBounds(ctx, tx, live)
	if err != nil {
		return err
	}
	shadowParts, err := partitionsWithBounds(ctx, tx, shadow)
	if err != nil {
		return err
	}
	want := map[string]string{} // shadow partition name -> bound
	for _, p := range liveParts {
		name, ok := renamedPartition(p.Name, live, shadow)
		if !ok {
			return fmt.Errorf("partition %s of %s is not named after its table", p.Name, live)
		}
		want[name] = p.Bound
	}
	for _, p := range shadowParts {
		if _, ok := want[p.Name]; ok {
			delete(want, p.Name)
			continue
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+ident(p.Name)); err != nil {
			return fmt.Errorf("drop shadow partition %s: %w", p.Name, err)
		}
	}
	for name, bound := range want {
		if _, err := tx.Exec(ctx, `CREATE TABLE `+ident(name)+` PARTITION OF `+ident(shadow)+` `+bound); err != nil {
			return fmt.Errorf("shadow partition %s: %w", name, err)
		}
	}
	// The names the live partitions' indexes have (PostgreSQL's, cut to 63 bytes its own way),
	// by partition and by the parent index they belong to, to give them back.
	indexNames := map[[2]string]string{}
	for _, p := range liveParts {
		rows, err := tx.Query(ctx, partitionIndexesList, p.Name)
		if err != nil {
			return fmt.Errorf("indexes of %s: %w", p.Name, err)
		}
		pairs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[indexPair])
		if err != nil {
			return fmt.Errorf("indexes of %s: %w", p.Name, err)
		}
		for _, x := range pairs {
			indexNames[[2]string{p.Name, x.Parent}] = x.Child
		}
	}
	for _, stmt := range []string{
		`DROP TABLE ` + ident(live),
		`ALTER TABLE ` + ident(shadow) + ` RENAME TO ` + ident(live),
	} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	if err := renameIndexes(ctx, tx, shadow, live); err != nil {
		return err
	}
	for _, p := range liveParts {
		from, _ := renamedPartition(p.Name, live, shadow)
		if _, err := tx.Exec(ctx, `ALTER TABLE `+ident(from)+` RENAME TO `+ident(p.Name)); err != nil {
			return fmt.Errorf("rename partition %s: %w", from, err)
		}
		rows, err := tx.Query(ctx, partitionIndexesList, p.Name)
		if err != nil {
			return fmt.Errorf("indexes of %s: %w", p.Name, err)
		}
		pairs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[indexPair])
		if err != nil {
			return fmt.Errorf("indexes of %s: %w", p.Name, err)
		}
		for _, x := range pairs {
			name, ok := indexNames[[2]string{p.Name, x.Parent}]
			if !ok || name == x.Child {
				continue
			}
			if _, err := tx.Exec(ctx, `ALTER INDEX `+ident(x.Child)+` RENAME TO `+ident(name)); err != nil {
				return fmt.Errorf("rename index %s: %w", x.Child, err)
			}
		}
	}
	return nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/migrations"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// ErrSchemaBehind is returned by CheckSchema when migrations are pending.
var ErrSchemaBehind = errors.New("database schema is behind: run `ledger migrate`")

var migrationFile = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.(up|down)\.sql$`)

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := migrationFile.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(migrations.FS, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	var out []Migration
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migration %04d_%s lacks its up or down file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration versions must run 1, 2, 3...: found %d at place %d", m.Version, i+1)
		}
	}
	return out, nil
}

const migrationsTableCreate = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`

// migrationLockID serialises concurrent `ledger migrate` runs on one database.
const migrationLockID = 7320144121

// SchemaVersion returns the highest applied migration (0 when none).
func SchemaVersion(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// CheckSchema returns ErrSchemaBehind unless every embedded migration is applied.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := Migrations()
	if err != nil {
		return err
	}
	v, err := SchemaVersion(ctx, pool)
	if err != nil {
		return err
	}
	if want := all[len(all)-1].Version; v < want {
		return fmt.Errorf("%w (at version %d, this binary needs %d)", ErrSchemaBehind, v, want)
	}
	return nil
}

// Migrate moves the schema to version target (-1: the latest), up or down, one transaction per
// migration. It reports each applied step through progress (may be nil) and returns how many
// steps it took.
func Migrate(ctx context.Context, pool *pgxpool.Pool, target int, progress func(string)) (int, error) {
	all, err := Migrations()
	if err != nil {
		return 0, err
	}
	if target < 0 {
		target = all[len(all)-1].Version
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockID); err != nil {
		return 0, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLockID) //nolint:errcheck
	if _, err := conn.Exec(ctx, migrationsTableCreate); err != nil {
		return 0, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return 0, fmt.Errorf("migrate: read version: %w", err)
	}
	steps := 0
	step := func(m Migration, sql, record string, args ...any) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, record, args...); err != nil {
				return fmt.Errorf("record migration %04d: %w", m.Version, err)
			}
			return nil
		})
	}
	for _, m := range all {
		if m.Version <= current || m.Version > target {
			continue
		}
		if err := step(m, m.Up, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return steps, err
		}
		steps++
		if progress != nil {
			progress(fmt.Sprintf("applied %04d_%s", m.Version, m.Name))
		}
	}
	for i := len(all) - 1; i >= 0; i-- {
		m := all[i]
		if m.Version > current || m.Version <= target {
			continue
		}
		if err := step(m, m.Down, `DELETE FROM schema_migrations WHERE version = $1`, m.Version); err != nil {
			return steps, err
		}
		steps++
		if progress != nil {
			progress(fmt.Sprintf("reverted %04d_%s", m.Version, m.Name))
		}
	}
	return steps, nil
}

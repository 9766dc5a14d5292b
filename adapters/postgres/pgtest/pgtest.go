// Package pgtest gives each test its own PostgreSQL schema, migrated to the latest version and
// dropped when the test ends, so tests run in parallel against the real database and leave
// nothing behind.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/adapters/postgres"
)

// DefaultURL is the test database; LEDGER_TEST_DATABASE_URL overrides it.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/ledger_test?sslmode=disable"

// URL returns the test database URL.
func URL() string {
	if u := os.Getenv("LEDGER_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

var ensureOnce sync.Once
var ensureErr error

// ensureDatabase creates the test database if it is missing.
func ensureDatabase(ctx context.Context) error {
	ensureOnce.Do(func() {
		u, err := url.Parse(URL())
		if err != nil {
			ensureErr = err
			return
		}
		name := strings.TrimPrefix(u.Path, "/")
		admin := *u
		admin.Path = "/postgres"
		conn, err := pgx.Connect(ctx, admin.String())
		if err != nil {
			ensureErr = fmt.Errorf("connect to %s: %w", admin.Redacted(), err)
			return
		}
		defer conn.Close(ctx)
		var exists bool
		if err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
			ensureErr = err
			return
		}
		if !exists {
			_, err = conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize())
			if err != nil && !strings.Contains(err.Error(), "already exists") {
				ensureErr = err
			}
		}
	})
	return ensureErr
}

// Schema is one test's database schema.
type Schema struct {
	Name string
	Pool *pgxpool.Pool
	URL  string
}

// New creates a schema, migrates it and registers its removal with t.Cleanup.
func New(t testing.TB) *Schema {
	t.Helper()
	return NewWithPartitions(t, postgres.PartitionConfig{Width: time.Hour})
}

// NewWithPartitions is New with the time partitions cut as cfg says (a test of retention cuts
// them seconds wide).
func NewWithPartitions(t testing.TB, cfg postgres.PartitionConfig) *Schema {
	t.Helper()
	ctx := context.Background()
	if err := ensureDatabase(ctx); err != nil {
		t.Fatalf("test database: %v", err)
	}
	name := "t_" + strings.ReplaceAll(uuid.NewString()[:18], "-", "")
	admin, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Fatalf("connect test database: %v", err)
	}
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+name); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	admin.Close(ctx)
	pool, err := postgres.Connect(ctx, URL(), name, 20)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		conn, err := pgx.Connect(context.Background(), URL())
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), `DROP SCHEMA `+name+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	if _, err := postgres.Migrate(ctx, pool, -1, nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	// Partitions as a process creates them at its start (app's partition maintenance), of a
	// width a test can cross; a test of partitions makes its own.
	if _, err := postgres.EnsurePartitions(ctx, pool, cfg, time.Now()); err != nil {
		t.Fatalf("partitions: %v", err)
	}
	u, _ := url.Parse(URL())
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return &Schema{Name: name, Pool: pool, URL: u.String()}
}

// MigrationVersion is the version of the migration named name (the file's name after its
// number: "short_event_keys"), for a test that migrates to just below or above it.
func MigrationVersion(t testing.TB, name string) int {
	t.Helper()
	all, err := postgres.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.Name == name {
			return m.Version
		}
	}
	t.Fatalf("no migration %s", name)
	return 0
}

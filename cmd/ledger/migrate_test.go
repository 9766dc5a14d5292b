package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// TestMigrateCutsPartitionsOfTheConfiguredWidth: `ledger migrate --config FILE` on a fresh
// schema leaves the partitions ahead of now cut as the file's retention.partition says, so the
// first write finds its partition of that width whatever process comes first.
func TestMigrateCutsPartitionsOfTheConfiguredWidth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := "t_" + strings.ReplaceAll(uuid.NewString()[:18], "-", "")
	admin, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), `DROP SCHEMA `+name+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
		admin.Close(context.Background())
	})
	u, _ := url.Parse(pgtest.URL())
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	file := filepath.Join(t.TempDir(), "ledger.yaml")
	config := "retention: {keep: 6s, partition: 2s, archive_dir: " + filepath.Join(t.TempDir(), "archive") + "}\n" +
		"channels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n"
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := ledgerCmd(t, "migrate", "--database-url="+u.String(), "--config="+file)
	if code != 0 {
		t.Fatalf("migrate: exit %d: %s%s", code, out, errOut)
	}
	if !strings.Contains(out, "partitions:") {
		t.Errorf("migrate says nothing of partitions:\n%s", out)
	}
	pool, err := postgres.Connect(ctx, u.String(), name, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	now := time.Now()
	for _, table := range []string{"events", "notification_payloads", "accept_requests", "status_view"} {
		parts, err := postgres.Partitions(ctx, pool, table)
		if err != nil {
			t.Fatal(err)
		}
		ahead := 0
		for _, p := range parts {
			if p.From.IsZero() {
				continue // the migration's first partition: everything before it ran
			}
			// The partition after the migration's bound ends at the next multiple of the
			// width; every other one is a whole width.
			if w := p.To.Sub(p.From); w > 2*time.Second || p.To.UnixMilli()%2000 != 0 {
				t.Errorf("%s: partition %s is %s wide, want 2s on multiples of 2s", table, p.Name, w)
			}
			if p.To.Sub(p.From) == 2*time.Second && p.To.After(now) {
				ahead++
			}
		}
		if ahead < 3 {
			t.Errorf("%s: %d partitions of 2s ahead of now, want at least 3 (%v)", table, ahead, parts)
		}
	}
}

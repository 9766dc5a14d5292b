package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// rawCommitFor is how long each way of timing the raw single-row commit runs.
const rawCommitFor = 3 * time.Second

// rawCommits is the database's own commit, which the single client's accept is compared with
// (issue 27): one client, each transaction one INSERT of a jsonb row in autocommit.
type rawCommits struct {
	// latencies (ms, sorted) are timed by this process over pgx, on the clock the accepts are
	// timed on.
	latencies []float64
	// pgbenchAverage (ms) is PostgreSQL's pgbench running the same insert, its "latency
	// average"; 0 when this machine has no pgbench. Its per-transaction log is not used: it
	// reads a clock it updates lazily, and logs some commits as taking 0 µs.
	pgbenchAverage float64
}

// rawCommit times single-row commits on a table of its own in schema, for d with pgx and then
// for d with pgbench (when there is one), and drops the table.
func rawCommit(ctx context.Context, dbURL, schema string, d time.Duration) (rawCommits, error) {
	var r rawCommits
	table := pgx.Identifier{schema, "bench_raw_commit"}.Sanitize()
	insert := `INSERT INTO ` + table + ` (data) VALUES ('{"channel":"webhook","payload":{"n":1,"text":"benchmark"}}')`
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return r, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CREATE TABLE `+table+` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, data jsonb NOT NULL)`); err != nil {
		return r, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `DROP TABLE `+table) //nolint:errcheck
	if _, err := conn.Exec(ctx, insert); err != nil {                // prepared, as the ledger's statements are
		return r, err
	}
	var lat latencies
	for end := time.Now().Add(d); time.Now().Before(end); {
		start := time.Now()
		if _, err := conn.Exec(ctx, insert); err != nil {
			return r, err
		}
		lat.add(time.Since(start))
	}
	r.latencies = lat.sorted()
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		return r, nil
	}
	dir, err := os.MkdirTemp("", "ledger-pgbench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "insert.sql")
	if err := os.WriteFile(script, []byte(insert+";\n"), 0o600); err != nil {
		return r, err
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	// -n: no vacuum of pgbench's own tables (there are none); -M prepared, as pgx prepares.
	out, err := exec.CommandContext(ctx, bin, "-n", "-M", "prepared", "-c", "1", "-T", strconv.Itoa(secs), "-f", script, dbURL).CombinedOutput()
	if err != nil {
		return r, fmt.Errorf("pgbench: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if r.pgbenchAverage, err = pgbenchAverage(out); err != nil {
		return r, err
	}
	return r, nil
}

var pgbenchLatency = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)

// pgbenchAverage reads "latency average = X ms" from pgbench's report.
func pgbenchAverage(out []byte) (float64, error) {
	m := pgbenchLatency.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench reported no latency average: %s", strings.TrimSpace(string(out)))
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

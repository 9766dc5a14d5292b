package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// errNoPgbench: the raw commit is timed by PostgreSQL's own pgbench, which this machine lacks.
var errNoPgbench = errors.New("pgbench not found")

// rawCommitFor is how long pgbench times the raw single-row commit.
const rawCommitFor = 5 * time.Second

// rawCommit times the database's own commit, as the single client's accept is compared with
// (issue 27): pgbench, one client, each transaction one INSERT of a jsonb row in autocommit, on
// a table of its own in schema, for d. It returns the transactions' latencies in milliseconds,
// from pgbench's per-transaction log.
func rawCommit(ctx context.Context, dbURL, schema string, d time.Duration) ([]float64, error) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		return nil, errNoPgbench
	}
	table := pgx.Identifier{schema, "bench_raw_commit"}.Sanitize()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `CREATE TABLE `+table+` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, data jsonb NOT NULL)`); err != nil {
		return nil, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `DROP TABLE `+table) //nolint:errcheck
	dir, err := os.MkdirTemp("", "ledger-pgbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "insert.sql")
	body := `INSERT INTO ` + table + ` (data) VALUES ('{"channel":"webhook","payload":{"n":1,"text":"benchmark"}}');` + "\n"
	if err := os.WriteFile(script, []byte(body), 0o600); err != nil {
		return nil, err
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	// -n: no vacuum of pgbench's own tables (there are none); -l: a line per transaction.
	cmd := exec.CommandContext(ctx, bin, "-n", "-c", "1", "-T", strconv.Itoa(secs), "-f", script, "-l", "--log-prefix", filepath.Join(dir, "tx"), dbURL)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgbench: %w: %s", err, strings.TrimSpace(string(out)))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "tx.*"))
	var lat []float64
	for _, path := range logs {
		got, err := pgbenchLatencies(path)
		if err != nil {
			return nil, err
		}
		lat = append(lat, got...)
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("pgbench logged no transaction")
	}
	return lat, nil
}

// pgbenchLatencies reads a pgbench transaction log: "client_id transaction_no time script_no
// time_epoch time_us", time in microseconds.
func pgbenchLatencies(path string) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lat []float64
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 3 {
			continue
		}
		us, err := strconv.ParseFloat(fields[2], 64)
		if err != nil {
			return nil, fmt.Errorf("pgbench log %s: %q: %w", path, s.Text(), err)
		}
		lat = append(lat, us/1000)
	}
	return lat, s.Err()
}

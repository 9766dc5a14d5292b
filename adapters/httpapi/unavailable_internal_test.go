package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
)

// TestLostDatabaseIsServiceUnavailable: a request whose database connection is ended under it
// (the crash soak's pg_terminate_backend, a restart, a failover) is answered 503 with
// Retry-After, to be repeated, not 500 as a bug of the server; the driver's text stays out of
// the answer. The error is the real driver's, from a session really terminated.
func TestLostDatabaseIsServiceUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := pgtest.New(t)
	victim, err := pgx.Connect(ctx, schema.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close(context.Background())
	var pid int
	if err := victim.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	var lost error
	for range 50 { // the termination reaches the session asynchronously
		if _, lost = victim.Exec(ctx, `SELECT 1`); lost != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if lost == nil {
		t.Fatal("the terminated session still answers")
	}
	for _, err := range []error{lost, fmt.Errorf("select replay job deliveries: %w", lost)} {
		p := problemFor(err)
		if p.Status != http.StatusServiceUnavailable {
			t.Errorf("%v: status %d, want 503", err, p.Status)
		}
		if p.Detail == err.Error() {
			t.Errorf("the answer repeats the driver's error: %q", p.Detail)
		}
	}
	if p := problemFor(errors.New("a bug")); p.Status != http.StatusInternalServerError {
		t.Errorf("an unexpected error: status %d, want 500", p.Status)
	}
	if storeUnavailable(context.DeadlineExceeded) {
		t.Errorf("a request's own deadline is taken for a lost database")
	}
}

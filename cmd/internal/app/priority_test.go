package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/domain"
)

// TestHighFloodDoesNotStarveOthers fills the three priority queues while no worker runs, then
// starts a worker whose every call takes the same time. While high-priority work is still
// waiting, normal and low keep completing at about their reserved shares of the slots.
func TestHighFloodDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	cfg := testConfig(t, schema)
	cfg.Roles = "api,relay"
	producer := startApp(t, schema, cfg)

	const high, normal, low = 150, 75, 30
	var mu sync.Mutex
	var calls []string // class of each call, in arrival order
	sink := producer.sink
	sink.script(func(r *http.Request, _ int) (int, http.Header) {
		mu.Lock()
		calls = append(calls, strings.TrimPrefix(r.URL.Path, "/"))
		mu.Unlock()
		time.Sleep(15 * time.Millisecond) // every call holds its worker slot equally long
		return http.StatusOK, nil
	})
	plan := []struct {
		p domain.Priority
		n int
	}{{domain.PriorityHigh, high}, {domain.PriorityNormal, normal}, {domain.PriorityLow, low}}
	for _, c := range plan {
		var rs []map[string]string
		for i := range c.n {
			rs = append(rs, map[string]string{"channel": "webhook", "recipient": fmt.Sprintf("%s/%s?i=%d", sink.URL, c.p, i)})
		}
		resp, body := producer.do(t, "POST", "/v1/notifications", "flood-"+string(c.p), map[string]any{
			"payload": map[string]any{"p": c.p}, "recipients": rs, "priority": c.p,
		})
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("accept %s: %d %s", c.p, resp.StatusCode, body)
		}
	}
	total := high + normal + low
	deadline := time.Now().Add(60 * time.Second)
	for {
		var queued int
		if err := schema.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE type = 'delivery.queued'`).Scan(&queued); err != nil {
			t.Fatal(err)
		}
		if queued == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d deliveries queued", queued, total)
		}
		time.Sleep(20 * time.Millisecond)
	}

	wcfg := cfg
	wcfg.Roles = "worker"
	wcfg.WorkerConcurrency = 10 // reserved: high 6, normal 3, low 1
	wcfg.HostConcurrency = 0    // one sink host: the host cap must not be what limits
	startApp(t, schema, wcfg)

	deadline = time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(calls)
		mu.Unlock()
		if n >= total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d calls arrived", n, total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	// The window in which high-priority work was still waiting: up to its last call.
	lastHigh := 0
	for i, c := range calls {
		if c == "high" {
			lastHigh = i
		}
	}
	window := calls[:lastHigh+1]
	count := map[string]int{}
	for _, c := range window {
		count[c]++
	}
	share := func(c string) float64 { return float64(count[c]) / float64(len(window)) }
	t.Logf("while high was backlogged (%d calls): high %.0f%%, normal %.0f%%, low %.0f%% (reserved 60/30/10)",
		len(window), 100*share("high"), 100*share("normal"), 100*share("low"))
	if share("high") < 0.5 {
		t.Errorf("high got %.0f%% of calls, want at least 50%%", 100*share("high"))
	}
	if share("normal") < 0.2 {
		t.Errorf("normal got %.0f%% of calls while high was flooding, want at least 20%%", 100*share("normal"))
	}
	if share("low") < 0.06 {
		t.Errorf("low got %.0f%% of calls while high was flooding, want at least 6%%", 100*share("low"))
	}
}

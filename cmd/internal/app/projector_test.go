package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// TestServeRunsTheProjector: the projector is one of the default roles, and the read API shows
// what the workers did.
func TestServeRunsTheProjector(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	if !b.app.roles["projector"] {
		t.Fatal("the default roles do not include the projector")
	}
	a := b.notify(t, "projected-1", b.sink.URL+"/hook")
	id := a.Deliveries[0].ID
	b.waitState(t, id, domain.StateDelivered, 20*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, body := b.do(t, "GET", "/v1/deliveries?state=delivered", "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("list: %d %s", resp.StatusCode, body)
		}
		var l struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 1 && l.Items[0].ID == id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status view does not show %s delivered: %s", id, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(b.metricsText(t), `ledger_projection_applied_events_total{projection="status"}`) {
		t.Fatal("metrics lack the projector's counters")
	}
}

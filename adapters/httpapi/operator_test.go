package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// operatorPost POSTs body (none when empty) as the tenant of apiKey.
func (b *bundle) operatorPost(t *testing.T, path, apiKey, body string) resp {
	t.Helper()
	return b.do(t, req{method: http.MethodPost, path: path, apiKey: apiKey, contentType: "application/json", body: body})
}

// history is the event types of a delivery's stream.
func (b *bundle) history(t *testing.T, id string) []domain.EventType {
	t.Helper()
	var h struct {
		Events []struct {
			Type domain.EventType `json:"type"`
		} `json:"events"`
	}
	b.get(t, "/v1/deliveries/"+id+"/events", keyAcme).expect(t, http.StatusOK, &h)
	var types []domain.EventType
	for _, e := range h.Events {
		types = append(types, e.Type)
	}
	return types
}

func TestReplayDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dead := b.story(t, "acme", "webhook", "https://example.com/a", time.Now(), domain.OutcomePermanent)
	path := "/v1/deliveries/" + dead + "/replay"

	b.operatorPost(t, path, keyGlobex, "").expectProblem(t, http.StatusNotFound, "")
	bad := b.refusing()
	bad.operatorPost(t, "/v1/deliveries/not-a-uuid/replay", keyAcme, "").expectProblem(t, http.StatusNotFound, "")
	bad.operatorPost(t, path, keyAcme, `{"reason":"x","force":true}`).expectProblem(t, http.StatusBadRequest, "force")
	bad.operatorPost(t, path, keyAcme, `{"reason":"`+strings.Repeat("r", 501)+`"}`).expectProblem(t, http.StatusBadRequest, "reason")
	bad.do(t, req{method: http.MethodPost, path: path, apiKey: keyAcme, contentType: "text/plain", body: "x"}).
		expectProblem(t, http.StatusUnsupportedMediaType, "Content-Type")

	var st deliveryStatus
	b.operatorPost(t, path, keyAcme, `{"reason":"receiver fixed"}`).expect(t, http.StatusAccepted, &st)
	if st.ID != dead || st.State != "queued" || st.Attempts != 2 || st.LastError != nil {
		t.Fatalf("after replay: %+v, want queued at attempt 2 without a last error", st)
	}
	again := b.operatorPost(t, path, keyAcme, "")
	if p := again.expectProblem(t, http.StatusConflict, "state"); !strings.Contains(p.Detail, "queued") {
		t.Errorf("second replay detail %q, want it to say the delivery is queued", p.Detail)
	}
	if again.header.Get("Retry-After") != "" {
		t.Error("a replay refused for its state carries Retry-After: retrying cannot help")
	}
	want := []domain.EventType{domain.EventAccepted, domain.EventQueued, domain.EventAttemptStarted,
		domain.EventDeadLettered, domain.EventReplayed}
	if got := b.history(t, dead); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	// The next attempt travels with the replay: the dead letter was never written here (the
	// story appends events alone), so the only outbox row is the replayed attempt's.
	if n := b.count(t, `SELECT count(*) FROM ledger_outbox_all`); n != 1 {
		t.Fatalf("%d outbox rows after the replay, want 1", n)
	}
}

func TestReconcileDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unknown := b.story(t, "acme", "webhook", "https://example.com/a", time.Now(), domain.OutcomeUnknown)
	path := "/v1/deliveries/" + unknown + "/reconcile"

	bad := b.refusing()
	bad.operatorPost(t, path, keyAcme, "").expectProblem(t, http.StatusBadRequest, "")
	bad.operatorPost(t, path, keyAcme, `{"evidence":"x"}`).expectProblem(t, http.StatusBadRequest, "outcome")
	bad.operatorPost(t, path, keyAcme, `{"outcome":"sent","evidence":"x"}`).expectProblem(t, http.StatusBadRequest, "outcome")
	bad.operatorPost(t, path, keyAcme, `{"outcome":"delivered"}`).expectProblem(t, http.StatusBadRequest, "evidence")
	bad.operatorPost(t, path, keyAcme, `{"outcome":"delivered","evidence":"x","status_code":42}`).expectProblem(t, http.StatusBadRequest, "status_code")
	b.operatorPost(t, path, keyGlobex, `{"outcome":"delivered","evidence":"x"}`).expectProblem(t, http.StatusNotFound, "")

	var st deliveryStatus
	b.operatorPost(t, path, keyAcme, `{"outcome":"delivered","evidence":"receiver's log: 200 at 12:00:01","actor":"alice","status_code":200}`).
		expect(t, http.StatusOK, &st)
	if st.State != "delivered" {
		t.Fatalf("after reconcile: %+v, want delivered", st)
	}
	b.operatorPost(t, path, keyAcme, `{"outcome":"dead","evidence":"second thoughts"}`).expectProblem(t, http.StatusConflict, "state")
	var h struct {
		Events []struct {
			Type domain.EventType `json:"type"`
			Data struct {
				Evidence string `json:"evidence"`
				Actor    string `json:"actor"`
			} `json:"data"`
		} `json:"events"`
	}
	b.get(t, "/v1/deliveries/"+unknown+"/events", keyAcme).expect(t, http.StatusOK, &h)
	last := h.Events[len(h.Events)-1]
	if last.Type != domain.EventReconciledDelivered || last.Data.Actor != "alice" || !strings.Contains(last.Data.Evidence, "receiver's log") {
		t.Fatalf("last event %+v, want the resolution with alice's evidence", last)
	}
	// A dead delivery is replayed, not reconciled.
	dead := b.story(t, "acme", "webhook", "https://example.com/b", time.Now(), domain.OutcomePermanent)
	b.operatorPost(t, "/v1/deliveries/"+dead+"/reconcile", keyAcme, `{"outcome":"delivered","evidence":"x"}`).
		expectProblem(t, http.StatusConflict, "state")
}

// TestReplayDLQPageByPage: the DLQ replay takes the dead deliveries of one page of the DLQ view,
// continues with its cursor, leaves unknown outcomes and other tenants alone, and skips what the
// view still lists as dead but the log has replayed already.
func TestReplayDLQPageByPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := time.Now().Add(-time.Hour)
	older := b.story(t, "acme", "webhook", "https://example.com/a", at, domain.OutcomePermanent)
	newer := b.story(t, "acme", "webhook", "https://example.com/b", at.Add(time.Minute), domain.OutcomePermanent)
	unknown := b.story(t, "acme", "webhook", "https://example.com/c", at.Add(2*time.Minute), domain.OutcomeUnknown)
	other := b.story(t, "globex", "webhook", "https://example.com/d", at, domain.OutcomePermanent)
	b.project(t)

	b.refusing().operatorPost(t, "/v1/dlq/replay?state=unknown", keyAcme, "").expectProblem(t, http.StatusBadRequest, "state")
	b.refusing().operatorPost(t, "/v1/dlq/replay?limit=0", keyAcme, "").expectProblem(t, http.StatusBadRequest, "limit")

	type answer struct {
		Replayed []string `json:"replayed"`
		Skipped  []struct {
			ID     string `json:"id"`
			State  string `json:"state"`
			Detail string `json:"detail"`
		} `json:"skipped"`
		NextCursor string `json:"next_cursor"`
	}
	var first, second answer
	b.operatorPost(t, "/v1/dlq/replay?limit=1", keyAcme, `{"reason":"bulk"}`).expect(t, http.StatusOK, &first)
	if !slices.Equal(first.Replayed, []string{newer}) || first.NextCursor == "" {
		t.Fatalf("first page %+v, want the newest dead delivery and a cursor", first)
	}
	b.operatorPost(t, "/v1/dlq/replay?limit=1&cursor="+first.NextCursor, keyAcme, "").expect(t, http.StatusOK, &second)
	if !slices.Equal(second.Replayed, []string{older}) {
		t.Fatalf("second page %+v, want the older dead delivery", second)
	}
	// The view has not caught up: it still lists both as dead, and the log refuses them.
	var stale answer
	b.operatorPost(t, "/v1/dlq/replay", keyAcme, "").expect(t, http.StatusOK, &stale)
	if len(stale.Replayed) != 0 || len(stale.Skipped) != 2 || stale.Skipped[0].State != string(domain.StateQueued) {
		t.Fatalf("replay against a lagging view: %+v, want both skipped as queued", stale)
	}
	for id, want := range map[string]domain.EventType{older: domain.EventReplayed, newer: domain.EventReplayed,
		unknown: domain.EventOutcomeUnknown} {
		if h := b.history(t, id); h[len(h)-1] != want {
			t.Errorf("%s ends with %s, want %s", id, h[len(h)-1], want)
		}
	}
	var otherStatus deliveryStatus
	b.get(t, "/v1/deliveries/"+other, keyGlobex).expect(t, http.StatusOK, &otherStatus)
	if otherStatus.State != "dead" {
		t.Fatalf("globex's delivery is %s after acme's DLQ replay, want dead", otherStatus.State)
	}
	// Once the view catches up, nothing acme owns is dead.
	b.project(t)
	var empty answer
	b.operatorPost(t, "/v1/dlq/replay", keyAcme, "").expect(t, http.StatusOK, &empty)
	if len(empty.Replayed)+len(empty.Skipped) != 0 {
		t.Fatalf("replay after the view caught up: %+v, want nothing", empty)
	}
}

// TestReplayDLQByFailureClass: the DLQ replay takes GET /v1/dlq's failure_class too, so an
// operator replays the deliveries that died of a transient failure and leaves the permanent ones.
func TestReplayDLQByFailureClass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := time.Now().Add(-time.Hour)
	transient := b.story(t, "acme", "webhook", "https://example.com/a", at, domain.OutcomeTransient)
	permanent := b.story(t, "acme", "webhook", "https://example.com/b", at.Add(time.Minute), domain.OutcomePermanent)
	b.project(t)

	b.refusing().operatorPost(t, "/v1/dlq/replay?failure_class=bored", keyAcme, "").expectProblem(t, http.StatusBadRequest, "failure_class")
	var out struct {
		Replayed []string `json:"replayed"`
	}
	b.operatorPost(t, "/v1/dlq/replay?failure_class=transient", keyAcme, `{"reason":"receiver back"}`).expect(t, http.StatusOK, &out)
	if len(out.Replayed) != 1 || out.Replayed[0] != transient {
		t.Fatalf("replayed %v, want only the transient one %s", out.Replayed, transient)
	}
	if h := b.history(t, permanent); h[len(h)-1] != domain.EventDeadLettered {
		t.Fatalf("the permanent one's history ends %v, want it left dead", h)
	}
}

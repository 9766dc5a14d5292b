package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/domain"
)

// Issue 24, points 1, 3 and 4: send_at, cancel, and due times that live in PostgreSQL.

// acceptAt accepts one webhook delivery under key to be sent at sendAt and returns its id and
// the state the answer names.
func (b *e2eBundle) acceptAt(t *testing.T, key, recipient string, sendAt time.Time) (string, string) {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/deliveries", key, map[string]any{
		"channel": "webhook", "recipient": recipient, "payload": map[string]any{"k": key},
		"send_at": sendAt.Format(time.RFC3339Nano),
	})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept at %s: %d %s", sendAt, resp.StatusCode, body)
	}
	var a struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatal(err)
	}
	return a.ID, a.State
}

// cancel posts a cancel of a delivery and returns the status and the body.
func (b *e2eBundle) cancel(t *testing.T, id string) (int, string) {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/deliveries/"+id+"/cancel", "", map[string]any{"reason": "not wanted", "actor": "alice"})
	return resp.StatusCode, string(body)
}

// TestScheduledDeliveryGoesOutAtItsTime: a send_at 1.5 s ahead is answered scheduled, listed by
// state=scheduled, not called before its time, and delivered by the ordinary path after it. A
// send_at months ahead writes no work message at all (it waits in due_work, not in a TTL queue);
// one in the past is sent at once; one more than 366 days ahead is 400 naming send_at.
func TestScheduledDeliveryGoesOutAtItsTime(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	far := time.Now().Add(90 * 24 * time.Hour)
	farID, state := b.acceptAt(t, "far-1", b.sink.URL+"/far", far)
	if state != string(domain.StateScheduled) {
		t.Fatalf("far send_at answered %s, want scheduled", state)
	}
	var messages, rows int
	if err := b.schema.Pool.QueryRow(t.Context(), `SELECT count(*) FROM ledger_outbox_all`).Scan(&messages); err != nil || messages != 0 {
		t.Fatalf("a send_at 90 days ahead wrote %d outbox messages (%v), want none", messages, err)
	}
	if err := b.schema.Pool.QueryRow(t.Context(), `SELECT count(*) FROM due_work WHERE delivery_id = $1 AND kind = 'send' AND due_at = $2`,
		farID, far.UTC().Truncate(time.Microsecond)).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("due rows of the far delivery: %d (%v), want 1 at its send_at", rows, err)
	}

	sendAt := time.Now().Add(1500 * time.Millisecond)
	id, state := b.acceptAt(t, "soon-1", b.sink.URL+"/soon", sendAt)
	if state != string(domain.StateScheduled) {
		t.Fatalf("accept answered %s, want scheduled", state)
	}
	b.waitListed(t, "/v1/deliveries?state=scheduled", id, farID)
	// send_at is part of the request: the same body again is the first answer, another send_at
	// under the key is another request.
	if again, state := b.acceptAt(t, "soon-1", b.sink.URL+"/soon", sendAt); again != id || state != string(domain.StateScheduled) {
		t.Fatalf("the repeat answered %s %s, want %s scheduled", again, state, id)
	}
	resp, body := b.do(t, "POST", "/v1/deliveries", "soon-1", map[string]any{
		"channel": "webhook", "recipient": b.sink.URL + "/soon", "payload": map[string]any{"k": "soon-1"},
		"send_at": sendAt.Add(time.Second).Format(time.RFC3339Nano),
	})
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("the key with another send_at: %d %s, want 422", resp.StatusCode, body)
	}
	st := b.waitState(t, id, domain.StateDelivered, 10*time.Second)
	calls := b.sink.times(id)
	if len(calls) != 1 || calls[0].Before(sendAt) {
		t.Fatalf("calls at %v, want one at or after %s", calls, sendAt)
	}
	if late := calls[0].Sub(sendAt); late > 2*time.Second {
		t.Errorf("sent %s after its send_at, want within 2 s", late)
	}
	want := "accepted,scheduled,queued,processing,delivered"
	if got := strings.Join(states(b.history(t, id)), ","); got != want || st.Attempts != 1 {
		t.Fatalf("states %s at attempt %d, want %s at 1", got, st.Attempts, want)
	}

	past, state := b.acceptAt(t, "past-1", b.sink.URL+"/past", time.Now().Add(-time.Hour))
	if state != string(domain.StateAccepted) {
		t.Fatalf("a past send_at answered %s, want accepted", state)
	}
	b.waitState(t, past, domain.StateDelivered, 10*time.Second)

	resp, body = b.refusing().do(t, "POST", "/v1/deliveries", "too-far-1", map[string]any{
		"channel": "webhook", "recipient": b.sink.URL + "/x", "payload": map[string]any{},
		"send_at": time.Now().Add(367 * 24 * time.Hour).Format(time.RFC3339),
	})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"field":"send_at"`) {
		t.Fatalf("send_at 367 days ahead: %d %s, want 400 naming send_at", resp.StatusCode, body)
	}
	if got := b.sink.count(farID); got != 0 {
		t.Fatalf("the far delivery was called %d times", got)
	}
}

// TestCancelBeforeDueIsNeverSent: a scheduled delivery cancelled before its time is cancelled
// (reason and actor recorded), the repeat answers the same 200, and no call ever reaches the
// receiver; a delivered one answers 409 naming its state and attempt; a notification's cancel
// cancels each of its deliveries.
func TestCancelBeforeDueIsNeverSent(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	sendAt := time.Now().Add(time.Second)
	id, _ := b.acceptAt(t, "cancel-1", b.sink.URL+"/c", sendAt)
	status, first := b.cancel(t, id)
	if status != http.StatusOK || !strings.Contains(first, `"state":"cancelled"`) {
		t.Fatalf("cancel: %d %s", status, first)
	}
	status, again := b.cancel(t, id)
	if status != http.StatusOK || again != first {
		t.Fatalf("repeated cancel: %d %s, want the same 200 %s", status, again, first)
	}
	cancelled := eventsOfType(b.history(t, id), domain.EventCancelled)
	if len(cancelled) != 1 || !strings.Contains(string(cancelled[0].Data), `"reason":"not wanted"`) ||
		!strings.Contains(string(cancelled[0].Data), `"actor":"alice"`) {
		t.Fatalf("cancel events %+v, want one with reason and actor", cancelled)
	}

	done := b.accept(t, "cancel-2", b.sink.URL+"/d", domain.PriorityNormal)
	b.waitState(t, done, domain.StateDelivered, 10*time.Second)
	status, body := b.cancel(t, done)
	if status != http.StatusConflict || !strings.Contains(body, `"field":"state"`) || !strings.Contains(body, "delivered at attempt 1") {
		t.Fatalf("cancel of a delivered delivery: %d %s, want 409 naming delivered at attempt 1", status, body)
	}

	n := b.acceptNotification(t, "cancel-3", map[string]any{"payload": map[string]any{"text": "later"},
		"send_at":    time.Now().Add(time.Second).Format(time.RFC3339Nano),
		"recipients": []map[string]string{{"channel": "webhook", "recipient": b.sink.URL + "/n1"}, {"channel": "webhook", "recipient": b.sink.URL + "/n2"}}})
	resp, nbody := b.do(t, "POST", "/v1/notifications/"+n.ID+"/cancel", "", nil)
	if resp.StatusCode != http.StatusOK || strings.Count(string(nbody), `"cancelled":true`) != 2 {
		t.Fatalf("notification cancel: %d %s, want both cancelled", resp.StatusCode, nbody)
	}

	// Past every send_at and the due pass's rounds: nothing was sent.
	time.Sleep(time.Until(sendAt.Add(1500 * time.Millisecond)))
	for _, d := range append([]string{id}, n.Deliveries[0].ID, n.Deliveries[1].ID) {
		if got := b.sink.count(d); got != 0 {
			t.Fatalf("cancelled delivery %s was called %d times", d, got)
		}
		b.waitState(t, d, domain.StateCancelled, time.Second)
	}
}

// TestCancelRacingTheAttemptNeverCallsAfter200: many cancels race the workers and the due pass
// for deliveries that are due at once or in a moment. Each delivery either answers some cancel
// 200 and is never called, or answers every cancel 409 and is called once.
func TestCancelRacingTheAttemptNeverCallsAfter200(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	const n = 24
	var mu sync.Mutex
	ok := map[string]bool{}
	var wg sync.WaitGroup
	for i := range n {
		key := "race-" + string(rune('a'+i))
		var id string
		if i%2 == 0 {
			id = b.accept(t, key, b.sink.URL+"/race", domain.PriorityNormal)
		} else {
			id, _ = b.acceptAt(t, key, b.sink.URL+"/race", time.Now().Add(300*time.Millisecond))
		}
		// The cancels land around the moment the attempt starts: just after the accept for
		// one sent at once, around its send_at for one scheduled 300 ms ahead.
		base := time.Duration(i%8) * 4 * time.Millisecond
		if i%2 == 1 {
			base += 260 * time.Millisecond
		}
		for c := range 4 {
			wg.Go(func() {
				time.Sleep(base + time.Duration(c)*3*time.Millisecond)
				resp, body := b.do(t, "POST", "/v1/deliveries/"+id+"/cancel", "", nil)
				mu.Lock()
				defer mu.Unlock()
				switch resp.StatusCode {
				case http.StatusOK:
					ok[id] = true
				case http.StatusConflict:
					if _, seen := ok[id]; !seen {
						ok[id] = false
					}
				default:
					t.Errorf("cancel of %s: %d %s", id, resp.StatusCode, body)
				}
			})
		}
	}
	wg.Wait()
	if len(ok) != n {
		t.Fatalf("%d deliveries answered, want %d", len(ok), n)
	}
	cancelled := 0
	for id, was := range ok {
		if was {
			cancelled++
			continue
		}
		b.waitState(t, id, domain.StateDelivered, 10*time.Second)
	}
	time.Sleep(time.Second) // any call that would follow a 200 has had its chance
	for id, was := range ok {
		switch got := b.sink.count(id); {
		case was && got != 0:
			t.Errorf("delivery %s: a cancel answered 200, then the receiver was called %d times; history %s", id, got, b.historyString(t, id))
		case !was && got != 1:
			t.Errorf("delivery %s: every cancel was refused, and the receiver was called %d times, want 1", id, got)
		}
	}
	t.Logf("%d of %d deliveries cancelled, the others delivered", cancelled, n)
}

// TestDueWorkSurvivesDeletedQueues: a ledger with a scheduled delivery and a retrying one is
// stopped, every queue and exchange under its prefix is deleted, and a new process starts: the
// scheduled one goes out at its send_at and the retrying one at its next attempt plus the due
// grace, each within 2 s of that time (the bound: the due pass's interval, 250 ms, plus the
// relay and a worker). Before due times lived in PostgreSQL, the retry waited for the redrive
// (10 minutes) and send_at did not exist.
func TestDueWorkSurvivesDeletedQueues(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	b := setupE2E(t, "", func(c *Config) {
		c.RetryBase, c.RetryCap = 3*time.Second, 3*time.Second // one tier of 3 s
		c.DueGrace = grace
	})
	b.sink.script(func(r *http.Request, n int) (int, http.Header) {
		if n == 1 && strings.HasSuffix(r.URL.Path, "/flaky") {
			return http.StatusServiceUnavailable, http.Header{"Retry-After": {"2"}}
		}
		return http.StatusOK, nil
	})
	// Far enough ahead to be still scheduled when the ledger stops, on a loaded machine too: a
	// delivery the due pass already queued has left the schedule (its lost message is the
	// redrive's, as for any queued one).
	sendAt := time.Now().Add(8 * time.Second)
	scheduled, _ := b.acceptAt(t, "kept-1", b.sink.URL+"/later", sendAt)
	retrying := b.accept(t, "kept-2", b.sink.URL+"/flaky", domain.PriorityNormal)
	b.waitState(t, retrying, domain.StateRetrying, 5*time.Second)
	conn, err := amqp091.Dial(amqptest.URL())
	if err != nil {
		t.Fatal(err)
	}
	// The retry's delayed copy is in its tier before the ledger stops: deleting the queues
	// loses it, and only the ledger's own record of the due time is left.
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	tier := b.app.topology.Retry(webhook.Name, 3*time.Second)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		q, err := ch.QueueDeclarePassive(tier, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("inspect %s: %v", tier, err)
		}
		if q.Messages == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d messages, want the retry's", tier, q.Messages)
		}
	}
	ch.Close()
	if h := b.history(t, scheduled); h[len(h)-1].Type != string(domain.EventScheduled) {
		t.Fatalf("the scheduled delivery's history ends in %s when the ledger stops, want still scheduled (%s before its send_at)", h[len(h)-1].Type, time.Until(sendAt).Round(time.Millisecond))
	}
	b.stop()
	if err := b.app.topology.Delete(conn); err != nil {
		t.Fatalf("delete the topology: %v", err)
	}
	conn.Close()

	again := startApp(t, b.schema, b.cfg)
	again.sink = b.sink
	again.waitState(t, scheduled, domain.StateDelivered, 15*time.Second)
	again.waitState(t, retrying, domain.StateDelivered, 10*time.Second)

	calls := b.sink.times(scheduled)
	if len(calls) != 1 || calls[0].Before(sendAt) || calls[0].Sub(sendAt) > 2*time.Second {
		t.Fatalf("scheduled delivery called at %v, want once within 2 s after %s", calls, sendAt)
	}
	var next time.Time
	for _, e := range eventsOfType(again.history(t, retrying), domain.EventRetryScheduled) {
		var r domain.AttemptResult
		if err := json.Unmarshal(e.Data, &r); err != nil || r.NextAttemptAt == nil {
			t.Fatalf("retry event %s: %v", e.Data, err)
		}
		next = *r.NextAttemptAt
	}
	calls = b.sink.times(retrying)
	if len(calls) != 2 || calls[1].Before(next) || calls[1].Sub(next.Add(grace)) > 2*time.Second {
		t.Fatalf("retrying delivery called at %v, want twice, the second within 2 s of %s + %s", calls, next, grace)
	}
}

// TestCancelledWhileTheBrokerHoldsItsMessage: a queued delivery whose work message waits on the
// broker (no worker runs) is cancelled; the worker that starts later takes the message, acks it
// and calls nothing.
func TestCancelledWhileTheBrokerHoldsItsMessage(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	cfg := testConfig(t, schema)
	cfg.Roles = "api,relay,projector"
	b := startApp(t, schema, cfg)
	id := b.accept(t, "held-1", b.sink.URL+"/held", domain.PriorityNormal)
	b.waitState(t, id, domain.StateQueued, 10*time.Second)
	if status, body := b.cancel(t, id); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, body)
	}

	wcfg := cfg
	wcfg.Roles = "worker"
	startApp(t, schema, wcfg)
	conn := amqptest.Dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	work := b.app.topology.Work(webhook.Name, domain.PriorityNormal)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		q, err := ch.QueueDeclarePassive(work, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("inspect %s: %v", work, err)
		}
		if q.Messages == 0 && q.Consumers > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds %d messages (%d consumers)", work, q.Messages, q.Consumers)
		}
	}
	time.Sleep(200 * time.Millisecond) // a call the message led to would have reached the sink
	if got := b.sink.count(id); got != 0 {
		t.Fatalf("the cancelled delivery was called %d times", got)
	}
	if got := strings.Join(states(b.history(t, id)), ","); got != "accepted,queued,cancelled" {
		t.Fatalf("states %s, want accepted,queued,cancelled", got)
	}
}

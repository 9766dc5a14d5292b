package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi"
)

func TestAcceptDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := time.Now().UTC()

	r := b.post(t, "/v1/deliveries", "order-42", deliveryBody("https://example.com/hook"))
	var got deliveryAccepted
	r.expect(t, http.StatusAccepted, &got)

	if got.ID == "" || got.NotificationID == "" || got.ID == got.NotificationID {
		t.Fatalf("ids: delivery %q, notification %q", got.ID, got.NotificationID)
	}
	if got.State != "accepted" || got.Channel != "webhook" || got.Recipient != "https://example.com/hook" {
		t.Fatalf("answer %+v", got)
	}
	if got.AcceptedAt.Before(before.Add(-time.Second)) {
		t.Fatalf("accepted_at %s is before the request (%s)", got.AcceptedAt, before)
	}
	if loc := r.header.Get("Location"); loc != "/v1/deliveries/"+got.ID {
		t.Fatalf("Location %q, want /v1/deliveries/%s", loc, got.ID)
	}
	if h := r.header.Get("Idempotent-Replayed"); h != "" {
		t.Fatalf("first answer has Idempotent-Replayed: %q", h)
	}
	// Accepted means durable: the event and its work message are committed.
	if n := b.count(t, `SELECT count(*) FROM events WHERE delivery_id = $1`, got.ID); n != 1 {
		t.Fatalf("%d events for the delivery, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM ledger_outbox_all`); n != 1 {
		t.Fatalf("%d outbox rows, want 1", n)
	}
}

func TestAcceptNotificationFansOutInOneTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recipients := []string{"https://a.example.com/h", "https://b.example.com/h", "http://c.example.com/h"}

	var got notificationAccepted
	b.post(t, "/v1/notifications", "fan-out-1", notificationBody(recipients...)).expect(t, http.StatusAccepted, &got)

	if got.ID == "" || len(got.Deliveries) != 3 {
		t.Fatalf("answer %+v, want a notification id and 3 deliveries", got)
	}
	ids := map[string]bool{}
	for i, d := range got.Deliveries {
		if d.ID == "" || d.State != "accepted" || d.Channel != "webhook" || d.Recipient != recipients[i] {
			t.Fatalf("delivery %d: %+v", i, d)
		}
		ids[d.ID] = true
	}
	if len(ids) != 3 {
		t.Fatalf("delivery ids are not distinct: %+v", got.Deliveries)
	}
	if n := b.count(t, `SELECT count(*) FROM events WHERE type = 'delivery.accepted'`); n != 3 {
		t.Fatalf("%d accepted events, want 3", n)
	}
	if n := b.count(t, `SELECT count(*) FROM ledger_outbox_all`); n != 3 {
		t.Fatalf("%d outbox rows, want 3", n)
	}
	// One transaction wrote them all: events and outbox rows carry the same transaction id.
	if n := b.count(t, `SELECT count(DISTINCT x) FROM (
		SELECT transaction_id AS x FROM events UNION ALL SELECT transaction_id FROM ledger_outbox_all) t`); n != 1 {
		t.Fatalf("events and outbox rows span %d transactions, want 1", n)
	}
	// Every delivery is readable by its id, and belongs to the notification.
	for id := range ids {
		var st deliveryStatus
		b.get(t, "/v1/deliveries/"+id, keyAcme).expect(t, http.StatusOK, &st)
		if st.NotificationID != got.ID {
			t.Fatalf("delivery %s has notification %q, want %q", id, st.NotificationID, got.ID)
		}
	}
}

// TestAcceptNotificationIsAllOrNothing breaks the accept transaction half-way, after the events
// and the first outbox row were written, and checks that nothing at all remains: no events, no
// outbox rows, no remembered request, so the client's retry is a fresh accept.
func TestAcceptNotificationIsAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// A row trigger sees the rows its statement inserted before: it lets the first outbox row
	// in and fails on the second.
	_, err := b.schema.Pool.Exec(ctx, `
		CREATE FUNCTION fail_second_outbox_row() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT count(*) FROM ledger_outbox_all) >= 1 THEN
				RAISE EXCEPTION 'forced failure at the second outbox row';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_second BEFORE INSERT ON watermill_ledger_outbox
			FOR EACH ROW EXECUTE FUNCTION fail_second_outbox_row();`)
	if err != nil {
		t.Fatal(err)
	}
	body := notificationBody("https://a.example.com/h", "https://b.example.com/h", "https://c.example.com/h")

	b.post(t, "/v1/notifications", "atomic-1", body).expectProblem(t, http.StatusInternalServerError, "")
	for table, query := range map[string]string{
		"events":                  `SELECT count(*) FROM events`,
		"watermill_ledger_outbox": `SELECT count(*) FROM ledger_outbox_all`,
		"accept_requests":         `SELECT count(*) FROM accept_requests`,
	} {
		if n := b.count(t, query); n != 0 {
			t.Fatalf("%d rows in %s after the failed accept, want 0", n, table)
		}
	}

	if _, err := b.schema.Pool.Exec(ctx, `DROP FUNCTION fail_second_outbox_row() CASCADE`); err != nil {
		t.Fatal(err)
	}
	r := b.post(t, "/v1/notifications", "atomic-1", body)
	var got notificationAccepted
	r.expect(t, http.StatusAccepted, &got)
	if r.header.Get("Idempotent-Replayed") != "" || len(got.Deliveries) != 3 {
		t.Fatalf("retry after the failure: replayed %q, %d deliveries; want a fresh accept of 3",
			r.header.Get("Idempotent-Replayed"), len(got.Deliveries))
	}
	if e, o := b.count(t, `SELECT count(*) FROM events`), b.count(t, `SELECT count(*) FROM ledger_outbox_all`); e != 3 || o != 3 {
		t.Fatalf("after the retry: %d events, %d outbox rows; want 3 and 3", e, o)
	}
}

func TestAcceptReplaysTheFirstAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("delivery", func(t *testing.T) {
		body := deliveryBody("https://example.com/replay")
		first := b.post(t, "/v1/deliveries", "replay-1", body)
		var a, c deliveryAccepted
		first.expect(t, http.StatusAccepted, &a)
		again := b.post(t, "/v1/deliveries", "replay-1", body)
		again.expect(t, http.StatusAccepted, &c)
		if again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("Idempotent-Replayed %q, want true", again.header.Get("Idempotent-Replayed"))
		}
		if a.ID != c.ID || a.NotificationID != c.NotificationID || !a.AcceptedAt.Equal(c.AcceptedAt) {
			t.Fatalf("replay answered %+v, first answer was %+v", c, a)
		}
		if again.header.Get("Location") != first.header.Get("Location") {
			t.Fatalf("replay Location %q, first %q", again.header.Get("Location"), first.header.Get("Location"))
		}
		if n := b.count(t, `SELECT count(*) FROM events WHERE delivery_id = $1`, a.ID); n != 1 {
			t.Fatalf("%d events after the replay, want 1", n)
		}
	})
	t.Run("notification", func(t *testing.T) {
		body := notificationBody("https://a.example.com/r", "https://b.example.com/r")
		var a, c notificationAccepted
		b.post(t, "/v1/notifications", "replay-2", body).expect(t, http.StatusAccepted, &a)
		again := b.post(t, "/v1/notifications", "replay-2", body)
		again.expect(t, http.StatusAccepted, &c)
		if again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("Idempotent-Replayed %q, want true", again.header.Get("Idempotent-Replayed"))
		}
		if a.ID != c.ID || len(c.Deliveries) != 2 || a.Deliveries[0].ID != c.Deliveries[0].ID || a.Deliveries[1].ID != c.Deliveries[1].ID {
			t.Fatalf("replay answered %+v, first answer was %+v", c, a)
		}
	})
}

func TestAcceptKeyReusedForAnotherRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.post(t, "/v1/deliveries", "reuse-1", deliveryBody("https://example.com/one")).expect(t, http.StatusAccepted, nil)

	// Another body under the same key.
	b.post(t, "/v1/deliveries", "reuse-1", deliveryBody("https://example.com/two")).
		expectProblem(t, http.StatusUnprocessableEntity, "Idempotency-Key")
	// The same key on the other accept endpoint is another request too (no body is valid on
	// both endpoints, so this cannot isolate the path from the body in the hash).
	b.post(t, "/v1/notifications", "reuse-1", notificationBody("https://example.com/one")).
		expectProblem(t, http.StatusUnprocessableEntity, "Idempotency-Key")
	if n := b.count(t, `SELECT count(*) FROM events`); n != 1 {
		t.Fatalf("%d events, want only the first request's 1", n)
	}
}

// TestAcceptWhileTheFirstIsInFlight holds the first request inside its transaction (its event
// insert waits for a table lock), sends the same request again, and expects 409; once the lock
// is released the first request completes with 202.
func TestAcceptWhileTheFirstIsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	body := deliveryBody("https://example.com/slow")

	lock, err := b.schema.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			if err := lock.Rollback(ctx); err != nil {
				t.Errorf("release lock: %v", err)
			}
		}
	}
	defer release()
	if _, err := lock.Exec(ctx, `LOCK TABLE events IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	type result struct {
		r   resp
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := b.send(ctx, req{method: http.MethodPost, path: "/v1/deliveries", apiKey: keyAcme,
			idemKey: "in-flight-1", contentType: "application/json", body: body})
		done <- result{r, err}
	}()

	// Wait until the first request's transaction is blocked on the events table.
	deadline := time.Now().Add(10 * time.Second)
	for b.count(t, `SELECT count(*) FROM pg_locks WHERE relation = 'events'::regclass AND NOT granted`) == 0 {
		select {
		case res := <-done:
			t.Fatalf("first request finished while the table was locked: %v %d %s", res.err, res.r.status, res.r.body)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request never waited on the events table")
		}
		time.Sleep(10 * time.Millisecond)
	}

	second := b.post(t, "/v1/deliveries", "in-flight-1", body)
	second.expectProblem(t, http.StatusConflict, "Idempotency-Key")
	if second.header.Get("Retry-After") == "" {
		t.Fatal("409 without Retry-After")
	}

	release()
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not finish after the lock was released")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	var got deliveryAccepted
	res.r.expect(t, http.StatusAccepted, &got)
	if n := b.count(t, `SELECT count(*) FROM events WHERE delivery_id = $1`, got.ID); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

func TestAcceptIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := deliveryBody("https://example.com/k")
	for _, path := range []string{"/v1/deliveries", "/v1/notifications"} {
		b.refusing().post(t, path, "", body).expectProblem(t, http.StatusBadRequest, "Idempotency-Key")
	}
	b.refusing().post(t, "/v1/deliveries", strings.Repeat("k", 256), body).expectProblem(t, http.StatusBadRequest, "Idempotency-Key")
	b.post(t, "/v1/deliveries", strings.Repeat("k", 255), body).expect(t, http.StatusAccepted, nil)
}

func TestAcceptIdempotencyKeysAreScopedPerTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := deliveryBody("https://example.com/shared")
	var acme, globex deliveryAccepted
	b.post(t, "/v1/deliveries", "shared-key", body).expect(t, http.StatusAccepted, &acme)
	r := b.do(t, req{method: http.MethodPost, path: "/v1/deliveries", apiKey: keyGlobex, idemKey: "shared-key",
		contentType: "application/json", body: body})
	r.expect(t, http.StatusAccepted, &globex)
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the other tenant's request was answered as a replay")
	}
	if acme.NotificationID == globex.NotificationID || acme.ID == globex.ID {
		t.Fatalf("two tenants under one key share ids: %+v and %+v", acme, globex)
	}
	if n := b.count(t, `SELECT count(DISTINCT tenant) FROM events`); n != 2 {
		t.Fatalf("events of %d tenants, want 2", n)
	}
}

func TestAcceptBodyTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"channel":"webhook","recipient":"https://example.com/big","payload":{"blob":"` +
		strings.Repeat("a", int(httpapi.DefaultMaxBodyBytes)) + `"}}`
	b.post(t, "/v1/deliveries", "big-1", body).expectProblem(t, http.StatusRequestEntityTooLarge, "")
	if n := b.count(t, `SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("%d events after a refused body, want 0", n)
	}
}

func TestAcceptContentType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := deliveryBody("https://example.com/ct")
	for i, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/jsonp", "not a media type;;"} {
		b.refusing().do(t, req{method: http.MethodPost, path: "/v1/deliveries", apiKey: keyAcme, idemKey: "ct-bad-" + strconv.Itoa(i),
			contentType: ct, body: body}).expectProblem(t, http.StatusUnsupportedMediaType, "Content-Type")
	}
	for i, ct := range []string{"", "application/json", "application/json; charset=utf-8", "Application/JSON"} {
		client := b
		if ct == "" {
			client = b.refusing() // no Content-Type is read as JSON too, though the description asks for one
		}
		client.do(t, req{method: http.MethodPost, path: "/v1/deliveries", apiKey: keyAcme, idemKey: "ct-ok-" + strconv.Itoa(i),
			contentType: ct, body: body}).expect(t, http.StatusAccepted, nil)
	}
}

func TestAcceptValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	many := make([]string, 1001)
	for i := range many {
		many[i] = "https://example.com/r" + strconv.Itoa(i)
	}
	tests := []struct {
		name, path, body, field string
	}{
		{"unknown channel", "/v1/deliveries", `{"channel":"pigeon","recipient":"https://example.com/h","payload":{}}`, "channel"},
		{"missing channel", "/v1/deliveries", `{"recipient":"https://example.com/h","payload":{}}`, "channel"},
		{"missing recipient", "/v1/deliveries", `{"channel":"webhook","payload":{}}`, "recipient"},
		{"relative URL", "/v1/deliveries", `{"channel":"webhook","recipient":"/hooks/1","payload":{}}`, "recipient"},
		{"ftp URL", "/v1/deliveries", `{"channel":"webhook","recipient":"ftp://example.com/h","payload":{}}`, "recipient"},
		{"URL without host", "/v1/deliveries", `{"channel":"webhook","recipient":"https:///h","payload":{}}`, "recipient"},
		{"payload array", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h","payload":[1,2]}`, "payload"},
		{"payload string", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h","payload":"hi"}`, "payload"},
		{"payload null", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h","payload":null}`, "payload"},
		{"payload missing", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h"}`, "payload"},
		{"bad priority", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"priority":"urgent"}`, "priority"},
		{"priority not a string", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"priority":1}`, "priority"},
		{"max_attempts zero", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"max_attempts":0}`, "max_attempts"},
		{"max_attempts above the server's", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"max_attempts":11}`, "max_attempts"},
		{"malformed JSON", "/v1/deliveries", `{"channel":"webhook",`, ""},
		{"JSON syntax error", "/v1/deliveries", `{"channel" "webhook"}`, ""},
		{"body not an object", "/v1/deliveries", `[]`, ""},
		{"trailing data", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h","payload":{}} {}`, ""},
		{"unknown field", "/v1/deliveries", `{"channel":"webhook","recipient":"https://example.com/h","payload":{},"max_attempt":3}`, "max_attempt"},
		{"fan-out: no recipients", "/v1/notifications", `{"payload":{},"recipients":[]}`, "recipients"},
		{"fan-out: too many recipients", "/v1/notifications", notificationBody(many...), "recipients"},
		{"fan-out: duplicate recipient", "/v1/notifications", notificationBody("https://a.example.com/h", "https://b.example.com/h", "https://a.example.com/h"), "recipients[2]"},
		{"fan-out: unknown channel", "/v1/notifications", `{"payload":{},"recipients":[{"channel":"webhook","recipient":"https://a.example.com/h"},{"channel":"sms","recipient":"+33600000000"}]}`, "recipients[1].channel"},
		{"fan-out: bad recipient", "/v1/notifications", `{"payload":{},"recipients":[{"channel":"webhook","recipient":"mailto:a@example.com"}]}`, "recipients[0].recipient"},
		{"fan-out: payload array", "/v1/notifications", `{"payload":[],"recipients":[{"channel":"webhook","recipient":"https://a.example.com/h"}]}`, "payload"},
		{"fan-out: unknown field", "/v1/notifications", `{"payload":{},"recipients":[{"channel":"webhook","recipient":"https://a.example.com/h","cc":"x"}]}`, "cc"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.refusing().post(t, tt.path, "invalid-"+strconv.Itoa(i), tt.body).expectProblem(t, http.StatusBadRequest, tt.field)
		})
	}
	if n := b.count(t, `SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("%d events after refused requests, want 0", n)
	}
	if n := b.count(t, `SELECT count(*) FROM accept_requests`); n != 0 {
		t.Fatalf("%d remembered requests after refused requests, want 0", n)
	}
}

func TestAcceptOptionalMembers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var got deliveryAccepted
	b.post(t, "/v1/deliveries", "opts-1",
		`{"channel":"webhook","recipient":"https://example.com/o","payload":{"a":[1]},"priority":"high","max_attempts":3}`).
		expect(t, http.StatusAccepted, &got)
	var st deliveryStatus
	b.get(t, "/v1/deliveries/"+got.ID, keyAcme).expect(t, http.StatusOK, &st)
	if st.Priority != "high" || st.MaxAttempts != 3 {
		t.Fatalf("status %+v, want priority high and max_attempts 3", st)
	}
}

func TestAcceptRefusesWhatTheStoreCannotHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct{ name, body, field string }{
		{"nul escape", `{"channel":"webhook","recipient":"https://example.com/h","payload":{"a":"x\u0000y"}}`, "payload"},
		{"lone high surrogate", `{"channel":"webhook","recipient":"https://example.com/h","payload":{"a":"\ud800"}}`, "payload"},
		{"lone low surrogate", `{"channel":"webhook","recipient":"https://example.com/h","payload":{"a":"\udc00x"}}`, "payload"},
		{"invalid utf-8", "{\"channel\":\"webhook\",\"recipient\":\"https://example.com/h\",\"payload\":{\"a\":\"\xff\"}}", "payload"},
	}
	for _, c := range cases {
		r := b.post(t, "/v1/deliveries", "store-"+c.name, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"field":"`+c.field+`"`) {
			t.Errorf("%s: %d %s", c.name, r.status, r.body)
		}
	}
	// A pair of surrogates and an escaped backslash before u0000 are fine.
	ok := `{"channel":"webhook","recipient":"https://example.com/h","payload":{"a":"\ud83d\ude00","b":"\\u0000"}}`
	if r := b.post(t, "/v1/deliveries", "store-ok", ok); r.status != http.StatusAccepted {
		t.Errorf("storable payload: %d %s", r.status, r.body)
	}
	r := b.post(t, "/v1/deliveries", "bad\xffkey", `{"channel":"webhook","recipient":"https://example.com/h","payload":{}}`)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"field":"Idempotency-Key"`) {
		t.Errorf("invalid UTF-8 key: %d %s", r.status, r.body)
	}
}

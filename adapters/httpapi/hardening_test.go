package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/domain"
)

// The tests of this file are the rows of the hardening issue: inputs that reached a 500 (the
// database refused a value) or were quietly taken, each now refused with the field named.

func TestPayloadNumbersOutOfNumericRangeAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, payload := range []string{`{"n":1e999999}`, `{"n":1e-20000}`, `{"a":[1,{"n":-1.5E131072}]}`,
		`{"n":0.` + strings.Repeat("0", 16383) + `1}`} {
		body := `{"channel":"webhook","recipient":"https://example.com/h","payload":` + payload + `}`
		b.post(t, "/v1/deliveries", "num-"+string(rune('a'+i)), body).expectProblem(t, http.StatusBadRequest, "payload")
	}
	// At the edge of the range a number is stored as it is.
	for i, payload := range []string{`{"n":1e131071}`, `{"n":1e-16383}`, `{"n":0e99999}`, `{"n":12345678901234567890123456789}`} {
		body := `{"channel":"webhook","recipient":"https://example.com/h","payload":` + payload + `}`
		b.post(t, "/v1/deliveries", "edge-"+string(rune('a'+i)), body).expect(t, http.StatusAccepted, nil)
	}
}

func TestNULInOperatorTextIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := uuid.Must(uuid.NewV7()).String()
	for _, tt := range []struct{ path, body, field string }{
		{"/v1/deliveries/" + id + "/replay", `{"reason":"a\u0000b"}`, "reason"},
		{"/v1/dlq/replay", `{"reason":"\u0000"}`, "reason"},
		{"/v1/deliveries/" + id + "/reconcile", `{"outcome":"delivered","evidence":"log\u0000line"}`, "evidence"},
		{"/v1/deliveries/" + id + "/reconcile", `{"outcome":"delivered","evidence":"e","actor":"\u0000"}`, "actor"},
		{"/v1/deliveries/" + id + "/reconcile", `{"outcome":"delivered","evidence":"e","provider_operation_id":"x\u0000"}`, "provider_operation_id"},
	} {
		b.operatorPost(t, tt.path, keyAcme, tt.body).expectProblem(t, http.StatusBadRequest, tt.field)
	}
	// Accept bodies are held to the same rule, whichever member carries it.
	b.post(t, "/v1/notifications", "nul-1", `{"payload":{},"recipients":[{"channel":"webhook","recipient":"https://example.com/\u0000"}]}`).
		expectProblem(t, http.StatusBadRequest, "recipients[0].recipient")
}

func TestInvalidTextInQueriesAndPaths(t *testing.T) {
	t.Parallel()
	b := setup(t).refusing()
	b.get(t, "/v1/deliveries?recipient=%ff", keyAcme).expectProblem(t, http.StatusBadRequest, "recipient")
	b.get(t, "/v1/deliveries?recipient=a%00b", keyAcme).expectProblem(t, http.StatusBadRequest, "recipient")
	b.get(t, "/v1/dlq?channel=%c3%28", keyAcme).expectProblem(t, http.StatusBadRequest, "channel")
	b.get(t, "/v1/requests/%00", keyAcme).expectProblem(t, http.StatusNotFound, "")
	b.get(t, "/v1/requests/%ff", keyAcme).expectProblem(t, http.StatusNotFound, "")
	b.get(t, "/v1/deliveries/%00", keyAcme).expectProblem(t, http.StatusNotFound, "")
	b.get(t, "/v1/deliveries/%00/events", keyAcme).expectProblem(t, http.StatusNotFound, "")
	b.operatorPost(t, "/v1/deliveries/%ff/replay", keyAcme, "").expectProblem(t, http.StatusNotFound, "")
}

func TestUUIDSpellingsPostgreSQLRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acc := b.accept(t, "urn-1", "https://example.com/urn")
	// uuid.Parse takes the URN form, PostgreSQL does not: the id is the delivery's all the same.
	// The description asks for the canonical form, so these spellings are outside it on purpose.
	spelt := b.refusing()
	for _, path := range []string{"/v1/deliveries/urn:uuid:" + acc.ID, "/v1/deliveries/urn:uuid:" + acc.ID + "/events",
		"/v1/deliveries/{" + acc.ID + "}", "/v1/deliveries/" + strings.ReplaceAll(acc.ID, "-", "")} {
		spelt.get(t, path, keyAcme).expect(t, http.StatusOK, nil)
	}
	spelt.operatorPost(t, "/v1/deliveries/urn:uuid:"+acc.ID+"/replay", keyAcme, "").expectProblem(t, http.StatusConflict, "state")
	spelt.operatorPost(t, "/v1/deliveries/urn:uuid:"+uuid.Must(uuid.NewV7()).String()+"/reconcile", keyAcme,
		`{"outcome":"delivered","evidence":"e"}`).expectProblem(t, http.StatusNotFound, "")

	cursor := func(raw string) string { return base64.RawURLEncoding.EncodeToString([]byte(raw)) }
	at := time.Now().Add(time.Hour).UnixMicro()
	b.get(t, "/v1/deliveries?cursor="+cursor(`{"a":`+strconv.FormatInt(at, 10)+`,"i":"urn:uuid:`+uuid.Must(uuid.NewV7()).String()+`"}`), keyAcme).expect(t, http.StatusOK, nil)
	b.get(t, "/v1/deliveries?cursor="+cursor(`{"a":-9000000000000000000,"i":"`+uuid.Must(uuid.NewV7()).String()+`"}`), keyAcme).
		expectProblem(t, http.StatusBadRequest, "cursor")
	b.get(t, "/v1/dlq?cursor="+cursor(`{"a":9000000000000000000,"i":"`+uuid.Must(uuid.NewV7()).String()+`"}`), keyAcme).
		expectProblem(t, http.StatusBadRequest, "cursor")
}

func TestWebhookURLsThatCannotBeDeliveredAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, recipient := range []string{"https://example.com:0/h", "https://example.com:99999/h", "https://user:pass@example.com/h"} {
		b.post(t, "/v1/deliveries", "url-"+string(rune('a'+i)), deliveryBody(recipient)).expectProblem(t, http.StatusBadRequest, "recipient")
	}
}

func TestUnknownQueryParametersAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acc := b.accept(t, "params-1", "https://example.com/params")
	b.refusing().get(t, "/v1/deliveries/"+acc.ID+"/events?verbose=1", keyAcme).expectProblem(t, http.StatusBadRequest, "verbose")
	r := b.refusing().do(t, req{method: http.MethodPost, path: "/v1/deliveries?dry_run=true", apiKey: keyAcme, idemKey: "params-2",
		contentType: "application/json", body: deliveryBody("https://example.com/dry")})
	r.expectProblem(t, http.StatusBadRequest, "dry_run")
	if n := b.count(t, `SELECT count(*) FROM events WHERE idempotency_key LIKE '%/accepted' AND data->>'idempotency_key' = 'params-2'`); n != 0 {
		t.Fatalf("a refused dry_run accept recorded %d deliveries", n)
	}
}

func TestTwoAuthorizationHeadersAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hr, err := http.NewRequest(http.MethodGet, b.url+"/v1/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Add("Authorization", "Bearer "+keyAcme)
	hr.Header.Add("Authorization", "Bearer "+keyGlobex)
	res, err := b.client.Do(hr.WithContext(openapitest.Invalid(hr.Context())))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("two Authorization headers: status %d, want 400", res.StatusCode)
	}
}

// TestFanOutWritesThePayloadOnceAndIsBounded: a notification keeps its payload once in the log,
// not once per recipient, each delivery's history still shows it, and what one request may write
// (payload times recipients) is bounded.
func TestFanOutWritesThePayloadOnceAndIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	payload := `{"blob":"` + strings.Repeat("x", 100<<10) + `"}`
	recipients := make([]string, 100)
	for i := range recipients {
		recipients[i] = `{"channel":"webhook","recipient":"https://example.com/r/` + strconv.Itoa(i) + `"}`
	}
	body := `{"payload":` + payload + `,"recipients":[` + strings.Join(recipients, ",") + `]}`
	var acc notificationAccepted
	b.post(t, "/v1/notifications", "big-1", body).expect(t, http.StatusAccepted, &acc)
	if len(acc.Deliveries) != 100 {
		t.Fatalf("%d deliveries, want 100", len(acc.Deliveries))
	}
	if kept := b.count(t, `SELECT sum(octet_length(data::text))::int FROM events`); kept > 100*1024 {
		t.Fatalf("the events keep %d bytes for 100 deliveries of one %d-byte payload, want the payload once, apart", kept, len(payload))
	}
	if n := b.count(t, `SELECT count(*) FROM notification_payloads`); n != 1 {
		t.Fatalf("%d stored payloads, want 1", n)
	}
	var h eventList
	b.get(t, "/v1/deliveries/"+acc.Deliveries[57].ID+"/events", keyAcme).expect(t, http.StatusOK, &h)
	var data struct {
		Payload json.RawMessage `json:"payload"`
		SHA     string          `json:"payload_sha256"`
	}
	if err := json.Unmarshal(h.Events[0].Data, &data); err != nil || string(data.Payload) != payload || data.SHA != "" {
		t.Fatalf("history of a fanned-out delivery: payload of %d bytes (%v), sha %q; want the payload as sent", len(data.Payload), err, data.SHA)
	}

	// 200 recipients of 100 KiB is 20 MiB, over the default bound of 16 MiB.
	recipients = append(recipients, recipients...)
	for i := range recipients {
		recipients[i] = `{"channel":"webhook","recipient":"https://example.com/s/` + strconv.Itoa(i) + `"}`
	}
	body = `{"payload":` + payload + `,"recipients":[` + strings.Join(recipients, ",") + `]}`
	b.post(t, "/v1/notifications", "big-2", body).expectProblem(t, http.StatusRequestEntityTooLarge, "recipients")
	if n := b.count(t, `SELECT count(*) FROM notification_payloads`); n != 1 {
		t.Fatalf("a refused fan-out stored a payload")
	}
}

// dieAgain drives a replayed (queued) delivery to dead again: its new attempt fails for good.
func (b *bundle) dieAgain(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	events, err := b.store.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	d, err := domain.Rehydrate(events)
	if err != nil {
		t.Fatal(err)
	}
	started, err := d.StartAttempt("webhook", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	dead, err := d.RecordOutcome(d.Attempt(), domain.Outcome{Kind: domain.OutcomePermanent, Provider: "webhook", StatusCode: 410},
		domain.DefaultRetryPolicy(), time.Now().UTC(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Append(ctx, append(started, dead...), nil); err != nil {
		t.Fatal(err)
	}
}

// replays counts a delivery's replayed events.
func (b *bundle) replays(t *testing.T, id string) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM events WHERE delivery_id = $1 AND type = 'delivery.replayed'`, id)
}

// TestReplayUnderOneKeyIsOneReplay: a replay repeated under the same Idempotency-Key is answered
// with the first one, even when the delivery died again in between and even when the repeats
// race; the key on another delivery is 422.
func TestReplayUnderOneKeyIsOneReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keyed := func(path, key string) resp {
		return b.do(t, req{method: http.MethodPost, path: path, apiKey: keyAcme, idemKey: key, contentType: "application/json",
			body: `{"reason":"receiver fixed"}`})
	}
	dead := b.story(t, "acme", "webhook", "https://example.com/k", time.Now(), domain.OutcomePermanent)
	path := "/v1/deliveries/" + dead + "/replay"
	first := keyed(path, "replay-1")
	first.expect(t, http.StatusAccepted, nil)
	b.dieAgain(t, dead)
	again := keyed(path, "replay-1")
	again.expect(t, http.StatusAccepted, nil)
	if string(again.body) != string(first.body) || b.replays(t, dead) != 1 {
		t.Fatalf("a repeat after the delivery died again: %s (first %s), %d replays; want the first answer and one replay",
			again.body, first.body, b.replays(t, dead))
	}
	keyed(path, "replay-2").expect(t, http.StatusAccepted, nil) // another key is another replay
	if n := b.replays(t, dead); n != 2 {
		t.Fatalf("%d replays after a second key, want 2", n)
	}
	other := b.story(t, "acme", "webhook", "https://example.com/k2", time.Now(), domain.OutcomePermanent)
	keyed("/v1/deliveries/"+other+"/replay", "replay-1").expectProblem(t, http.StatusUnprocessableEntity, "Idempotency-Key")

	// Twenty at once under one key: one replay, twenty identical answers.
	racing := b.story(t, "acme", "webhook", "https://example.com/race", time.Now(), domain.OutcomePermanent)
	answers := make(chan resp, 20)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			r, err := b.send(context.Background(), req{method: http.MethodPost, path: "/v1/deliveries/" + racing + "/replay",
				apiKey: keyAcme, idemKey: "race-1", contentType: "application/json", body: `{"reason":"race"}`})
			if err != nil {
				t.Error(err)
			}
			answers <- r
		})
	}
	wg.Wait()
	close(answers)
	var bodies []string
	for r := range answers {
		if r.status != http.StatusAccepted {
			t.Fatalf("a racing repeat got %d: %s", r.status, r.body)
		}
		bodies = append(bodies, string(r.body))
	}
	for _, body := range bodies[1:] {
		if body != bodies[0] {
			t.Fatalf("racing repeats answered differently:\n%s\n%s", bodies[0], body)
		}
	}
	if n := b.replays(t, racing); n != 1 {
		t.Fatalf("20 racing repeats of one key recorded %d replays, want 1", n)
	}
}

// TestDLQReplayUnderOneKeyIsOnePass: a page replay repeated under its key answers as the first
// did and replays nothing again, even a delivery that died again.
func TestDLQReplayUnderOneKeyIsOnePass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.story(t, "acme", "webhook", "https://example.com/d1", time.Now().Add(-time.Minute), domain.OutcomePermanent)
	c := b.story(t, "acme", "webhook", "https://example.com/d2", time.Now(), domain.OutcomePermanent)
	b.project(t)
	page := func() resp {
		return b.do(t, req{method: http.MethodPost, path: "/v1/dlq/replay?limit=10", apiKey: keyAcme, idemKey: "page-1",
			contentType: "application/json", body: `{"reason":"outage over"}`})
	}
	first := page()
	first.expect(t, http.StatusOK, nil)
	b.dieAgain(t, a)
	b.project(t)
	again := page()
	again.expect(t, http.StatusOK, nil)
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Fatalf("repeat: %s (header %q), first %s", again.body, again.header.Get("Idempotent-Replayed"), first.body)
	}
	if b.replays(t, a) != 1 || b.replays(t, c) != 1 {
		t.Fatalf("replays after a repeated page: %d and %d, want 1 each", b.replays(t, a), b.replays(t, c))
	}
}

// TestQueriesThatDoNotDecodeAre400: a pair of the query that does not decode (a bad escape, a
// semicolon) is refused naming its parameter, not dropped: dropped, a dry_run accepted for real
// and a recipient filter widened the list to every delivery.
func TestQueriesThatDoNotDecodeAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refusing := b.refusing()
	for i, query := range []string{"dry_run=%zz", "dry_run=true;", "%zz=1"} {
		field := "dry_run"
		if i == 2 {
			field = "query"
		}
		refusing.do(t, req{method: http.MethodPost, path: "/v1/deliveries?" + query, apiKey: keyAcme, idemKey: "undecodable-" + strconv.Itoa(i),
			contentType: "application/json", body: deliveryBody("https://example.com/undecodable")}).expectProblem(t, http.StatusBadRequest, field)
		refusing.do(t, req{method: http.MethodPost, path: "/v1/notifications?" + query, apiKey: keyAcme, idemKey: "undecodable-n-" + strconv.Itoa(i),
			contentType: "application/json", body: notificationBody("https://example.com/undecodable")}).expectProblem(t, http.StatusBadRequest, field)
	}
	if n := b.count(t, `SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("refused accepts recorded %d events", n)
	}
	b.accept(t, "undecodable-listed", "https://example.com/listed")
	b.project(t)
	refusing.get(t, "/v1/deliveries?recipient=%zz", keyAcme).expectProblem(t, http.StatusBadRequest, "recipient")
	refusing.get(t, "/v1/dlq?recipient=x;", keyAcme).expectProblem(t, http.StatusBadRequest, "recipient")
	refusing.get(t, "/v1/deliveries?limit=1&state=%", keyAcme).expectProblem(t, http.StatusBadRequest, "state")
}

// TestTwoIdempotencyKeysOnAnAcceptAre400: which of two keys names the request is anyone's guess,
// so an accept with two is refused and records nothing, as a replay with two is.
func TestTwoIdempotencyKeysOnAnAcceptAre400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct{ path, body string }{
		{"/v1/deliveries", deliveryBody("https://example.com/two-keys")},
		{"/v1/notifications", notificationBody("https://example.com/two-keys")},
	} {
		hr, err := http.NewRequest(http.MethodPost, b.url+tt.path, strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Authorization", "Bearer "+keyAcme)
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Add("Idempotency-Key", "first")
		hr.Header.Add("Idempotency-Key", "second")
		res, err := b.client.Do(hr.WithContext(openapitest.Invalid(hr.Context())))
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp{status: res.StatusCode, header: res.Header, body: data}.expectProblem(t, http.StatusBadRequest, "Idempotency-Key")
	}
	if n := b.count(t, `SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("accepts with two keys recorded %d events", n)
	}
}

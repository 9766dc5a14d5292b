package httpapi_test

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
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
	id := uuid.NewString()
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
	b := setup(t)
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
	for _, path := range []string{"/v1/deliveries/urn:uuid:" + acc.ID, "/v1/deliveries/urn:uuid:" + acc.ID + "/events",
		"/v1/deliveries/{" + acc.ID + "}", "/v1/deliveries/" + strings.ReplaceAll(acc.ID, "-", "")} {
		b.get(t, path, keyAcme).expect(t, http.StatusOK, nil)
	}
	b.operatorPost(t, "/v1/deliveries/urn:uuid:"+acc.ID+"/replay", keyAcme, "").expectProblem(t, http.StatusConflict, "state")
	b.operatorPost(t, "/v1/deliveries/urn:uuid:"+uuid.NewString()+"/reconcile", keyAcme,
		`{"outcome":"delivered","evidence":"e"}`).expectProblem(t, http.StatusNotFound, "")

	cursor := func(raw string) string { return base64.RawURLEncoding.EncodeToString([]byte(raw)) }
	at := time.Now().Add(time.Hour).UnixMicro()
	b.get(t, "/v1/deliveries?cursor="+cursor(`{"a":`+strconv.FormatInt(at, 10)+`,"i":"urn:uuid:`+uuid.NewString()+`"}`), keyAcme).expect(t, http.StatusOK, nil)
	b.get(t, "/v1/deliveries?cursor="+cursor(`{"a":-9000000000000000000,"i":"`+uuid.NewString()+`"}`), keyAcme).
		expectProblem(t, http.StatusBadRequest, "cursor")
	b.get(t, "/v1/dlq?cursor="+cursor(`{"a":9000000000000000000,"i":"`+uuid.NewString()+`"}`), keyAcme).
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
	b.get(t, "/v1/deliveries/"+acc.ID+"/events?verbose=1", keyAcme).expectProblem(t, http.StatusBadRequest, "verbose")
	r := b.do(t, req{method: http.MethodPost, path: "/v1/deliveries?dry_run=true", apiKey: keyAcme, idemKey: "params-2",
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
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("two Authorization headers: status %d, want 400", res.StatusCode)
	}
}

package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// jsonBody encodes members as a request body (escapes and all: "\u001b" stays what it is).
func jsonBody(t *testing.T, members map[string]any) string {
	t.Helper()
	b, err := json.Marshal(members)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOperatorTextMustSaySomethingPrintable: what an operator writes that the ledger records
// (reason, actor, evidence, provider_operation_id, a job's recipient filter) is refused, 400
// naming the field, when it is only white space where it is given, or when it holds a control
// character (ESC, BEL, a line break, DEL, C1) or a bidi control: such text would show other
// than it is stored in the console, a terminal or a log. Nothing is recorded. Text in any
// script, with dashes and emoji, is taken. They used to be taken as given: a reason of two
// spaces replayed the unknown deliveries of a job, "   " as evidence reconciled a delivery.
func TestOperatorTextMustSaySomethingPrintable(t *testing.T) {
	t.Parallel()
	var jobs *commands.ReplayJobs
	b := setup(t, withReplayJobs(&jobs))
	dead := b.story(t, "acme", "webhook", "https://example.com/dead", time.Now().Add(-time.Minute), domain.OutcomePermanent)
	unknown := b.story(t, "acme", "webhook", "https://example.com/unknown", time.Now(), domain.OutcomeUnknown)
	b.project(t)
	const escape = "\u001b]0;X\u0007"
	for i, c := range []struct {
		path  string
		body  map[string]any
		field string
	}{
		{"/v1/replays", map[string]any{"reason": "  ", "include_unknown": true}, "reason"},
		{"/v1/replays", map[string]any{"reason": escape}, "reason"},
		{"/v1/replays", map[string]any{"reason": "fixed", "actor": "\u202eevil"}, "actor"},
		{"/v1/replays", map[string]any{"reason": "fixed", "actor": " \t "}, "actor"},
		{"/v1/replays", map[string]any{"reason": "fixed", "recipient": "https://example.com/dead\n"}, "recipient"},
		{"/v1/replays", map[string]any{"dry_run": true, "reason": "bell\a"}, "reason"},
		{"/v1/deliveries/" + dead + "/replay", map[string]any{"reason": escape}, "reason"},
		{"/v1/deliveries/" + dead + "/replay", map[string]any{"reason": "fixed", "actor": "ops\nrm -rf"}, "actor"},
		{"/v1/deliveries/" + dead + "/replay", map[string]any{"reason": "   "}, "reason"},
		{"/v1/dlq/replay", map[string]any{"reason": "del\u007f"}, "reason"},
		{"/v1/dlq/replay", map[string]any{"reason": "c1\u0085"}, "reason"},
		{"/v1/deliveries/" + unknown + "/reconcile", map[string]any{"outcome": "delivered", "evidence": "   "}, "evidence"},
		{"/v1/deliveries/" + unknown + "/reconcile", map[string]any{"outcome": "delivered", "evidence": "log " + escape}, "evidence"},
		{"/v1/deliveries/" + unknown + "/reconcile", map[string]any{"outcome": "delivered", "evidence": "line one\nline two"}, "evidence"},
		{"/v1/deliveries/" + unknown + "/reconcile", map[string]any{"outcome": "delivered", "evidence": "receipt", "actor": "\u200fops"}, "actor"},
		{"/v1/deliveries/" + unknown + "/reconcile", map[string]any{"outcome": "delivered", "evidence": "receipt",
			"provider_operation_id": "SM\u001b[2J"}, "provider_operation_id"},
	} {
		b.do(t, req{method: http.MethodPost, path: c.path, apiKey: keyAcme, idemKey: "text-" + string(rune('a'+i)),
			contentType: "application/json", body: jsonBody(t, c.body)}).expectProblem(t, http.StatusBadRequest, c.field)
	}
	if n := b.count(t, `SELECT count(*) FROM events WHERE type NOT IN ('delivery.accepted', 'delivery.queued',
		'delivery.attempt_started', 'delivery.dead_lettered', 'delivery.outcome_unknown')`); n != 0 {
		t.Fatalf("refused operator text recorded %d decisions", n)
	}
	if n := b.count(t, `SELECT count(*) FROM replay_jobs`); n != 0 {
		t.Fatalf("refused operator text created %d replay jobs", n)
	}

	b.do(t, req{method: http.MethodPost, path: "/v1/deliveries/" + dead + "/replay", apiKey: keyAcme, contentType: "application/json",
		body: jsonBody(t, map[string]any{"reason": "Empfänger repariert — ✓ 受信者", "actor": "ops:zoë"})}).expect(t, http.StatusAccepted, nil)
	b.do(t, req{method: http.MethodPost, path: "/v1/deliveries/" + unknown + "/reconcile", apiKey: keyAcme, contentType: "application/json",
		body: jsonBody(t, map[string]any{"outcome": "delivered", "evidence": "receipt SM123 (מסירה)"})}).expect(t, http.StatusOK, nil)
}

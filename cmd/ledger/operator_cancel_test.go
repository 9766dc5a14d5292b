package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// post sends an accept body to path with acme's key and returns the answer.
func (b *opBundle) post(t *testing.T, path, idemKey, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idemKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a map[string]any
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &a) != nil {
		t.Fatalf("accept: %d %s", resp.StatusCode, raw)
	}
	return a
}

// TestOperatorCancelsScheduledDeliveries: `ledger deliveries cancel` cancels a scheduled
// delivery (the same answer when repeated) and is refused, exit status 1 with the 409, for a
// delivered one; `ledger notifications cancel` cancels each delivery of a notification.
func TestOperatorCancelsScheduledDeliveries(t *testing.T) {
	t.Parallel()
	b := setupLedger(t)
	later := time.Now().Add(time.Hour).Format(time.RFC3339)
	one := b.post(t, "/v1/deliveries", "cancel-cli-1", fmt.Sprintf(
		`{"channel":"webhook","recipient":%q,"payload":{"order":1},"send_at":%q}`, b.receiver.URL+"/later", later))
	id, _ := one["id"].(string)
	if one["state"] != "scheduled" {
		t.Fatalf("accept answered %v", one)
	}
	for range 2 {
		code, out, errOut := b.cli(t, acmeKey, "deliveries", "cancel", id, "--reason", "customer unsubscribed", "--actor", "bob")
		if code != 0 || !strings.Contains(out, "cancelled "+id+": cancelled after the decision") {
			t.Fatalf("deliveries cancel: exit %d\n%s%s", code, out, errOut)
		}
	}
	code, out, _ := b.cli(t, acmeKey, "deliveries", "show", id)
	if code != 0 || !strings.Contains(lineOf(out, "delivery.cancelled"), "cancelled") {
		t.Fatalf("show after cancel:\n%s", out)
	}

	done := b.accept(t, acmeKey, "cancel-cli-2", "/now")
	b.waitState(t, done, "delivered")
	code, _, errOut := b.cli(t, acmeKey, "deliveries", "cancel", done)
	if code != 1 || !strings.Contains(errOut, "409 Conflict") || !strings.Contains(errOut, "delivered at attempt 1") {
		t.Fatalf("cancel of a delivered one: exit %d\n%s", code, errOut)
	}

	n := b.post(t, "/v1/notifications", "cancel-cli-3", fmt.Sprintf(
		`{"payload":{"order":3},"send_at":%q,"recipients":[{"channel":"webhook","recipient":%q},{"channel":"webhook","recipient":%q}]}`,
		later, b.receiver.URL+"/a", b.receiver.URL+"/b"))
	nid, _ := n["id"].(string)
	code, out, errOut = b.cli(t, acmeKey, "notifications", "cancel", nid)
	if code != 0 || strings.Count(out, " scheduled attempt 0 cancelled") != 0 || strings.Count(out, " cancelled attempt 0 cancelled\n") != 2 {
		t.Fatalf("notifications cancel: exit %d\n%s%s", code, out, errOut)
	}
}

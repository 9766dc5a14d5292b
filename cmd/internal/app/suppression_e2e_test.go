package app

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// Issue 25: the suppression list, preferences and categories, through the whole ledger.

// suppressionAnswer is the part of an accept's delivery, or of an entry, the tests read.
type suppressedDelivery struct {
	ID          string             `json:"id"`
	State       string             `json:"state"`
	Suppression *domain.Suppressed `json:"suppression"`
}

// acceptSuppressible posts a notification and returns its deliveries as the 202 names them.
func (b *e2eBundle) acceptSuppressible(t *testing.T, key string, notification map[string]any) []suppressedDelivery {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/notifications", key, notification)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %d %s", resp.StatusCode, body)
	}
	var a struct {
		Deliveries []suppressedDelivery `json:"deliveries"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatal(err)
	}
	return a.Deliveries
}

// suppress posts a suppression and returns the entry's id.
func (b *e2eBundle) suppress(t *testing.T, channel, recipient string) string {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/suppressions", "", map[string]any{"channel": channel, "recipient": recipient,
		"reason": "asked to stop", "actor": "alice"})
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("suppress %s: %d %s", recipient, resp.StatusCode, body)
	}
	var e domain.Suppression
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	return e.ID
}

// TestSuppressedRecipientIsRecordedSuppressedAtAcceptAndNeverSent: a recipient on the list (in
// another spelling of its URL) gets a suppressed delivery in the 202, named with its entry, never
// queued nor called, while the notification's other recipient is delivered; its status and
// history explain it. After the entry's removal the recipient is sent to again.
func TestSuppressedRecipientIsRecordedSuppressedAtAcceptAndNeverSent(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	entry := b.suppress(t, "webhook", b.sink.URL+"/gone")
	resp, body := b.do(t, "POST", "/v1/suppressions", "", map[string]any{"channel": "webhook", "recipient": b.sink.URL + "/gone#again"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), entry) {
		t.Fatalf("adding the same recipient again: %d %s, want 200 with entry %s", resp.StatusCode, body, entry)
	}

	gone := strings.Replace(b.sink.URL, "http://", "HTTP://", 1) + "/gone#f"
	ds := b.acceptSuppressible(t, "supp-1", map[string]any{"payload": map[string]any{"k": 1},
		"recipients": []map[string]string{{"channel": "webhook", "recipient": gone}, {"channel": "webhook", "recipient": b.sink.URL + "/fine"}}})
	if ds[0].State != "suppressed" || ds[0].Suppression == nil || ds[0].Suppression.SuppressionID != entry ||
		ds[0].Suppression.By != domain.SuppressedByList || ds[0].Suppression.Evidence == nil || ds[0].Suppression.Evidence.Actor != "alice" {
		t.Fatalf("the suppressed recipient's delivery: %+v, want suppressed by entry %s", ds[0], entry)
	}
	if ds[1].State != "accepted" {
		t.Fatalf("the other recipient's delivery: %+v, want accepted", ds[1])
	}
	b.waitState(t, ds[1].ID, domain.StateDelivered, 10*time.Second)
	status := b.waitState(t, ds[0].ID, domain.StateSuppressed, 5*time.Second)
	if status.Attempts != 0 {
		t.Fatalf("suppressed delivery: %+v, want no attempt", status)
	}
	var doc struct {
		Suppression *domain.Suppressed `json:"suppression"`
	}
	if resp, body := b.do(t, "GET", "/v1/deliveries/"+ds[0].ID, "", nil); resp.StatusCode != http.StatusOK || json.Unmarshal(body, &doc) != nil ||
		doc.Suppression == nil || doc.Suppression.SuppressionID != entry || doc.Suppression.Reason != "asked to stop" {
		t.Fatalf("GET of the suppressed delivery: %d %s, want it explained by entry %s", resp.StatusCode, body, entry)
	}
	b.waitListed(t, "/v1/deliveries?state=suppressed", ds[0].ID)
	if got := states(b.history(t, ds[0].ID)); strings.Join(got, ",") != "accepted,suppressed" {
		t.Fatalf("history of the suppressed delivery: %v", got)
	}
	// A row's payload is the forwarder's envelope, the work message inside it in base64.
	var messages, others int
	if err := b.schema.Pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE m LIKE '%' || $1 || '%'), count(*) FILTER (WHERE m LIKE '%' || $2 || '%')
		FROM (SELECT convert_from(decode(payload->>'payload', 'base64'), 'UTF8') AS m FROM ledger_outbox_all) o`, ds[0].ID, ds[1].ID).Scan(&messages, &others); err != nil || messages != 0 || others != 1 {
		t.Fatalf("work messages of the suppressed delivery: %d, of the other: %d (%v), want none and one", messages, others, err)
	}
	if n := b.sink.count(ds[0].ID); n != 0 {
		t.Fatalf("the sink was called %d times for the suppressed delivery", n)
	}

	resp, body = b.do(t, "DELETE", "/v1/suppressions/"+entry, "", map[string]any{"reason": "they asked again", "actor": "bob"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"removed_by":"bob"`) {
		t.Fatalf("remove: %d %s", resp.StatusCode, body)
	}
	after := b.acceptSuppressible(t, "supp-2", map[string]any{"payload": map[string]any{"k": 2},
		"recipients": []map[string]string{{"channel": "webhook", "recipient": gone}}})
	if after[0].State != "accepted" {
		t.Fatalf("after the removal: %+v, want accepted", after[0])
	}
	b.waitState(t, after[0].ID, domain.StateDelivered, 10*time.Second)
	b.waitState(t, ds[0].ID, domain.StateSuppressed, time.Second) // suppressed is terminal
}

// TestSuppressionAfterTheAcceptStopsTheAttempt: a delivery accepted (scheduled 1.5 s ahead)
// before its recipient is suppressed ends suppressed when its attempt would start, by the worker,
// and the provider is never called.
func TestSuppressionAfterTheAcceptStopsTheAttempt(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	id, state := b.acceptAt(t, "later-1", b.sink.URL+"/later", time.Now().Add(1500*time.Millisecond))
	if state != "scheduled" {
		t.Fatalf("accept answered %s", state)
	}
	entry := b.suppress(t, "webhook", b.sink.URL+"/later")
	b.waitState(t, id, domain.StateSuppressed, 15*time.Second)
	events := b.history(t, id)
	last := events[len(events)-1]
	var data domain.Suppressed
	if err := json.Unmarshal(last.Data, &data); err != nil {
		t.Fatal(err)
	}
	if last.Type != string(domain.EventSuppressed) || data.SuppressionID != entry || data.From != domain.StateQueued || data.Attempt != 1 {
		t.Fatalf("last event %s %s, want delivery.suppressed by %s from queued at attempt 1", last.Type, last.Data, entry)
	}
	time.Sleep(200 * time.Millisecond)
	if n := b.sink.count(id); n != 0 {
		t.Fatalf("the sink was called %d times", n)
	}
}

// TestOptOutSuppressesItsCategoryOnlyAndRequiredCannotBeOptedOut: categories come from the file;
// an undeclared one is 400 naming category; an opt-out of marketing suppresses marketing and
// leaves account (required, which cannot be opted out of) to be delivered.
func TestOptOutSuppressesItsCategoryOnlyAndRequiredCannotBeOptedOut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	if err := os.WriteFile(path, []byte(`channels:
  webhook: {providers: [webhook]}
providers:
  webhook: {type: webhook, timeout: 2s}
categories:
  marketing: {}
  account: {required: true}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setupE2E(t, "", func(c *Config) { c.ConfigFile = path })
	recipient := b.sink.URL + "/person"
	put := func(category string, optedOut bool) (int, string) {
		resp, body := b.do(t, "PUT", "/v1/preferences", "", map[string]any{"channel": "webhook", "recipient": recipient,
			"category": category, "opted_out": optedOut})
		return resp.StatusCode, string(body)
	}
	if code, body := put("marketing", true); code != http.StatusOK || !strings.Contains(body, `"opted_out":true`) {
		t.Fatalf("opt out of marketing: %d %s", code, body)
	}
	if code, body := b.refusing().put(t, recipient, "account"); code != http.StatusBadRequest || !strings.Contains(body, `"field":"category"`) {
		t.Fatalf("opt out of a required category: %d %s, want 400 naming category", code, body)
	}
	resp, body := b.refusing().do(t, "POST", "/v1/notifications", "cat-0", map[string]any{"payload": map[string]any{"k": 0},
		"category": "newsletter", "recipients": []map[string]string{{"channel": "webhook", "recipient": recipient}}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"field":"category"`) {
		t.Fatalf("an undeclared category: %d %s, want 400 naming category", resp.StatusCode, body)
	}
	one := func(key, category string) suppressedDelivery {
		n := map[string]any{"payload": map[string]any{"k": key}, "recipients": []map[string]string{{"channel": "webhook", "recipient": recipient}}}
		if category != "" {
			n["category"] = category
		}
		return b.acceptSuppressible(t, key, n)[0]
	}
	marketing, account, none := one("cat-1", "marketing"), one("cat-2", "account"), one("cat-3", "")
	if marketing.State != "suppressed" || marketing.Suppression.By != domain.SuppressedByPreference || marketing.Suppression.Category != "marketing" {
		t.Fatalf("marketing: %+v, want suppressed by the opt-out", marketing)
	}
	if account.State != "accepted" || none.State != "accepted" {
		t.Fatalf("account %+v and no category %+v: want both accepted", account, none)
	}
	b.waitState(t, account.ID, domain.StateDelivered, 10*time.Second)
	b.waitState(t, none.ID, domain.StateDelivered, 10*time.Second)

	// A suppression of the recipient applies to the required category too.
	b.suppress(t, "webhook", recipient)
	if again := one("cat-4", "account"); again.State != "suppressed" || again.Suppression.By != domain.SuppressedByList {
		t.Fatalf("account after the suppression: %+v, want suppressed by the list", again)
	}
	resp, body = b.do(t, "GET", "/v1/preferences?channel=webhook&recipient="+recipient, "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"category":"marketing"`) {
		t.Fatalf("preferences: %d %s", resp.StatusCode, body)
	}
}

// put opts recipient out of category on the webhook channel.
func (b *e2eBundle) put(t *testing.T, recipient, category string) (int, string) {
	resp, body := b.do(t, "PUT", "/v1/preferences", "", map[string]any{"channel": "webhook", "recipient": recipient,
		"category": category, "opted_out": true})
	return resp.StatusCode, string(body)
}

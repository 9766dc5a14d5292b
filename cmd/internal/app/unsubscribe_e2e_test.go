package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/adapters/unsubscribe"
	"github.com/deliveryledger/ledger/domain"
)

// testUnsubscribeSecret is LEDGER_UNSUBSCRIBE_SECRET in these tests.
const testUnsubscribeSecret = "unsubscribe-e2e-secret-0123456789abcdef"

// setupUnsubscribeE2E starts an SMTP fake and a ledger whose email channel sends through it,
// with the categories marketing and account (required), the unsubscribe secret, and its own
// loopback address as public_url, so the links in the messages lead back to it as they are.
func setupUnsubscribeE2E(t *testing.T) (*emailBundle, string) {
	t.Helper()
	srv, err := smtpfake.Start(smtpfake.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	host, port, err := net.SplitHostPort(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	file := fmt.Sprintf(`public_url: http://%s
categories:
  marketing: {}
  account: {required: true}
channels:
  email: {providers: [relay], %s}
providers:
  relay: {type: smtp, host: %s, port: %s, tls: none, from: "Ledger <noreply@ledger.test>", timeout: 2s}
`, addr, emailRetry, host, port)
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setupE2E(t, "", func(c *Config) {
		c.ConfigFile, c.HTTPAddr, c.UnsubscribeSecret = path, addr, testUnsubscribeSecret
	})
	return &emailBundle{e2eBundle: b, smtp: srv}, addr
}

// acceptCategory accepts one email of category to ann@example.com and returns its id and the
// state the 202 answer gives it.
func (b *emailBundle) acceptCategory(t *testing.T, key, category string) (string, string) {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/deliveries", key, map[string]any{"channel": "email", "recipient": "ann@example.com",
		"category": category, "payload": map[string]any{"subject": "Spring sale", "text": "Everything must go."}})
	var one struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if err := json.Unmarshal(body, &one); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept of category %s: %d %s", category, resp.StatusCode, body)
	}
	return one.ID, one.State
}

// TestOneClickUnsubscribeThroughTheWorkers: an email of category marketing goes out with
// List-Unsubscribe and List-Unsubscribe-Post (RFC 8058); following the link as the SMTP fake
// received it, a GET shows the page and records nothing, the POST of List-Unsubscribe-Post's
// body records the opt-out, and the next marketing email to the recipient is accepted
// suppressed and never reaches the server. An email of the required category account carries
// no List-Unsubscribe and is still delivered; an undeclared category is 400 naming category.
func TestOneClickUnsubscribeThroughTheWorkers(t *testing.T) {
	t.Parallel()
	b, addr := setupUnsubscribeE2E(t)
	prefs := postgres.NewSuppressionStore(b.schema.Pool)

	first, state := b.acceptCategory(t, "sale-1", "marketing")
	if state != string(domain.StateAccepted) {
		t.Fatalf("the first marketing email was accepted %s", state)
	}
	b.waitState(t, first, domain.StateDelivered, 15*time.Second)
	msgs := b.smtp.Messages()
	if len(msgs) != 1 {
		t.Fatalf("the server got %d messages, want 1", len(msgs))
	}
	h := msgs[0].Header()
	listUnsubscribe, post := h.Get("List-Unsubscribe"), h.Get("List-Unsubscribe-Post")
	if post != "List-Unsubscribe=One-Click" {
		t.Fatalf("List-Unsubscribe-Post %q, want List-Unsubscribe=One-Click", post)
	}
	link, ok := strings.CutPrefix(listUnsubscribe, "<")
	link, closed := strings.CutSuffix(link, ">")
	if !ok || !closed || !strings.HasPrefix(link, "http://"+addr+"/u/") {
		t.Fatalf("List-Unsubscribe %q, want <http://%s/u/{token}>", listUnsubscribe, addr)
	}
	token, err := unsubscribe.Verify([]byte(testUnsubscribeSecret), strings.TrimPrefix(link, "http://"+addr+"/u/"))
	if want := (unsubscribe.Token{Tenant: "acme", Channel: "email", Recipient: "ann@example.com", Category: "marketing"}); err != nil || token != want {
		t.Fatalf("the link's token is %+v (%v), want %+v", token, err, want)
	}

	client := openapitest.Client(t)
	send := func(method, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, link, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		page, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(page)
	}
	optedOut := func() bool {
		t.Helper()
		ps, err := prefs.Preferences(context.Background(), "acme", "email", "ann@example.com")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Category == "marketing" && p.OptedOut && p.Source == domain.PreferenceByUnsubscribe {
				return true
			}
		}
		return false
	}
	if status, page := send(http.MethodGet, ""); status != http.StatusOK || !strings.Contains(page, "marketing") {
		t.Fatalf("GET of the link: %d %s", status, page)
	}
	if optedOut() {
		t.Fatal("a GET of the link opted the recipient out")
	}
	if status, page := send(http.MethodPost, post); status != http.StatusOK {
		t.Fatalf("the one-click POST: %d %s", status, page)
	}
	if !optedOut() {
		t.Fatal("the one-click POST answered 200 and recorded no opt-out of marketing by unsubscribe")
	}

	second, state := b.acceptCategory(t, "sale-2", "marketing")
	if state != string(domain.StateSuppressed) {
		t.Fatalf("the marketing email after the opt-out was accepted %s, want suppressed", state)
	}
	// The required category is not opted out of, and carries no link: its delivery is also the
	// barrier after which a send of the suppressed one would have shown.
	account, state := b.acceptCategory(t, "account-1", "account")
	if state != string(domain.StateAccepted) {
		t.Fatalf("the account email was accepted %s, want accepted", state)
	}
	b.waitState(t, account, domain.StateDelivered, 15*time.Second)
	msgs = b.smtp.Messages()
	if len(msgs) != 2 || msgs[1].MessageID() != "<"+account+"@ledger.test>" {
		t.Fatalf("the server got %d messages, want the first marketing one and the account one (the suppressed %s never)", len(msgs), second)
	}
	if h := msgs[1].Header(); h.Get("List-Unsubscribe") != "" || h.Get("List-Unsubscribe-Post") != "" {
		t.Errorf("the required category's message carries List-Unsubscribe %q, List-Unsubscribe-Post %q", h.Get("List-Unsubscribe"), h.Get("List-Unsubscribe-Post"))
	}

	resp, body := b.do(t, "POST", "/v1/deliveries", "news-1", map[string]any{"channel": "email", "recipient": "ann@example.com",
		"category": "newsletter", "payload": map[string]any{"subject": "News", "text": "News."}})
	var p struct {
		Field string `json:"field"`
	}
	if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &p) != nil || p.Field != "category" {
		t.Errorf("an undeclared category: %d %s, want 400 naming category", resp.StatusCode, body)
	}
}

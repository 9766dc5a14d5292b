package app

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/domain"
)

// TestEmailLimitsAtAcceptAndOnTheWire (issue 23, row 9): through the real server, a 10,000
// character subject is a 400 naming payload.subject and a 300 character local part one naming
// recipient, both recording nothing; the longest subject accepted, one run without a space,
// reaches the SMTP server folded and encoded, no header line over 998 octets, and reads back
// whole.
func TestEmailLimitsAtAcceptAndOnTheWire(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, smtpfake.Config{}, "none", emailRetry)
	for _, tc := range []struct{ recipient, subject, field string }{
		{"ada@example.org", strings.Repeat("s", 10000), "payload.subject"},
		{strings.Repeat("a", 300) + "@example.org", "Order 7 shipped", "recipient"},
	} {
		resp, body := b.do(t, "POST", "/v1/deliveries", "limits-"+tc.field, map[string]any{"channel": "email",
			"recipient": tc.recipient, "payload": map[string]any{"subject": tc.subject, "text": "On its way."}})
		var p struct {
			Field string `json:"field"`
		}
		_ = json.Unmarshal(body, &p)
		if resp.StatusCode != http.StatusBadRequest || p.Field != tc.field || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("accept with an overlong %s: %d %.200s, want a 400 problem naming it", tc.field, resp.StatusCode, body)
		}
	}

	subject := strings.Repeat("s", 998)
	resp, body := b.do(t, "POST", "/v1/deliveries", "limits-longest", map[string]any{"channel": "email",
		"recipient": "ada@example.org", "payload": map[string]any{"subject": subject, "text": "On its way."}})
	var one struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &one); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept the longest subject: %d %s", resp.StatusCode, body)
	}
	b.waitState(t, one.ID, domain.StateDelivered, 15*time.Second)
	msgs := b.smtp.Messages()
	if len(msgs) != 1 {
		t.Fatalf("the SMTP server read %d messages, want the one accepted", len(msgs))
	}
	head, _, _ := bytes.Cut(msgs[0].Data, []byte("\r\n\r\n"))
	for _, line := range strings.Split(string(head), "\r\n") {
		if len(line) > 998 {
			t.Errorf("a header line of %d octets: %.80q…", len(line), line)
		}
	}
	if got := msgs[0].Subject(); got != subject {
		t.Errorf("the subject reads back as %d characters, want the %d sent", len(got), len(subject))
	}
}

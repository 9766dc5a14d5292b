package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// storedAnswer is the stored answer of acme's accept request under key, as its row holds it.
func (b *bundle) storedAnswer(t *testing.T, key string) []byte {
	t.Helper()
	var stored []byte
	if err := b.schema.Pool.QueryRow(context.Background(), `SELECT response FROM accept_requests
		WHERE tenant = 'acme' AND request_key = $1`, key).Scan(&stored); err != nil {
		t.Fatalf("stored answer of %s: %v", key, err)
	}
	return stored
}

// TestAcceptRepeatAndLookupGetTheFirstAnswer: a repeat of an accept, and the audit lookup by its
// Idempotency-Key, answer byte for byte what the first request was answered, for a single
// delivery, a scheduled one, a suppressed one and a fan-out; the answer is stored in the compact
// form, a single webhook delivery's in at most 100 bytes (its JSON took 273).
func TestAcceptRepeatAndLookupGetTheFirstAnswer(t *testing.T) {
	t.Parallel()
	var accept *commands.AcceptHandler
	b := setup(t, func(_ *httpapi.Config, deps *httpapi.Deps) { accept = deps.Accept })
	suppressions := postgres.NewSuppressionStore(b.schema.Pool)
	accept.Suppression = &commands.SuppressionCheck{Store: suppressions}
	if _, _, err := suppressions.AddSuppression(context.Background(), domain.Suppression{Tenant: "acme", Channel: "webhook",
		Recipient: "https://example.com/gone", Source: domain.SuppressionManual, Reason: "asked to stop",
		Evidence: domain.SuppressionEvidence{Actor: "alice"}, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	sendAt := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)

	for _, c := range []struct {
		name, path, body string
	}{
		{"delivery", "/v1/deliveries", deliveryBody("https://example.com/hook")},
		{"scheduled delivery", "/v1/deliveries",
			`{"channel":"webhook","recipient":"https://example.com/later","payload":{},"send_at":"` + sendAt + `"}`},
		{"scheduled notification", "/v1/notifications",
			`{"payload":{},"send_at":"` + sendAt + `","recipients":[{"channel":"webhook","recipient":"https://example.com/later"}]}`},
		{"suppressed", "/v1/notifications", notificationBody("https://example.com/gone", "https://example.com/fine")},
		{"fan-out", "/v1/notifications", notificationBody("https://a.example.com/h", "https://b.example.com/h", "https://c.example.com/h")},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "answer-" + c.name
			first := b.post(t, c.path, key, c.body)
			first.expect(t, http.StatusAccepted, nil)
			again := b.post(t, c.path, key, c.body)
			again.expect(t, http.StatusAccepted, nil)
			if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) {
				t.Fatalf("repeat (replayed %q) answered\n%s\nthe first answer was\n%s", again.header.Get("Idempotent-Replayed"), again.body, first.body)
			}
			stored := b.storedAnswer(t, key)
			if stored[0] == '{' {
				t.Fatalf("the answer is stored as JSON: %s", stored)
			}
			res, err := commands.DecodeAcceptAnswer(stored)
			if err != nil {
				t.Fatal(err)
			}
			lookup := b.get(t, "/v1/requests/"+key, keyAcme)
			lookup.expect(t, http.StatusOK, nil)
			if c.path == "/v1/notifications" && !bytes.Equal(lookup.body, first.body) {
				t.Fatalf("lookup answered\n%s\nthe accept answered\n%s", lookup.body, first.body)
			}
			var one deliveryAccepted
			var all notificationAccepted
			if err := json.Unmarshal(first.body, &one); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(lookup.body, &all); err != nil {
				t.Fatal(err)
			}
			if c.path == "/v1/deliveries" && (len(all.Deliveries) != 1 || all.ID != one.NotificationID || all.Deliveries[0].ID != one.ID ||
				all.Deliveries[0].State != one.State || !all.AcceptedAt.Equal(one.AcceptedAt)) {
				t.Fatalf("lookup answered %s, the accept answered %s", lookup.body, first.body)
			}
			switch c.name {
			case "delivery":
				var size int
				if err := b.schema.Pool.QueryRow(context.Background(), `SELECT pg_column_size(response) FROM accept_requests
					WHERE request_key = $1`, key).Scan(&size); err != nil {
					t.Fatal(err)
				}
				if size > 100 {
					t.Fatalf("a single webhook delivery's answer takes %d bytes, want at most 100", size)
				}
				t.Logf("a single webhook delivery's answer takes %d bytes", size)
			case "suppressed":
				if d := res.Deliveries[0]; d.State != domain.StateSuppressed || d.Suppression == nil || d.Suppression.Evidence == nil ||
					d.Suppression.Evidence.Actor != "alice" || res.Deliveries[1].State != domain.StateAccepted {
					t.Fatalf("stored answer %+v, want the first delivery suppressed by alice's entry", res)
				}
			case "scheduled notification", "scheduled delivery":
				if res.SendAt == nil || res.SendAt.Format(time.RFC3339Nano) != sendAt || res.Deliveries[0].State != domain.StateScheduled {
					t.Fatalf("stored answer %+v, want scheduled for %s", res, sendAt)
				}
			}
		})
	}
}

// TestAnswersStoredAsJSONAreStillAnswered: an answer stored as JSON before the migration that
// made the answers bytes (every answer was JSON then) is the answer of a repeat and of the audit
// lookup after it, as it was before; a new answer beside it is compact.
func TestAnswersStoredAsJSONAreStillAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	before := pgtest.MigrationVersion(t, "accept_answer_bytes") - 1
	body := notificationBody("https://a.example.com/old", "https://b.example.com/old")
	first := b.post(t, "/v1/notifications", "old-1", body)
	first.expect(t, http.StatusAccepted, nil)
	// The row as the accept stored it before: the JSON of its answer, as jsonb.
	res, err := commands.DecodeAcceptAnswer(b.storedAnswer(t, "old-1"))
	if err != nil {
		t.Fatal(err)
	}
	old, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var hash []byte
	var created time.Time
	if err := b.schema.Pool.QueryRow(ctx, `DELETE FROM accept_requests WHERE request_key = 'old-1'
		RETURNING request_hash, created_at`).Scan(&hash, &created); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, before, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO accept_requests (tenant, request_key, request_hash, response, created_at)
		VALUES ('acme', 'old-1', $1, $2::text::jsonb, $3)`, hash, string(old), created); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, -1, nil); err != nil {
		t.Fatal(err)
	}
	if stored := b.storedAnswer(t, "old-1"); stored[0] != '{' {
		t.Fatalf("the answer stored before is %x after the migration, want its JSON", stored)
	}

	again := b.post(t, "/v1/notifications", "old-1", body)
	again.expect(t, http.StatusAccepted, nil)
	if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) {
		t.Fatalf("repeat (replayed %q) answered\n%s\nthe first answer was\n%s", again.header.Get("Idempotent-Replayed"), again.body, first.body)
	}
	lookup := b.get(t, "/v1/requests/old-1", keyAcme)
	lookup.expect(t, http.StatusOK, nil)
	if !bytes.Equal(lookup.body, first.body) {
		t.Fatalf("lookup answered\n%s\nthe accept answered\n%s", lookup.body, first.body)
	}
	b.post(t, "/v1/notifications", "new-1", body).expect(t, http.StatusAccepted, nil)
	if stored := b.storedAnswer(t, "new-1"); stored[0] == '{' {
		t.Fatalf("a new answer beside the old one is stored as JSON: %s", stored)
	}
}

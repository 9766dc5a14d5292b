package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/providers/vonage"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// fuzzReceiptToken is the Vonage callback secret of the fuzzed server: the fuzzer holds it, as
// whoever read a callback URL would.
const fuzzReceiptToken = "fuzz-callback-token-0123456789"

// withVonageReceipts takes Vonage receipts at /v1/receipts/vonage, recorded on the test's store.
func withVonageReceipts(t testing.TB) option {
	return func(_ *httpapi.Config, deps *httpapi.Deps) {
		sender, err := vonage.New(vonage.Config{Provider: "vonage", APIKey: "fuzzkey", APISecret: "fuzz-secret", From: "Ledger",
			Callback: "http://127.0.0.1/v1/receipts/vonage?token=" + fuzzReceiptToken, CallbackToken: fuzzReceiptToken})
		if err != nil {
			t.Fatal(err)
		}
		store := deps.Requests.(*postgres.EventStore)
		topics := amqp.Topology{Prefix: "test", Channels: []string{"webhook", "sms"}, Tiers: []time.Duration{time.Second}}
		deps.Receipts = &httpapi.Receipts{Parsers: map[string]httpapi.ReceiptParser{"vonage": sender},
			Record: commands.NewRecordReceiptHandler(store, store, topics, commands.SystemClock{}, serverPolicies),
			ByGET:  map[string]bool{"vonage": true}}
	}
}

// smsAcceptedBy stores an SMS delivery of tenant whose first attempt provider accepted under
// messageID, awaiting its receipt, and returns its id.
func (b *bundle) smsAcceptedBy(t testing.TB, tenant, provider, messageID string) string {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := commands.DeliveryID(uuid.NewString(), commands.Recipient{}, now) // the views are partitioned by it
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: tenant, NotificationID: uuid.NewString(), Channel: "sms",
		Recipient: "+15005550006", Payload: json.RawMessage(`{"text":"hi"}`), Priority: domain.PriorityNormal, MaxAttempts: 3,
		RequestKey: "sms-" + id}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() ([]domain.Event, error){
		func() ([]domain.Event, error) { return d.Queue(now) },
		func() ([]domain.Event, error) { return d.StartAttempt(provider, now) },
		func() ([]domain.Event, error) {
			return d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeAccepted, Provider: provider, ProviderOperationID: messageID,
				StatusCode: 200, ReceiptTimeout: time.Hour, ReceiptMaxWait: 24 * time.Hour}, domain.DefaultRetryPolicy(), now, 0)
		},
	} {
		es, err := step()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, es...)
	}
	if err := b.store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}
	return id
}

// FuzzVonageReceipts posts arbitrary Vonage receipts, with the callback token, about the
// messages of two tenants' SMS deliveries, through the real router to the real database (issue
// 23, row 1): never a 500; a receipt is only ever recorded on the delivery Vonage gave its
// messageId, whatever client-ref names (another tenant's webhook delivery, the other SMS, the
// right one spelt as a URN); the answer names no other delivery and echoes nothing of the
// callback; and however many receipts come, a message's history stays bounded.
func FuzzVonageReceipts(f *testing.F) {
	b := setup(f, withVonageReceipts(f))
	messages := []string{"0A0000000000F001", "0A0000000000F002"}
	owners := []string{b.smsAcceptedBy(f, "acme", "vonage", messages[0]), b.smsAcceptedBy(f, "globex", "vonage", messages[1])}
	webhook := b.story(f, "globex", "webhook", "https://example.com/other", time.Now(), domain.OutcomeDelivered)
	for _, seed := range []struct {
		message                  uint8
		status, code, ref, extra string
	}{
		{0, "failed", "6", webhook, ""}, {0, "failed", "6", owners[1], ""}, {0, "failed", "6", "urn:uuid:" + owners[0], ""},
		{1, "delivered", "0", owners[1], ""}, {0, "accepted", "0", "", ""}, {0, "buffered", "1", owners[0], "&client-ref=x"},
		{0, "Invented", "99", owners[0], ""}, {1, "expired", "", "", "&message-timestamp=2026-01-01+00%3A00%3A00"},
		{0, "rejected", "4294967296", "\x00", ""}, {1, "DELIVERED", "0", strings.Repeat("r", 100), "&%zz"},
	} {
		f.Add(seed.message, seed.status, seed.code, seed.ref, seed.extra)
	}
	h := b.handler
	historyLen := func(t testing.TB, id string) int {
		t.Helper()
		events, err := b.store.Load(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return len(events)
	}
	webhookLen := historyLen(f, webhook)
	f.Fuzz(func(t *testing.T, message uint8, status, code, ref, extra string) {
		i := int(message) % len(messages)
		form := url.Values{"messageId": {messages[i]}, "status": {status}, "err-code": {code}}
		if ref != "" {
			form.Set("client-ref", ref)
		}
		body := form.Encode() + extra
		raw := fmt.Sprintf("POST /v1/receipts/vonage?token=%s HTTP/1.1\r\nHost: ledger\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s",
			fuzzReceiptToken, len(body), body)
		rec, ok := serveRaw(t, h, raw)
		if !ok {
			return
		}
		checkAnswer(t, raw, rec)
		answer := rec.Body.String()
		if len(answer) > 1024 || strings.ContainsFunc(strings.TrimSuffix(answer, "\n"), func(r rune) bool { return !unicode.IsPrint(r) }) {
			t.Fatalf("%q: an answer of %d bytes with unprintable text: %q", raw, len(answer), answer)
		}
		if rec.Code == http.StatusOK {
			var got struct {
				DeliveryID *string `json:"delivery_id"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &got)
			if got.DeliveryID != nil && *got.DeliveryID != owners[i] {
				t.Fatalf("%q: answered for delivery %s, want only %s, Vonage's for %s", raw, *got.DeliveryID, owners[i], messages[i])
			}
			if got.DeliveryID != nil && ref != "" && ref != owners[i] {
				t.Fatalf("%q: recorded although client-ref names another delivery: %s", raw, answer)
			}
		}
		if n := historyLen(t, webhook); n != webhookLen {
			t.Fatalf("%q: another tenant's webhook delivery has %d events, had %d", raw, n, webhookLen)
		}
		// Accepted, queued, started, provider accepted; at most 16 words that decide nothing,
		// and one that decides with its outcome.
		for _, id := range owners {
			if n := historyLen(t, id); n > 4+16+2 {
				t.Fatalf("%q: delivery %s has grown to %d events", raw, id, n)
			}
		}
	})
}

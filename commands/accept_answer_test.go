package commands_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// answers are accept results of every shape an accept gives, and a few it never gives.
func answers() map[string]commands.AcceptResult {
	at := time.Date(2026, 12, 2, 16, 17, 18, 123_456_789, time.UTC)
	later := at.Add(36 * time.Hour)
	one := commands.AcceptedDelivery{ID: "01a2378e-72e3-760f-8b1d-e4e5a67429e5", Channel: "webhook",
		Recipient: "https://example.com/hook", State: domain.StateAccepted}
	suppressed := commands.AcceptedDelivery{ID: "01a2378e-72e3-7aaa-8b1d-e4e5a67429e6", Channel: "email", Recipient: "a@example.com",
		State: domain.StateSuppressed, Suppression: &domain.Suppressed{By: domain.SuppressedByList,
			SuppressionID: "0f1e2d3c-4b5a-4697-8877-665544332211", Source: domain.SuppressionManual, Reason: "asked to stop",
			Evidence: &domain.SuppressionEvidence{Actor: "alice"}, From: domain.StateAccepted}}
	optedOut := commands.AcceptedDelivery{ID: "01a2378e-72e3-7bbb-8b1d-e4e5a67429e7", Channel: "sms", Recipient: "+15005550006",
		State: domain.StateSuppressed, Suppression: &domain.Suppressed{By: domain.SuppressedByPreference, Category: "news", From: domain.StateAccepted}}
	scheduled := one
	scheduled.State = domain.StateScheduled
	many := make([]commands.AcceptedDelivery, 300)
	for i := range many {
		many[i] = one
	}
	n := "653ee992-1fd8-53d3-8fa4-9c6034cbf40a"
	return map[string]commands.AcceptResult{
		"single":             {NotificationID: n, AcceptedAt: at, Deliveries: []commands.AcceptedDelivery{one}},
		"scheduled":          {NotificationID: n, AcceptedAt: at, SendAt: &later, Deliveries: []commands.AcceptedDelivery{scheduled}},
		"suppressed":         {NotificationID: n, AcceptedAt: at, Deliveries: []commands.AcceptedDelivery{suppressed, one, optedOut}},
		"fan-out":            {NotificationID: n, AcceptedAt: at, Deliveries: many},
		"no deliveries":      {NotificationID: n, AcceptedAt: at},
		"no state (old)":     {NotificationID: n, AcceptedAt: at, Deliveries: []commands.AcceptedDelivery{{ID: one.ID, Channel: "webhook", Recipient: "x"}}},
		"long recipient":     {NotificationID: n, AcceptedAt: at, Deliveries: []commands.AcceptedDelivery{{ID: one.ID, Channel: "webhook", Recipient: "https://example.com/" + strings.Repeat("é/", 5000), State: domain.StateAccepted}}},
		"empty strings":      {NotificationID: n, AcceptedAt: at, Deliveries: []commands.AcceptedDelivery{{ID: one.ID}}},
		"before 1970":        {NotificationID: n, AcceptedAt: time.Date(1969, 7, 20, 20, 17, 40, 1, time.UTC), Deliveries: []commands.AcceptedDelivery{one}},
		"whole second":       {NotificationID: n, AcceptedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Deliveries: []commands.AcceptedDelivery{one}},
		"non-canonical id":   {NotificationID: strings.ToUpper(n), AcceptedAt: at, Deliveries: []commands.AcceptedDelivery{one}},
		"not a uuid":         {NotificationID: n, AcceptedAt: at, Deliveries: []commands.AcceptedDelivery{{ID: "d-1", Channel: "webhook"}}},
		"time out of int64":  {NotificationID: n, AcceptedAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
		"zero time (no fit)": {NotificationID: n},
	}
}

// TestAcceptAnswerRoundTrip: every answer decodes to what it was (a repeat is told exactly what
// the first request was), as the JSON of the answers stored before the compact form does; an
// answer the compact form cannot hold exactly is stored as JSON.
func TestAcceptAnswerRoundTrip(t *testing.T) {
	t.Parallel()
	for name, res := range answers() {
		t.Run(name, func(t *testing.T) {
			stored, err := commands.EncodeAcceptAnswer(res)
			if err != nil {
				t.Fatal(err)
			}
			fits := !strings.Contains(name, "non-canonical") && !strings.Contains(name, "not a uuid") && !strings.Contains(name, "out of") &&
				!strings.Contains(name, "no fit")
			if compact := stored[0] != '{'; compact != fits {
				t.Fatalf("stored compact: %v, want %v (%q)", compact, fits, stored[:min(len(stored), 40)])
			}
			got, err := commands.DecodeAcceptAnswer(stored)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, res) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", got, res)
			}
			old, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			if fromJSON, err := commands.DecodeAcceptAnswer(old); err != nil || !reflect.DeepEqual(fromJSON, got) {
				t.Fatalf("the JSON form decoded %+v (%v), the compact form %+v", fromJSON, err, got)
			}
			if fits && len(stored) >= len(old) {
				t.Fatalf("the compact form takes %d bytes, its JSON %d", len(stored), len(old))
			}
		})
	}
}

// TestAcceptAnswerTimesAreInstants: a time in another zone is stored as its instant and comes
// back in UTC, to the nanosecond.
func TestAcceptAnswerTimesAreInstants(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 18, 17, 18, 999_999_999, time.FixedZone("CAT", 2*3600))
	sendAt := at.Add(time.Nanosecond)
	res := answers()["single"]
	res.AcceptedAt, res.SendAt = at, &sendAt
	stored, err := commands.EncodeAcceptAnswer(res)
	if err != nil {
		t.Fatal(err)
	}
	got, err := commands.DecodeAcceptAnswer(stored)
	if err != nil {
		t.Fatal(err)
	}
	if got.AcceptedAt != at.UTC() || got.AcceptedAt.Location() != time.UTC || *got.SendAt != sendAt.UTC() {
		t.Fatalf("decoded accepted_at %s, send_at %s; want %s and %s in UTC", got.AcceptedAt, got.SendAt, at.UTC(), sendAt.UTC())
	}
}

// TestAcceptAnswerRefusesBrokenBytes: a stored answer cut short, with bytes after it, or of an
// unknown format is an error, never a partial answer.
func TestAcceptAnswerRefusesBrokenBytes(t *testing.T) {
	t.Parallel()
	stored, err := commands.EncodeAcceptAnswer(answers()["suppressed"])
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(stored) {
		if res, err := commands.DecodeAcceptAnswer(stored[:i]); err == nil {
			t.Fatalf("the first %d of %d bytes decoded as %+v", i, len(stored), res)
		}
	}
	for name, b := range map[string][]byte{
		"trailing":       append(append([]byte{}, stored...), 0),
		"unknown format": append([]byte{0x7f}, stored[1:]...),
		"unknown flag":   append(append([]byte{}, stored[:25]...), append([]byte{0x80}, stored[26:]...)...),
		"count too high": {0x01, 25: 0, 26: 0xff, 27: 0xff, 28: 0x7f}, // flags at 25, the count after
		"broken JSON":    []byte(`{"notification_id":`),
	} {
		if res, err := commands.DecodeAcceptAnswer(b); err == nil {
			t.Fatalf("%s: decoded as %+v", name, res)
		}
	}
}

// FuzzDecodeAcceptAnswer: no stored bytes make the decoder panic, and what it decodes from the
// compact form it encodes again to the same bytes.
func FuzzDecodeAcceptAnswer(f *testing.F) {
	for _, res := range answers() {
		stored, err := commands.EncodeAcceptAnswer(res)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(stored)
	}
	f.Fuzz(func(t *testing.T, stored []byte) {
		res, err := commands.DecodeAcceptAnswer(stored)
		if err != nil || stored[0] == '{' {
			return
		}
		again, err := commands.EncodeAcceptAnswer(res)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := commands.DecodeAcceptAnswer(again); err != nil || !reflect.DeepEqual(back, res) {
			t.Fatalf("decoded %+v, encoded again and decoded %+v (%v)", res, back, err)
		}
	})
}

// fixedClock is a clock at one time, in whatever zone it is given.
type fixedClock struct{ at time.Time }

func (c fixedClock) Now() time.Time { return c.at }

// acceptStores are the two ways the accept reaches the real store: alone, and in a group commit.
func acceptStores() map[string]func(*testing.T, *postgres.EventStore) commands.AcceptStore {
	return map[string]func(*testing.T, *postgres.EventStore) commands.AcceptStore{
		"single": func(_ *testing.T, s *postgres.EventStore) commands.AcceptStore { return s },
		"batched": func(t *testing.T, s *postgres.EventStore) commands.AcceptStore {
			b := postgres.NewAcceptBatcher(s, 1, 16)
			t.Cleanup(b.Close)
			return b
		},
	}
}

// TestAcceptRepeatGetsTheFirstAnswer: through the real store, alone and in a group commit, a
// repeat of an accept is told exactly what the first request was (to the nanosecond of a clock
// in another zone), for a single delivery, a scheduled one, a suppressed one and a fan-out; the
// answer is stored in the compact form.
func TestAcceptRepeatGetsTheFirstAnswer(t *testing.T) {
	t.Parallel()
	for name, build := range acceptStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := pgtest.New(t)
			suppressions := postgres.NewSuppressionStore(schema.Pool)
			if _, _, err := suppressions.AddSuppression(ctx, domain.Suppression{Tenant: "acme", Channel: "webhook",
				Recipient: "https://example.com/gone", Source: domain.SuppressionManual, Reason: "asked to stop",
				CreatedAt: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
			now := time.Now().In(time.FixedZone("CAT", 2*3600)).Truncate(time.Second).Add(123_456_789)
			topics := amqp.Topology{Prefix: "test", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
			h := commands.NewAcceptHandler(build(t, postgres.NewEventStore(schema.Pool)), topics, fixedClock{now},
				func(string) domain.RetryPolicy { return domain.DefaultRetryPolicy() })
			h.Suppression = &commands.SuppressionCheck{Store: suppressions}
			sendAt := now.Add(time.Hour)
			hook := func(r string) commands.Recipient { return commands.Recipient{Channel: "webhook", Recipient: r} }
			for _, c := range []commands.AcceptNotification{
				{RequestKey: "single", Recipients: []commands.Recipient{hook("https://example.com/hook")}},
				{RequestKey: "scheduled", SendAt: &sendAt, Recipients: []commands.Recipient{hook("https://example.com/later")}},
				{RequestKey: "suppressed", Recipients: []commands.Recipient{hook("https://example.com/gone"), hook("https://example.com/fine")}},
				{RequestKey: "fan-out", Recipients: []commands.Recipient{hook("https://a.example.com/h"), hook("https://b.example.com/h"),
					hook("https://c.example.com/h")}},
			} {
				c.Tenant, c.RequestHash, c.Payload = "acme", []byte("h-"+c.RequestKey), json.RawMessage(`{"order":42}`)
				first, err := h.Handle(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				again, err := h.Handle(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				if !again.Replayed {
					t.Fatalf("%s: the repeat was not replayed", c.RequestKey)
				}
				again.Replayed = false
				if !reflect.DeepEqual(again, first) {
					t.Fatalf("%s: the repeat was told\n%+v\nthe first request\n%+v", c.RequestKey, again, first)
				}
				if !first.AcceptedAt.Equal(now) || first.AcceptedAt.Nanosecond() != 123_456_789 {
					t.Fatalf("%s: accepted at %s, want %s", c.RequestKey, first.AcceptedAt, now)
				}
				var format byte
				if err := schema.Pool.QueryRow(ctx, `SELECT get_byte(response, 0) FROM accept_requests WHERE request_key = $1`,
					c.RequestKey).Scan(&format); err != nil {
					t.Fatal(err)
				}
				if format == '{' {
					t.Fatalf("%s: the answer is stored as JSON", c.RequestKey)
				}
			}
		})
	}
}

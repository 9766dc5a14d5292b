package commands_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// countedProbes is the real suppression store, counting the probes asked of it.
type countedProbes struct {
	commands.SuppressionStore
	probes atomic.Int32
}

func (c *countedProbes) Blocks(ctx context.Context, tenant, category string, refs []commands.RecipientRef) ([]domain.Block, error) {
	c.probes.Add(1)
	return c.SuppressionStore.Blocks(ctx, tenant, category, refs)
}

// TestAcceptLeavesTheProbeToTheStoresTransaction: through the real store, alone and in a group
// commit, an accept whose recipients are not blocked asks no probe of its own (the store checks
// them in the accept's transaction); one with a suppressed recipient is refused there, probed,
// and recorded with that delivery suppressed and the other accepted, once; a suppression added
// between two accepts is seen by the second.
func TestAcceptLeavesTheProbeToTheStoresTransaction(t *testing.T) {
	t.Parallel()
	for name, build := range acceptStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := pgtest.New(t)
			probes := &countedProbes{SuppressionStore: postgres.NewSuppressionStore(schema.Pool)}
			topics := amqp.Topology{Prefix: "test", Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
			h := commands.NewAcceptHandler(build(t, postgres.NewEventStore(schema.Pool)), topics, commands.SystemClock{},
				func(string) domain.RetryPolicy { return domain.DefaultRetryPolicy() })
			h.Suppression = &commands.SuppressionCheck{Store: probes}
			hook := func(r string) commands.Recipient { return commands.Recipient{Channel: "webhook", Recipient: r} }
			accept := func(key string, recipients ...commands.Recipient) commands.AcceptResult {
				t.Helper()
				res, err := h.Handle(ctx, commands.AcceptNotification{Tenant: "acme", RequestKey: key, RequestHash: []byte(key),
					Payload: json.RawMessage(`{"order":42}`), Recipients: recipients})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			states := func(res commands.AcceptResult) []domain.State {
				var s []domain.State
				for _, d := range res.Deliveries {
					s = append(s, d.State)
				}
				return s
			}

			res := accept("fine", hook("https://example.com/gone"), hook("https://example.com/fine"))
			if got := states(res); len(got) != 2 || got[0] != domain.StateAccepted || got[1] != domain.StateAccepted {
				t.Fatalf("before the suppression: %v", got)
			}
			if n := probes.probes.Load(); n != 0 {
				t.Fatalf("%d probes for an accept with no blocked recipient, want none: the store checks them", n)
			}
			if _, _, err := probes.AddSuppression(ctx, domain.Suppression{Tenant: "acme", Channel: "webhook",
				Recipient: "https://example.com/gone", Source: domain.SuppressionManual, Reason: "asked to stop",
				CreatedAt: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
			res = accept("after", hook("https://example.com/gone"), hook("https://example.com/fine"))
			if got := states(res); len(got) != 2 || got[0] != domain.StateSuppressed || got[1] != domain.StateAccepted {
				t.Fatalf("after the suppression: %v, want suppressed and accepted", got)
			}
			if n := probes.probes.Load(); n != 1 {
				t.Fatalf("%d probes after the store refused a blocked recipient, want one", n)
			}
			var requests, suppressed, all int
			if err := schema.Pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM accept_requests WHERE request_key = 'after'),
				(SELECT count(*) FROM events WHERE delivery_id = $1 AND type = 'delivery.suppressed'),
				(SELECT count(*) FROM events WHERE delivery_id = ANY($2::uuid[]))`,
				res.Deliveries[0].ID, []string{res.Deliveries[0].ID, res.Deliveries[1].ID}).Scan(&requests, &suppressed, &all); err != nil {
				t.Fatal(err)
			}
			if requests != 1 || suppressed != 1 || all != 3 {
				t.Fatalf("recorded %d requests, %d suppressed events, %d events; want 1, 1 and 3 (accepted+suppressed, accepted)",
					requests, suppressed, all)
			}
			if again := accept("after", hook("https://example.com/gone"), hook("https://example.com/fine")); !again.Replayed ||
				states(again)[0] != domain.StateSuppressed {
				t.Fatalf("the repeat: %+v", again)
			}
		})
	}
}

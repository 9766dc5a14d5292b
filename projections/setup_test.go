package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// bundle is one test's database schema with an event store over it.
type bundle struct {
	schema *pgtest.Schema
	pool   *pgxpool.Pool
	store  *postgres.EventStore
	views  *postgres.Views
}

func setup(t *testing.T) *bundle {
	t.Helper()
	s := pgtest.New(t)
	return &bundle{schema: s, pool: s.Pool, store: postgres.NewEventStore(s.Pool), views: postgres.NewViews(s.Pool)}
}

// runner returns a projector with small batches, so that tests cross many batch boundaries.
func (b *bundle) runner(t *testing.T, batch int, ps ...projections.Projection) *projections.Runner {
	t.Helper()
	if len(ps) == 0 {
		ps = projections.All()
	}
	r, err := projections.NewRunner(b.views, b.store, ps, projections.RunnerConfig{BatchSize: batch, PollInterval: 10 * time.Millisecond, LagInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// catchUp runs a projector over every projection until the whole log is applied. One CatchUp
// is not always enough: it stops at the oldest transaction still running in the cluster, and
// the tests of other packages share the cluster.
func (b *bundle) catchUp(t *testing.T) {
	t.Helper()
	r := b.runner(t, 7)
	waitFor(t, 20*time.Second, "catch up", func() (bool, error) {
		if err := r.CatchUp(context.Background()); err != nil {
			return false, err
		}
		return b.caughtUp(context.Background())
	})
}

// verifyAll fails the test if any view differs from a fresh fold of the log.
func (b *bundle) verifyAll(t *testing.T) {
	t.Helper()
	for _, p := range projections.All() {
		res, err := projections.Verify(context.Background(), b.views, p)
		if err != nil {
			t.Fatalf("verify %s: %v", p.Name(), err)
		}
		if res.Total != 0 {
			t.Fatalf("verify %s: %d differences, first: %v", p.Name(), res.Total, res.Differences[0])
		}
	}
}

func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// appendSteps appends the steps in order, a few consecutive steps per transaction (as group
// commit does), so that transactions of several deliveries and several versions interleave.
func (b *bundle) appendSteps(t testing.TB, steps [][]domain.Event) {
	t.Helper()
	for i := 0; i < len(steps); {
		var chunk []domain.Event
		for end := min(i+1+i%6, len(steps)); i < end; i++ {
			chunk = append(chunk, steps[i]...)
		}
		if err := b.store.Append(context.Background(), chunk, nil); err != nil {
			t.Fatalf("append %s v%d: %v", chunk[0].DeliveryID, chunk[0].Version, err)
		}
	}
}

// seed appends n deliveries with random histories (interleaved, one step per transaction) and
// returns the histories.
func (b *bundle) seed(t testing.TB, rng *rand.Rand, n int, start time.Time) []*history {
	t.Helper()
	hs := make([]*history, n)
	for i := range hs {
		tenant := "acme"
		if i%3 == 2 {
			tenant = "globex"
		}
		hs[i] = newHistory(t, rng, tenant, start.Add(time.Duration(i)*time.Millisecond))
		hs[i].run(rng)
	}
	b.appendSteps(t, interleave(rng, hs))
	return hs
}

// interleave orders the steps of several histories randomly, each history's steps in order.
func interleave(rng *rand.Rand, hs []*history) [][]domain.Event {
	next := make([]int, len(hs))
	var out [][]domain.Event
	live := make([]int, 0, len(hs))
	for i := range hs {
		if len(hs[i].steps) > 0 {
			live = append(live, i)
		}
	}
	for len(live) > 0 {
		k := rng.IntN(len(live))
		i := live[k]
		out = append(out, hs[i].steps[next[i]])
		next[i]++
		if next[i] == len(hs[i].steps) {
			live = append(live[:k], live[k+1:]...)
		}
	}
	return out
}

// history builds one delivery's stream through the aggregate's own methods (and, for the
// transitions no command makes yet, replay and reconciliation, by hand).
type history struct {
	t      testing.TB
	id     string
	tenant string
	now    time.Time
	events []domain.Event
	steps  [][]domain.Event
	d      *domain.Delivery
	cycle  int
}

var channels = []string{"webhook", "sms"}

func newHistory(t testing.TB, rng *rand.Rand, tenant string, now time.Time) *history {
	t.Helper()
	// A delivery id is a UUIDv7 of the accept time, as commands.DeliveryID makes it: the views
	// are partitioned by it, and a random id would fall in no partition.
	id := commands.DeliveryID(uuid.NewString(), commands.Recipient{}, now)
	priorities := []domain.Priority{domain.PriorityHigh, domain.PriorityNormal, domain.PriorityLow}
	d, events, err := domain.Accept(domain.AcceptSpec{
		ID: id, Tenant: tenant, NotificationID: uuid.Must(uuid.NewV7()).String(),
		Channel:   channels[rng.IntN(len(channels))],
		Recipient: fmt.Sprintf("https://r%d.example.com/hook", rng.IntN(4)),
		Payload:   json.RawMessage(`{"order":42}`), Priority: priorities[rng.IntN(3)],
		MaxAttempts: 1 + rng.IntN(3), RequestKey: "req-" + id,
	}, now.UTC().Truncate(time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	h := &history{t: t, id: id, tenant: tenant, now: now, d: d}
	h.add(events)
	return h
}

func (h *history) add(events []domain.Event) {
	h.events = append(h.events, events...)
	h.steps = append(h.steps, events)
}

func (h *history) tick(rng *rand.Rand) time.Time {
	h.now = h.now.Add(time.Duration(1+rng.IntN(5000)) * time.Millisecond)
	return h.now.UTC().Truncate(time.Microsecond)
}

// do appends the events a method of the aggregate returns.
func (h *history) do(events []domain.Event, err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatalf("history of %s: %v", h.id, err)
	}
	h.add(events)
}

// raw appends an event no command makes yet and folds it into the aggregate.
func (h *history) raw(rng *rand.Rand, typ domain.EventType, key string, data any) {
	h.t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		h.t.Fatal(err)
	}
	e := domain.Event{DeliveryID: h.id, Tenant: h.tenant, Version: h.d.Version() + 1, Type: typ,
		Key: h.id + "/" + key, Data: b, RecordedAt: h.tick(rng)}
	h.add([]domain.Event{e})
	if h.d, err = domain.Rehydrate(h.events); err != nil {
		h.t.Fatalf("history of %s: %v", h.id, err)
	}
}

// lateReceipt records a provider's word, after the fact, on a message the delivery was given
// (the first its history shows accepted): about an earlier attempt it changes nothing and is
// kept as evidence. A delivery no provider accepted a message for gets no receipt: the ledger
// refuses a word about a message it never gave (another delivery's, or junk).
func (h *history) lateReceipt(rng *rand.Rand, policy domain.RetryPolicy, step int) {
	for _, e := range h.events {
		if e.Type != domain.EventProviderAccepted {
			continue
		}
		var acc domain.ProviderAcceptance
		if err := json.Unmarshal(e.Data, &acc); err != nil {
			h.t.Fatal(err)
		}
		h.do(h.d.RecordReceipt(domain.ReceiptWord{Provider: acc.Provider, ProviderOperationID: acc.ProviderOperationID,
			Status: domain.ReceiptDelivered, ProviderStatus: fmt.Sprintf("delivered-%d", step), Source: "receipt"}, policy, h.tick(rng), 0))
		return
	}
}

// run walks the delivery through random transitions until it stops (in any state).
func (h *history) run(rng *rand.Rand) {
	policy := domain.RetryPolicy{Strategy: domain.Exponential{Base: time.Second, Cap: time.Minute}, MaxAttempts: 3}
	for steps := 0; steps < 25; steps++ {
		if rng.IntN(12) == 0 {
			return // in flight, or waiting: not every delivery is finished
		}
		d := h.d
		switch d.State() {
		case domain.StateAccepted, domain.StateRetrying:
			h.do(d.Queue(h.tick(rng)))
		case domain.StateQueued:
			if rng.IntN(8) == 0 {
				now := h.tick(rng)
				h.do(d.Defer("rate limited", now.Add(time.Second), now))
				continue
			}
			h.do(d.StartAttempt("webhook", h.tick(rng)))
		case domain.StateProcessing:
			if acc := d.Awaiting(); acc != nil {
				// The provider's word on the message it accepted, or no word in time.
				if rng.IntN(6) == 0 {
					h.do(d.GiveUpWaiting("no receipt in time", policy, h.tick(rng)))
					continue
				}
				statuses := []string{domain.ReceiptPending, domain.ReceiptDelivered, domain.ReceiptFailed, domain.ReceiptRetry}
				now := h.tick(rng)
				h.do(d.RecordReceipt(domain.ReceiptWord{Provider: acc.Provider, ProviderOperationID: acc.ProviderOperationID,
					Status: statuses[rng.IntN(len(statuses))], ProviderStatus: fmt.Sprintf("s%d", steps), Source: "lookup",
					NextCheck: now.Add(time.Minute)}, policy, now, rng.Float64()))
				continue
			}
			if rng.IntN(10) == 0 && d.Calling() != "sms-b" {
				h.do(d.FailOver(d.Calling(), "sms-b", "connection refused", h.tick(rng)))
				continue
			}
			if rng.IntN(5) == 0 {
				h.do(d.RecordOutcome(d.Attempt(), domain.Outcome{Kind: domain.OutcomeAccepted, Provider: "sms-a",
					ProviderOperationID: fmt.Sprintf("SM%d", steps), StatusCode: 201, ReceiptTimeout: time.Minute,
					ReceiptMaxWait: time.Hour}, policy, h.tick(rng), 0))
				continue
			}
			o := domain.Outcome{Provider: "webhook", Latency: time.Duration(rng.IntN(900)) * time.Millisecond}
			switch n := rng.IntN(20); {
			case n < 9:
				o.Kind, o.StatusCode, o.ProviderOperationID = domain.OutcomeDelivered, 200, "op-"+h.id[:8]
			case n < 14:
				o.Kind, o.StatusCode, o.Err = domain.OutcomeTransient, 503, "service unavailable"
			case n < 17:
				o.Kind, o.StatusCode, o.Err = domain.OutcomePermanent, 404, "no such hook"
			default:
				o.Kind, o.Err = domain.OutcomeUnknown, "timeout after the request was written"
			}
			h.do(d.RecordOutcome(d.Attempt(), o, policy, h.tick(rng), rng.Float64()))
		case domain.StateDead:
			if rng.IntN(6) == 0 {
				h.lateReceipt(rng, policy, steps)
				continue
			}
			if rng.IntN(3) != 0 {
				return
			}
			h.cycle++
			h.raw(rng, domain.EventReplayed, fmt.Sprintf("replay/%d", h.cycle),
				domain.Replayed{Attempt: d.Attempt() + 1, Cycle: h.cycle, Reason: "operator replay"})
		case domain.StateUnknown:
			if rng.IntN(3) == 0 {
				return
			}
			if rng.IntN(4) == 0 {
				h.lateReceipt(rng, policy, steps)
				continue
			}
			kinds := []domain.OutcomeKind{domain.OutcomeDelivered, domain.OutcomePermanent, domain.OutcomeTransient}
			o := domain.Outcome{Kind: kinds[rng.IntN(3)], StatusCode: 200, ProviderOperationID: "op-reconciled"}
			h.do(d.Reconcile(o, "provider status query", "ops", policy, h.tick(rng), rng.Float64()))
		case domain.StateDelivered:
			if rng.IntN(4) != 0 {
				return
			}
			h.lateReceipt(rng, policy, steps)
		default:
			return
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// caughtUp reports whether the named views (all when none is named) have applied the whole log.
func (b *bundle) caughtUp(ctx context.Context, names ...string) (bool, error) {
	positions, err := b.views.Positions(ctx)
	if err != nil {
		return false, err
	}
	for _, v := range positions {
		if v.LagEvents != 0 && (len(names) == 0 || slices.Contains(names, v.Name)) {
			return false, nil
		}
	}
	return true, nil
}

// totalEvents counts the log.
func (b *bundle) totalEvents(t *testing.T) int {
	return b.count(t, `SELECT count(*) FROM events`)
}

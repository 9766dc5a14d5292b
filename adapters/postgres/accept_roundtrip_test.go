package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// exchangeCounter counts a pool's exchanges with the database: every query and every batch pgx
// sends is one round trip once the connection has prepared its statements (pgx prepares a
// statement new to the connection in a round trip of its own, inside the same call).
// It also counts the statements of its batches (statements).
type exchangeCounter struct{ n, statements atomic.Int64 }

var (
	_ pgx.QueryTracer = (*exchangeCounter)(nil)
	_ pgx.BatchTracer = (*exchangeCounter)(nil)
)

func (c *exchangeCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *exchangeCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *exchangeCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *exchangeCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}

func (c *exchangeCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// during returns how many exchanges f cost.
func (c *exchangeCounter) during(f func()) int64 {
	before := c.n.Load()
	f()
	return c.n.Load() - before
}

// countedStore is an event store on a pool of one connection whose exchanges are counted.
func countedStore(t *testing.T) (*pgtest.Schema, *postgres.EventStore, *exchangeCounter) {
	t.Helper()
	s := pgtest.New(t)
	pool, counter := countedPool(t, s, 1)
	return s, postgres.NewEventStore(pool), counter
}

func countedPool(t *testing.T, s *pgtest.Schema, conns int32) (*pgxpool.Pool, *exchangeCounter) {
	t.Helper()
	counter := &exchangeCounter{}
	pool, err := postgres.Connect(context.Background(), s.URL, "", conns, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, counter
}

func newAccept(t *testing.T, key, response string) commands.AcceptRecord {
	t.Helper()
	_, events := acceptedEvents(t)
	return commands.AcceptRecord{Tenant: "acme", RequestKey: key, RequestHash: []byte("h-" + key), Events: events,
		Response: []byte(response)}
}

// TestNewAcceptCostsOneRoundTrip: a new request is written in one exchange, its locks and its
// idempotency record included; a repeated key costs more and still gets the stored answer.
func TestNewAcceptCostsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, store, counter := countedStore(t)
	// The first accept on the connection takes its locks first, while pgx prepares the writes.
	if _, _, err := store.RecordAccept(ctx, newAccept(t, "warm-up", `{}`)); err != nil {
		t.Fatal(err)
	}

	rec := newAccept(t, "new", `{"n":1}`)
	var resp []byte
	var replayed bool
	var err error
	if n := counter.during(func() { resp, replayed, err = store.RecordAccept(ctx, rec) }); n != 1 {
		t.Errorf("a new accept cost %d exchanges, want 1", n)
	}
	if err != nil || replayed || string(resp) != `{"n":1}` {
		t.Fatalf("new: %s %v %v", resp, replayed, err)
	}

	rec.Response = []byte(`{"n":2}`)
	n := counter.during(func() { resp, replayed, err = store.RecordAccept(ctx, rec) })
	if err != nil || !replayed || string(resp) != `{"n":1}` {
		t.Fatalf("repeat: %s %v %v, want the stored answer", resp, replayed, err)
	}
	t.Logf("a repeated accept cost %d exchanges", n)
	rec.RequestHash = []byte("other")
	if _, _, err := store.RecordAccept(ctx, rec); !errors.Is(err, commands.ErrRequestMismatch) {
		t.Fatalf("other body: got %v, want ErrRequestMismatch", err)
	}
	// The refused fast paths wrote nothing: the repeats' events are not there.
	var events int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(rec.Events); events != want {
		t.Fatalf("%d events recorded, want %d (two accepts)", events, want)
	}
}

// TestGroupCommitOfNewAcceptsCostsOneRoundTrip: a batch of new requests, a repeat of one of them
// among them, is written in one exchange and one transaction; a batch with a recorded key costs
// more and answers each request as before.
func TestGroupCommitOfNewAcceptsCostsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, store, counter := countedStore(t)
	batcher := postgres.NewAcceptBatcher(store, 1, 16)
	t.Cleanup(batcher.Close)
	// As in TestNewAcceptCostsOneRoundTrip, the first write prepares the statements.
	warmUp := []commands.AcceptRecord{newAccept(t, "warm-1", `{}`), newAccept(t, "warm-2", `{}`)}
	for _, a := range batcher.CommitBatch(ctx, warmUp) {
		if a.Err != nil {
			t.Fatal(a.Err)
		}
	}

	var batch []commands.AcceptRecord
	for i := range 4 {
		batch = append(batch, newAccept(t, fmt.Sprintf("b%d", i), fmt.Sprintf(`{"b":%d}`, i)))
	}
	batch = append(batch, newAccept(t, "b0", `{"b":"again"}`)) // the first of a key wins
	var answers []postgres.AcceptAnswer
	if n := counter.during(func() { answers = batcher.CommitBatch(ctx, batch) }); n != 1 {
		t.Errorf("a group commit of %d new requests cost %d exchanges, want 1", len(batch)-1, n)
	}
	for i, a := range answers[:4] {
		if a.Err != nil || a.Replayed || string(a.Response) != fmt.Sprintf(`{"b":%d}`, i) {
			t.Fatalf("request b%d: %+v", i, a)
		}
	}
	if !errors.Is(answers[4].Err, commands.ErrRequestInFlight) {
		t.Fatalf("second request of b0 in the batch: %+v, want ErrRequestInFlight", answers[4])
	}
	var txs, events int
	if err := s.Pool.QueryRow(ctx, `SELECT count(DISTINCT transaction_id), count(*) FROM events
		WHERE delivery_id::text || idempotency_key = ANY($1)`, eventKeys(batch[:4])).Scan(&txs, &events); err != nil {
		t.Fatal(err)
	}
	if txs != 1 || events != 4*len(batch[0].Events) {
		t.Fatalf("the batch's events: %d in %d transactions, want %d in one", events, txs, 4*len(batch[0].Events))
	}

	// A recorded key, replayed and with another body, among new requests.
	replay := batch[1]
	replay.Response = []byte(`{"b":"replayed"}`)
	mismatch := batch[2]
	mismatch.RequestHash = []byte("other")
	mixed := []commands.AcceptRecord{newAccept(t, "c0", `{"c":0}`), replay, mismatch, newAccept(t, "c1", `{"c":1}`)}
	n := counter.during(func() { answers = batcher.CommitBatch(ctx, mixed) })
	t.Logf("a group commit with recorded keys cost %d exchanges", n)
	if a := answers[0]; a.Err != nil || a.Replayed || string(a.Response) != `{"c":0}` {
		t.Fatalf("new request c0: %+v", a)
	}
	if a := answers[1]; a.Err != nil || !a.Replayed || string(a.Response) != `{"b":1}` {
		t.Fatalf("repeat of b1: %+v, want the stored answer", a)
	}
	if a := answers[2]; !errors.Is(a.Err, commands.ErrRequestMismatch) {
		t.Fatalf("b2 with another body: %+v, want ErrRequestMismatch", a)
	}
	if a := answers[3]; a.Err != nil || a.Replayed || string(a.Response) != `{"c":1}` {
		t.Fatalf("new request c1: %+v", a)
	}
}

// TestNewAcceptInFlightOnPreparedConnections: where the connections hold the writes prepared, a
// repeat of a request in flight fails on the key's lock, the first statement of its batch, and
// gets ErrRequestInFlight at once instead of waiting behind the first request.
func TestNewAcceptInFlightOnPreparedConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.New(t)
	pool, _ := countedPool(t, s, 2)
	store := postgres.NewEventStore(pool)
	// Prepare the writes on both connections: the second accept runs while the first is taken.
	if _, _, err := store.RecordAccept(ctx, newAccept(t, "warm-1", `{}`)); err != nil {
		t.Fatal(err)
	}
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.RecordAccept(ctx, newAccept(t, "warm-2", `{}`)); err != nil {
		t.Fatal(err)
	}
	held.Release()

	blocker, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if _, err := blocker.Exec(ctx, `LOCK TABLE events IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	rec := newAccept(t, "slow", `{"slow":1}`)
	first := make(chan error, 1)
	go func() {
		_, _, err := store.RecordAccept(ctx, rec)
		first <- err
	}()
	waitForLockWait(t, &storeBundle{schema: s}, "events")
	repeatCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, _, err := store.RecordAccept(repeatCtx, rec); !errors.Is(err, commands.ErrRequestInFlight) {
		t.Fatalf("concurrent repeat: got %v, want ErrRequestInFlight at once", err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first request: %v", err)
	}
	if resp, replayed, err := store.RecordAccept(ctx, rec); err != nil || !replayed || string(resp) != `{"slow":1}` {
		t.Fatalf("repeat after completion: %s %v %v", resp, replayed, err)
	}
}

func eventKeys(recs []commands.AcceptRecord) []string {
	var keys []string
	for _, r := range recs {
		for _, e := range r.Events {
			keys = append(keys, e.Key)
		}
	}
	return keys
}

// TestGuardedAcceptsCheckTheirRecipientsInTheirWrite: an accept whose record carries a guard is
// still one exchange; the store refuses it with ErrRecipientBlocked, writing nothing, when a
// recipient is suppressed or opted out of the guard's category (and not of another); in a group
// commit only the blocked request is refused.
func TestGuardedAcceptsCheckTheirRecipientsInTheirWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, store, counter := countedStore(t)
	suppressions := postgres.NewSuppressionStore(s.Pool)
	if _, _, err := suppressions.AddSuppression(ctx, domain.Suppression{Tenant: "acme", Channel: "webhook",
		Recipient: "https://example.com/gone", Source: domain.SuppressionManual, Reason: "asked to stop",
		CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if _, err := suppressions.SetPreference(ctx, "acme", domain.Preference{Channel: "email", Recipient: "a@example.com",
		Category: "marketing", OptedOut: true, Source: domain.PreferenceByAPI, UpdatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	guarded := func(key, category string, refs ...commands.RecipientRef) commands.AcceptRecord {
		rec := newAccept(t, key, `{"k":"`+key+`"}`)
		rec.Guard = &commands.RecipientGuard{Tenant: "acme", Category: category, Refs: refs}
		return rec
	}
	fine := commands.RecipientRef{Channel: "webhook", Recipient: "https://example.com/fine"}
	gone := commands.RecipientRef{Channel: "webhook", Recipient: "https://example.com/gone"}
	mail := commands.RecipientRef{Channel: "email", Recipient: "a@example.com"}
	if _, _, err := store.RecordAccept(ctx, guarded("warm-up", "", fine)); err != nil {
		t.Fatal(err)
	}
	var err error
	if n := counter.during(func() { _, _, err = store.RecordAccept(ctx, guarded("fine", "", fine)) }); n != 1 || err != nil {
		t.Fatalf("a guarded accept: %d exchanges, %v; want 1 and no error", n, err)
	}
	for _, c := range []struct {
		key, category string
		refs          []commands.RecipientRef
		blocked       bool
	}{
		{"suppressed", "", []commands.RecipientRef{fine, gone}, true},
		{"opted-out", "marketing", []commands.RecipientRef{mail}, true},
		{"other-category", "account", []commands.RecipientRef{mail}, false},
		{"no-category", "", []commands.RecipientRef{mail, fine}, false},
	} {
		_, _, err := store.RecordAccept(ctx, guarded(c.key, c.category, c.refs...))
		if got := errors.Is(err, commands.ErrRecipientBlocked); got != c.blocked || (!c.blocked && err != nil) {
			t.Fatalf("%s: %v, want blocked=%v", c.key, err, c.blocked)
		}
	}

	batcher := postgres.NewAcceptBatcher(store, 1, 16)
	t.Cleanup(batcher.Close)
	answers := batcher.CommitBatch(ctx, []commands.AcceptRecord{guarded("b0", "", fine), guarded("b1", "", gone),
		guarded("b2", "marketing", mail), guarded("b3", "", fine, mail)})
	for i, want := range []bool{false, true, true, false} {
		if got := errors.Is(answers[i].Err, commands.ErrRecipientBlocked); got != want || (!want && answers[i].Err != nil) {
			t.Fatalf("batched request b%d: %+v, want blocked=%v", i, answers[i], want)
		}
	}
	var keys []string
	if err := s.Pool.QueryRow(ctx, `SELECT array_agg(request_key ORDER BY request_key) FROM accept_requests`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(keys); got != "[b0 b3 fine no-category other-category warm-up]" {
		t.Fatalf("recorded requests %s: a refused one was written, or an accepted one was not", got)
	}
	var events int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if want := 6 * len(newAccept(t, "x", `{}`).Events); events != want {
		t.Fatalf("%d events, want %d: the refused requests wrote some", events, want)
	}
}

// TestNewAcceptNotifiesTheRelayOnce: a new request with outbox rows wakes the relay (one
// notification on the outbox's channel, raised by the keys' check) at its commit, still in one
// exchange; a refused one (a blocked recipient) and a repeat notify nothing.
func TestNewAcceptNotifiesTheRelayOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.New(t)
	pool, counter := countedPool(t, s, 1)
	store := postgres.NewEventStore(pool)
	// A channel is the database's, not the schema's: other tests notify on it too. The store's
	// only connection is the one whose notifications count.
	var pid uint32
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listener.Close(ctx) })
	if _, err := listener.Exec(ctx, "LISTEN "+postgres.OutboxNotifyChannel); err != nil {
		t.Fatal(err)
	}
	// notified counts the store's notifications that arrive within 300 ms (the writes before
	// it have committed).
	notified := func() int {
		n := 0
		wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		for {
			got, err := listener.WaitForNotification(wait)
			if err != nil {
				return n
			}
			if got.PID == pid {
				n++
			}
		}
	}
	if _, _, err := postgres.NewSuppressionStore(s.Pool).AddSuppression(ctx, domain.Suppression{Tenant: "acme", Channel: "webhook",
		Recipient: "https://example.com/gone", Source: domain.SuppressionManual, Reason: "asked to stop", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	withOutbox := func(key string, guard ...commands.RecipientRef) commands.AcceptRecord {
		rec := newAccept(t, key, `{}`)
		rec.Outbox = []commands.OutboxMessage{{ID: "m-" + key, Topic: "test.work", PartitionKey: rec.Events[0].DeliveryID,
			Payload: []byte(`{}`), Metadata: map[string]string{}}}
		if guard != nil {
			rec.Guard = &commands.RecipientGuard{Tenant: "acme", Refs: guard}
		}
		return rec
	}
	notified() // what the suppression's write raised
	here := commands.RecipientRef{Channel: "webhook", Recipient: "https://example.com/here"}
	// Each form of the write is prepared on the connection by its first use.
	for _, rec := range []commands.AcceptRecord{withOutbox("warm-up"), withOutbox("warm-up-guarded", here)} {
		if _, _, err := store.RecordAccept(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if n := notified(); n != 1 {
			t.Fatalf("a first accept notified %d times, want once", n)
		}
	}
	statements := counter.statements.Load()
	if n := counter.during(func() { _, _, err = store.RecordAccept(ctx, withOutbox("new")) }); n != 1 || err != nil {
		t.Fatalf("a new accept with outbox rows: %d exchanges, %v; want 1", n, err)
	}
	// The batch's plan setting, the key's lock, its check with the notification, the request, the
	// events and the outbox row (the transaction's BEGIN and COMMIT are not batch statements).
	if n := counter.statements.Load() - statements; n != 6 {
		t.Fatalf("a new accept with outbox rows ran %d statements, want 6: the notification has no statement of its own", n)
	}
	if n := notified(); n != 1 {
		t.Fatalf("a new accept notified %d times, want once", n)
	}
	// A guard's probe rides on the same check: no statement of its own either.
	statements = counter.statements.Load()
	if _, _, err := store.RecordAccept(ctx, withOutbox("guarded", here)); err != nil {
		t.Fatal(err)
	}
	if n := counter.statements.Load() - statements; n != 6 {
		t.Fatalf("a guarded new accept ran %d statements, want 6: the guard has no statement of its own", n)
	}
	if n := notified(); n != 1 {
		t.Fatalf("a guarded new accept notified %d times, want once", n)
	}
	if _, _, err := store.RecordAccept(ctx, withOutbox("blocked", commands.RecipientRef{Channel: "webhook",
		Recipient: "https://example.com/gone"})); !errors.Is(err, commands.ErrRecipientBlocked) {
		t.Fatalf("a blocked recipient: %v", err)
	}
	if _, replayed, err := store.RecordAccept(ctx, withOutbox("new")); err != nil || !replayed {
		t.Fatalf("the repeat: %v %v", replayed, err)
	}
	// A taken key is found before a blocked recipient: the repeat is answered, not refused.
	if _, replayed, err := store.RecordAccept(ctx, withOutbox("guarded", commands.RecipientRef{Channel: "webhook",
		Recipient: "https://example.com/gone"})); err != nil || !replayed {
		t.Fatalf("the repeat of a guarded key, its recipient blocked since: %v %v", replayed, err)
	}
	if n := notified(); n != 0 {
		t.Fatalf("a refused accept and a repeat notified %d times, want none", n)
	}
	var rows int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM watermill_ledger_outbox`).Scan(&rows); err != nil || rows != 4 {
		t.Fatalf("%d outbox rows (%v), want 4", rows, err)
	}
}

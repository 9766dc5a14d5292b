package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

type storeBundle struct {
	schema *pgtest.Schema
	store  *postgres.EventStore
}

func setup(t *testing.T) *storeBundle {
	t.Helper()
	s := pgtest.New(t)
	return &storeBundle{schema: s, store: postgres.NewEventStore(s.Pool)}
}

// acceptedEvents builds the opening events of a new delivery.
func acceptedEvents(t *testing.T) (*domain.Delivery, []domain.Event) {
	t.Helper()
	d, events, err := domain.Accept(domain.AcceptSpec{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Channel: "webhook", Recipient: "https://example.com/hook",
		Payload: json.RawMessage(`{"a":1}`), Priority: domain.PriorityNormal, MaxAttempts: 3,
	}, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	return d, events
}

func TestAppendAndLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d, events := acceptedEvents(t)
	if err := b.store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	queued, err := d.Queue(time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Append(ctx, queued, nil); err != nil {
		t.Fatal(err)
	}
	loaded, err := b.store.Load(ctx, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 2 || loaded[0].Type != domain.EventAccepted || loaded[1].Type != domain.EventQueued {
		t.Fatalf("loaded %+v", loaded)
	}
	re, err := domain.Rehydrate(loaded)
	if err != nil {
		t.Fatal(err)
	}
	if re.State() != domain.StateQueued || re.Version() != 2 || re.Recipient() != d.Recipient() {
		t.Fatalf("rehydrated state %s version %d", re.State(), re.Version())
	}
	if _, err := b.store.Load(ctx, uuid.Must(uuid.NewV7()).String()); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("missing stream: got %v, want ErrNotFound", err)
	}
	if _, err := b.store.Load(ctx, "not-a-uuid"); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("malformed id: got %v, want ErrNotFound", err)
	}
}

func TestConcurrentAppendsOneWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d, events := acceptedEvents(t)
	if err := b.store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	// Ten writers append version 2 with different keys: the unique (stream, version) decides.
	const writers = 10
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := domain.Event{
				DeliveryID: d.ID(), Tenant: "acme", Version: 2, Type: domain.EventQueued,
				Key: fmt.Sprintf("%s/writer/%d", d.ID(), i), Data: json.RawMessage(`{"attempt":1}`),
				RecordedAt: time.Now().UTC(),
			}
			errs[i] = b.store.Append(ctx, []domain.Event{e}, nil)
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, commands.ErrVersionConflict):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d writers won, want exactly 1", wins)
	}
	loaded, _ := b.store.Load(ctx, d.ID())
	if len(loaded) != 2 {
		t.Fatalf("stream has %d events, want 2", len(loaded))
	}
}

func TestRepeatedIdempotencyKeyAppendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d, events := acceptedEvents(t)
	if err := b.store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	queued, _ := d.Queue(time.Now().UTC())
	if err := b.store.Append(ctx, queued, nil); err != nil {
		t.Fatal(err)
	}
	// The same operation again, as a redelivered message would record it.
	again := queued[0]
	if err := b.store.Append(ctx, []domain.Event{again}, nil); !errors.Is(err, commands.ErrDuplicate) {
		t.Fatalf("repeat: got %v, want ErrDuplicate", err)
	}
	// Same key at a later version (a writer that did not see the first): still a duplicate.
	again.Version = 3
	if err := b.store.Append(ctx, []domain.Event{again}, nil); !errors.Is(err, commands.ErrDuplicate) {
		t.Fatalf("repeat at next version: got %v, want ErrDuplicate", err)
	}
	var n int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE delivery_id = $1`, d.ID()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
}

func TestAppendWritesOutboxInSameTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, events := acceptedEvents(t)
	msg := commands.OutboxMessage{ID: uuid.Must(uuid.NewV7()).String(), Topic: "ledger.webhook", Payload: []byte(`{"x":1}`)}
	if err := b.store.Append(ctx, events, []commands.OutboxMessage{msg}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_outbox_all`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("outbox has %d rows, want 1", n)
	}
	// A failed append leaves no outbox row behind.
	if err := b.store.Append(ctx, events, []commands.OutboxMessage{msg}); !errors.Is(err, commands.ErrDuplicate) {
		t.Fatalf("got %v", err)
	}
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_outbox_all`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("outbox has %d rows after a refused append, want 1", n)
	}
}

// TestReadLogNeverSkipsLateCommit: transaction A takes its position first but commits after B.
// A reader following the log must not pass A's row while A is open.
func TestReadLogNeverSkipsLateCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	_, early := acceptedEvents(t)
	_, late := acceptedEvents(t)

	txA, err := b.schema.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx) //nolint:errcheck
	if _, err := txA.Exec(ctx, `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
		VALUES ($1, 'acme', 1, $2, $3, $4, now())`, early[0].DeliveryID, string(early[0].Type), early[0].Key, string(early[0].Data)); err != nil {
		t.Fatal(err)
	}
	// B appends and commits while A is still open: B's position is higher than A's.
	if err := b.store.Append(ctx, late, nil); err != nil {
		t.Fatal(err)
	}

	got, err := b.store.ReadLog(ctx, projections.LogPosition{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("reader saw %d events while an earlier transaction was open; it would skip it", len(got))
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Other tests' open transactions also hold the horizon back (it is cluster-wide): poll.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err = b.store.ReadLog(ctx, projections.LogPosition{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 2 || time.Now().After(deadline) {
			break
		}
		if len(got) == 1 && got[0].DeliveryID != early[0].DeliveryID {
			t.Fatalf("the later transaction was read before the earlier one")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(got) != 2 {
		t.Fatalf("read %d events, want 2", len(got))
	}
	if got[0].DeliveryID != early[0].DeliveryID || got[1].DeliveryID != late[0].DeliveryID {
		t.Fatalf("order: %s then %s, want the early transaction first", got[0].DeliveryID, got[1].DeliveryID)
	}
	rest, err := b.store.ReadLog(ctx, got[1].At, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 0 {
		t.Fatalf("read %d events after the last one", len(rest))
	}
}

func TestMigrationsUpDownUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	all, err := postgres.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.CheckSchema(ctx, b.schema.Pool); err != nil {
		t.Fatalf("fresh schema: %v", err)
	}
	steps, err := postgres.Migrate(ctx, b.schema.Pool, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if steps != len(all) {
		t.Fatalf("down took %d steps, want %d", steps, len(all))
	}
	if err := postgres.CheckSchema(ctx, b.schema.Pool); !errors.Is(err, postgres.ErrSchemaBehind) {
		t.Fatalf("schema at zero: got %v, want ErrSchemaBehind", err)
	}
	var tables int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name <> 'schema_migrations'`, b.schema.Name).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("%d tables left after migrating down to zero", tables)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, -1, nil); err != nil {
		t.Fatal(err)
	}
	if steps, err := postgres.Migrate(ctx, b.schema.Pool, -1, nil); err != nil || steps != 0 {
		t.Fatalf("second migrate: %d steps, %v; want 0, nil", steps, err)
	}
	if err := postgres.CheckSchema(ctx, b.schema.Pool); err != nil {
		t.Fatal(err)
	}
}

// acceptStores are the implementations of commands.AcceptStore: one conformance suite runs on
// each.
var acceptStores = map[string]func(t *testing.T, b *storeBundle) commands.AcceptStore{
	"single": func(_ *testing.T, b *storeBundle) commands.AcceptStore { return b.store },
	"batched": func(t *testing.T, b *storeBundle) commands.AcceptStore {
		batcher := postgres.NewAcceptBatcher(b.store, 2, 16)
		t.Cleanup(batcher.Close)
		return batcher
	},
}

func TestAcceptStoreConformance(t *testing.T) {
	t.Parallel()
	for name, build := range acceptStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("OncePerKey", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				testRecordAcceptOncePerKey(t, b, build(t, b))
			})
			t.Run("InFlight", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				testRecordAcceptInFlight(t, b, build(t, b))
			})
			t.Run("Concurrent", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				testRecordAcceptConcurrent(t, b, build(t, b))
			})
			t.Run("PayloadOnce", func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				testRecordAcceptPayloadOnce(t, b, build(t, b))
			})
		})
	}
}

func testRecordAcceptOncePerKey(t *testing.T, b *storeBundle, store commands.AcceptStore) {
	ctx := context.Background()
	_, events := acceptedEvents(t)
	rec := commands.AcceptRecord{Tenant: "acme", RequestKey: "k1", RequestHash: []byte("h1"), Events: events, Response: []byte(`{"n":1}`)}
	resp, replayed, err := store.RecordAccept(ctx, rec)
	if err != nil || replayed || string(resp) != `{"n":1}` {
		t.Fatalf("first: %s %v %v", resp, replayed, err)
	}
	rec.Response = []byte(`{"n":2}`)
	resp, replayed, err = store.RecordAccept(ctx, rec)
	if err != nil || !replayed || string(resp) != `{"n": 1}` && string(resp) != `{"n":1}` {
		t.Fatalf("repeat: %s %v %v", resp, replayed, err)
	}
	rec.RequestHash = []byte("other")
	if _, _, err := store.RecordAccept(ctx, rec); !errors.Is(err, commands.ErrRequestMismatch) {
		t.Fatalf("other body: got %v, want ErrRequestMismatch", err)
	}
	// The same key under another tenant is another request.
	_, otherEvents := acceptedEvents(t)
	rec2 := commands.AcceptRecord{Tenant: "globex", RequestKey: "k1", RequestHash: []byte("h1"), Events: otherEvents, Response: []byte(`{}`)}
	if _, replayed, err := store.RecordAccept(ctx, rec2); err != nil || replayed {
		t.Fatalf("other tenant: %v %v", replayed, err)
	}
}

func testRecordAcceptInFlight(t *testing.T, b *storeBundle, store commands.AcceptStore) {
	ctx := context.Background()
	// Hold the first request inside its transaction: lock the events table so its insert waits.
	blocker, err := b.schema.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, `LOCK TABLE events IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	_, events := acceptedEvents(t)
	rec := commands.AcceptRecord{Tenant: "acme", RequestKey: "slow", RequestHash: []byte("h"), Events: events, Response: []byte(`{}`)}
	first := make(chan error, 1)
	go func() {
		_, _, err := store.RecordAccept(ctx, rec)
		first <- err
	}()
	waitForLockWait(t, b, "events")
	if _, _, err := store.RecordAccept(ctx, rec); !errors.Is(err, commands.ErrRequestInFlight) {
		t.Fatalf("concurrent repeat: got %v, want ErrRequestInFlight", err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first request: %v", err)
	}
	if _, replayed, err := store.RecordAccept(ctx, rec); err != nil || !replayed {
		t.Fatalf("repeat after completion: %v %v", replayed, err)
	}
}

// testRecordAcceptConcurrent: many requests at once, some repeated, each answered as if alone.
func testRecordAcceptConcurrent(t *testing.T, b *storeBundle, store commands.AcceptStore) {
	ctx := context.Background()
	const n = 40
	type answer struct {
		resp     []byte
		replayed bool
		err      error
	}
	answers := make([]answer, 2*n)
	var wg sync.WaitGroup
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, events := acceptedEvents(t)
			key := fmt.Sprintf("k%d", i%n) // every key is sent twice
			rec := commands.AcceptRecord{Tenant: "acme", RequestKey: key, RequestHash: []byte(key), Events: events,
				Response: []byte(fmt.Sprintf(`{"key":%q,"from":%d}`, key, i))}
			if i%n == 7 {
				rec.RequestHash = []byte(fmt.Sprintf("other-%d", i)) // the two copies of k7 differ
			}
			resp, replayed, err := store.RecordAccept(ctx, rec)
			answers[i] = answer{resp, replayed, err}
		}()
	}
	wg.Wait()
	for k := range n {
		a, c := answers[k], answers[k+n]
		ok := 0
		for _, x := range []answer{a, c} {
			switch {
			case x.err == nil && !x.replayed:
				ok++
			case x.err == nil && x.replayed, errors.Is(x.err, commands.ErrRequestInFlight):
			case k == 7 && errors.Is(x.err, commands.ErrRequestMismatch):
			default:
				t.Fatalf("key k%d: unexpected answer %+v", k, x)
			}
		}
		if ok != 1 {
			t.Fatalf("key k%d was recorded %d times, want once", k, ok)
		}
	}
	var events, requests int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM accept_requests`).Scan(&requests); err != nil {
		t.Fatal(err)
	}
	if events != n || requests != n {
		t.Fatalf("%d events and %d requests recorded, want %d of each", events, requests, n)
	}
	var txs int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(DISTINCT transaction_id) FROM events`).Scan(&txs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d accepts committed in %d transactions", n, txs)
}

// waitForLockWait polls pg_locks until some backend waits for a lock on the schema's table.
func waitForLockWait(t *testing.T, b *storeBundle, table string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting bool
		err := b.schema.Pool.QueryRow(context.Background(), `SELECT EXISTS (
			SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE NOT l.granted AND c.relname = $1 AND n.nspname = $2)`, table, b.schema.Name).Scan(&waiting)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no backend waited for a lock on %s", table)
}

// TestAppendBatcherConformance: appends sharing transactions answer as they would alone.
func TestAppendBatcherConformance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	batcher := postgres.NewAppendBatcher(b.store, 2, 16)
	t.Cleanup(batcher.Close)

	// Many streams at once, each with one writer that wins and one duplicate of it.
	const streams = 20
	var wg sync.WaitGroup
	errs := make([]error, 2*streams)
	ids := make([]string, streams)
	for i := range streams {
		d, events := acceptedEvents(t)
		ids[i] = d.ID()
		if err := batcher.Append(ctx, events, nil); err != nil {
			t.Fatal(err)
		}
		queued, err := d.Queue(time.Now().UTC())
		if err != nil {
			t.Fatal(err)
		}
		for j := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[2*i+j] = batcher.Append(ctx, queued, []commands.OutboxMessage{{ID: uuid.Must(uuid.NewV7()).String(), Topic: "t", PartitionKey: d.ID(), Payload: []byte(`{}`)}})
			}()
		}
	}
	wg.Wait()
	for i := range streams {
		a, c := errs[2*i], errs[2*i+1]
		okA, okC := a == nil, c == nil
		dupA, dupC := errors.Is(a, commands.ErrDuplicate), errors.Is(c, commands.ErrDuplicate)
		if !(okA && dupC || dupA && okC) {
			t.Fatalf("stream %d: answers %v and %v, want one success and one duplicate", i, a, c)
		}
		loaded, err := batcher.Load(ctx, ids[i])
		if err != nil || len(loaded) != 2 {
			t.Fatalf("stream %d: %d events (%v), want 2", i, len(loaded), err)
		}
	}
	var outbox int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_outbox_all`).Scan(&outbox); err != nil {
		t.Fatal(err)
	}
	if outbox != streams {
		t.Fatalf("%d outbox rows, want %d: a refused append must leave no message", outbox, streams)
	}
	// A version taken by another event is a conflict, not a duplicate.
	d, events := acceptedEvents(t)
	if err := batcher.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	other := events[0]
	other.Key = d.ID() + "/other"
	if err := batcher.Append(ctx, []domain.Event{other}, nil); !errors.Is(err, commands.ErrVersionConflict) {
		t.Fatalf("taken version: got %v, want ErrVersionConflict", err)
	}
}

// TestAppendBatcherAnswersConflictsAndCommitsTheRest: appends meeting versions recorded by
// someone else (the relay's queued record before a worker's) get their own answers, duplicate
// or conflict, while the appends batched with them are committed.
func TestAppendBatcherAnswersConflictsAndCommitsTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	batcher := postgres.NewAppendBatcher(b.store, 1, 64)
	t.Cleanup(batcher.Close)

	const streams = 40
	type stream struct {
		d      *domain.Delivery
		queued []domain.Event
		want   error
	}
	all := make([]stream, streams)
	for i := range all {
		d, events := acceptedEvents(t)
		if err := b.store.Append(ctx, events, nil); err != nil {
			t.Fatal(err)
		}
		queued, err := d.Queue(time.Now().UTC())
		if err != nil {
			t.Fatal(err)
		}
		all[i] = stream{d: d, queued: queued}
		switch i % 4 {
		case 1: // someone recorded the same transition first: a duplicate
			if err := b.store.Append(ctx, queued, nil); err != nil {
				t.Fatal(err)
			}
			all[i].want = commands.ErrDuplicate
		case 2: // someone recorded another event at that version: a conflict
			other := queued[0]
			other.Key = d.ID() + "/other"
			if err := b.store.Append(ctx, []domain.Event{other}, nil); err != nil {
				t.Fatal(err)
			}
			all[i].want = commands.ErrVersionConflict
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, streams)
	for i := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = batcher.Append(ctx, all[i].queued, nil)
		}()
	}
	wg.Wait()
	for i, s := range all {
		if s.want == nil && errs[i] != nil || s.want != nil && !errors.Is(errs[i], s.want) {
			t.Fatalf("stream %d: got %v, want %v", i, errs[i], s.want)
		}
		loaded, err := b.store.Load(ctx, s.d.ID())
		if err != nil || len(loaded) != 2 {
			t.Fatalf("stream %d: %d events (%v), want 2", i, len(loaded), err)
		}
		if s.want == nil && loaded[1].Key != s.queued[0].Key {
			t.Fatalf("stream %d: version 2 is %s, want the batch's %s", i, loaded[1].Key, s.queued[0].Key)
		}
	}
}

// TestWritesReuseGenericPlansLookupsDoNot: the inserts of an append run on a generic plan once
// PostgreSQL has one (planning them every time cost as much as running them), while the stream
// load, a lookup whose plan must follow the table's growth, is still planned on every execution.
func TestWritesReuseGenericPlansLookupsDoNot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.New(t)
	// One connection, so that its prepared statements are the ones counted below.
	pool, err := postgres.Connect(ctx, s.URL, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := postgres.NewEventStore(pool)
	var ids []string
	for range 12 {
		d, events := acceptedEvents(t)
		if err := store.Append(ctx, events, nil); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID())
		if _, err := store.Load(ctx, d.ID()); err != nil {
			t.Fatal(err)
		}
	}
	plans := func(prefix string) (generic, custom int64) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
			FROM pg_prepared_statements WHERE statement LIKE $1 || '%'`, prefix).Scan(&generic, &custom)
		if err != nil {
			t.Fatal(err)
		}
		return generic, custom
	}
	if generic, custom := plans("INSERT INTO events"); generic == 0 {
		t.Errorf("event inserts: %d generic and %d custom plans, want generic plans after the first few", generic, custom)
	}
	if generic, custom := plans("SELECT delivery_id::text"); generic != 0 || custom < 12 {
		t.Errorf("stream loads: %d generic and %d custom plans, want a custom plan every time", generic, custom)
	}
	var mode string
	if err := pool.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil || mode != "force_custom_plan" {
		t.Errorf("plan_cache_mode after the writes = %q (%v), want force_custom_plan: the writes' setting must end with their transaction", mode, err)
	}
}

// TestLoadOfScopesToTheTenant: LoadOf answers another tenant's stream exactly like an unknown id.
func TestLoadOfScopesToTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d, events := acceptedEvents(t)
	if err := b.store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.LoadOf(ctx, "acme", d.ID())
	if err != nil || len(got) != 1 || got[0].Tenant != "acme" {
		t.Fatalf("LoadOf(acme) = %v, %v; want its stream", got, err)
	}
	for _, tc := range []struct{ tenant, id string }{{"globex", d.ID()}, {"acme", uuid.Must(uuid.NewV7()).String()}, {"acme", "urn:uuid:" + uuid.Must(uuid.NewV7()).String()}, {"acme", "nope"}} {
		if got, err := b.store.LoadOf(ctx, tc.tenant, tc.id); !errors.Is(err, commands.ErrNotFound) || got != nil {
			t.Errorf("LoadOf(%s, %s) = %v, %v; want ErrNotFound and nothing", tc.tenant, tc.id, got, err)
		}
	}
	// The URN spelling of the id, which PostgreSQL refuses, loads the stream in its canonical form.
	if got, err := b.store.LoadOf(ctx, "acme", "urn:uuid:"+d.ID()); err != nil || len(got) != 1 {
		t.Fatalf("LoadOf(urn form) = %v, %v", got, err)
	}
}

// TestLoadOfDoesTheSameWorkForAForeignAndAnUnknownID: another tenant's delivery id and an id
// that does not exist cost the tenant's load the same buffers (and neither reads the stream),
// so the time of a 404 tells nothing of other tenants' deliveries; the owner's load reads it.
func TestLoadOfDoesTheSameWorkForAForeignAndAnUnknownID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// A stream of several events, so that reading it would show.
	d, events := acceptedEvents(t)
	now := time.Now().UTC()
	for _, step := range []func() ([]domain.Event, error){
		func() ([]domain.Event, error) { return d.Queue(now) },
		func() ([]domain.Event, error) { return d.StartAttempt("webhook", now) },
		func() ([]domain.Event, error) {
			return d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeDelivered, Provider: "webhook", StatusCode: 200},
				domain.DefaultRetryPolicy(), now, 0)
		},
	} {
		more, err := step()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, more...)
	}
	if err := b.store.Append(ctx, events, nil); err != nil {
		t.Fatal(err)
	}
	buffers := func(tenant, id string) (touched int, rows int) {
		t.Helper()
		// The pool's plans: one custom plan per execution (Connect's plan_cache_mode).
		var plan []struct {
			Plan struct {
				Rows   int `json:"Actual Rows"`
				Hit    int `json:"Shared Hit Blocks"`
				Read   int `json:"Shared Read Blocks"`
				Dirty  int `json:"Shared Dirtied Blocks"`
				Writes int `json:"Shared Written Blocks"`
			} `json:"Plan"`
		}
		var out []byte
		if err := b.schema.Pool.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+postgres.EventsByDeliveryOf, id, tenant).Scan(&out); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
			t.Fatalf("plan %s: %v", out, err)
		}
		p := plan[0].Plan
		return p.Hit + p.Read, p.Rows
	}
	// Warm: the first execution of each may read the catalogue or set hint bits.
	for range 2 {
		buffers("globex", d.ID())
		buffers("globex", uuid.Must(uuid.NewV7()).String())
		buffers("acme", d.ID())
	}
	foreign, foreignRows := buffers("globex", d.ID())
	unknown, unknownRows := buffers("globex", uuid.Must(uuid.NewV7()).String())
	own, ownRows := buffers("acme", d.ID())
	if foreignRows != 0 || unknownRows != 0 || ownRows != len(events) {
		t.Fatalf("rows: foreign %d, unknown %d, own %d; want 0, 0, %d", foreignRows, unknownRows, ownRows, len(events))
	}
	if foreign != unknown {
		t.Fatalf("another tenant's id touched %d buffers and an unknown id %d: a 404's time tells them apart", foreign, unknown)
	}
	if own <= foreign {
		t.Fatalf("the owner's load touched %d buffers, the refusals %d: the test no longer sees the stream read", own, foreign)
	}
}

// BenchmarkLoadOf times a tenant's load of another tenant's delivery against an unknown id
// (go test -run '^$' -bench LoadOf ./adapters/postgres): the two answers must cost the same.
func BenchmarkLoadOf(b *testing.B) {
	s := pgtest.New(b)
	store := postgres.NewEventStore(s.Pool)
	ctx := context.Background()
	d, events, err := domain.Accept(domain.AcceptSpec{ID: uuid.Must(uuid.NewV7()).String(), Tenant: "globex", Channel: "webhook",
		Recipient: "https://example.com/h", Payload: json.RawMessage(`{"a":1}`), Priority: domain.PriorityNormal, MaxAttempts: 3}, time.Now().UTC())
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Append(ctx, events, nil); err != nil {
		b.Fatal(err)
	}
	for name, id := range map[string]string{"other-tenant": d.ID(), "unknown": uuid.Must(uuid.NewV7()).String()} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := store.LoadOf(ctx, "acme", id); !errors.Is(err, commands.ErrNotFound) {
					b.Fatal(err)
				}
			}
		})
	}
}

// testRecordAcceptPayloadOnce: the payload of a notification is kept once, apart from its
// deliveries' accepted events, and every read that needs it (Load, LoadMany, LoadOf, the export)
// gives the events back as the domain recorded them; the projections' log reads leave it out.
func testRecordAcceptPayloadOnce(t *testing.T, b *storeBundle, store commands.AcceptStore) {
	ctx := context.Background()
	const notifications = 8
	type accepted struct {
		ids     []string
		payload string
	}
	all := make([]accepted, notifications)
	var wg sync.WaitGroup
	errs := make(chan error, notifications)
	for n := range notifications {
		payload := fmt.Sprintf(`{"n": %d, "text": "payload of notification %d"}`, n, n)
		notification := uuid.Must(uuid.NewV7()).String()
		rec := commands.AcceptRecord{Tenant: "acme", RequestKey: "p-" + notification, RequestHash: []byte("h"),
			NotificationID: notification, Payload: []byte(payload), Response: []byte(`{}`)}
		at := time.Now()
		for range 2 { // the deliveries of one accept share its time, as commands.DeliveryID gives it
			_, events, err := domain.Accept(domain.AcceptSpec{ID: deliveryIDAt(at), Tenant: "acme", NotificationID: notification,
				Channel: "webhook", Recipient: "https://example.com/" + uuid.Must(uuid.NewV7()).String(), Payload: json.RawMessage(payload),
				Priority: domain.PriorityNormal, MaxAttempts: 3}, time.Now().UTC())
			if err != nil {
				t.Fatal(err)
			}
			rec.Events = append(rec.Events, events...)
			all[n].ids = append(all[n].ids, events[0].DeliveryID)
		}
		all[n].payload = payload
		wg.Go(func() {
			if _, _, err := store.RecordAccept(ctx, rec); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var stored, inline int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM notification_payloads),
		(SELECT count(*) FROM events WHERE data ? 'payload')`).Scan(&stored, &inline); err != nil {
		t.Fatal(err)
	}
	if stored != notifications || inline != 0 {
		t.Fatalf("%d payloads stored apart and %d accepted events with their own, want %d and 0", stored, inline, notifications)
	}
	payloadOf := func(e domain.Event) string {
		t.Helper()
		data, err := domain.DecodeData(e)
		if err != nil {
			t.Fatal(err)
		}
		a := data.(*domain.Accepted)
		if a.PayloadSHA256 != "" {
			t.Fatalf("loaded accepted event still names its payload by hash: %s", e.Data)
		}
		var v any
		if err := json.Unmarshal(a.Payload, &v); err != nil {
			t.Fatalf("payload %q: %v", a.Payload, err)
		}
		out, _ := json.Marshal(v)
		return string(out)
	}
	norm := func(s string) string {
		var v any
		_ = json.Unmarshal([]byte(s), &v)
		out, _ := json.Marshal(v)
		return string(out)
	}
	var ids []string
	for _, a := range all {
		for _, id := range a.ids {
			ids = append(ids, id)
			for name, load := range map[string]func() ([]domain.Event, error){
				"Load":   func() ([]domain.Event, error) { return b.store.Load(ctx, id) },
				"LoadOf": func() ([]domain.Event, error) { return b.store.LoadOf(ctx, "acme", id) },
			} {
				events, err := load()
				if err != nil {
					t.Fatalf("%s(%s): %v", name, id, err)
				}
				if got := payloadOf(events[0]); got != norm(a.payload) {
					t.Fatalf("%s(%s): payload %s, want %s", name, id, got, a.payload)
				}
			}
		}
	}
	many, err := b.store.LoadMany(ctx, ids)
	if err != nil || len(many) != len(ids) {
		t.Fatalf("LoadMany: %d streams, %v", len(many), err)
	}
	for _, a := range all {
		if got := payloadOf(many[a.ids[1]][0]); got != norm(a.payload) {
			t.Fatalf("LoadMany: payload %s, want %s", got, a.payload)
		}
	}
	exported := 0
	if err := b.store.ExportLog(ctx, postgres.LogRange{}, func(le projections.LoggedEvent) error {
		if payloadOf(le.Event) == "" {
			t.Fatalf("export without payload")
		}
		exported++
		return nil
	}); err != nil || exported != len(ids) {
		t.Fatalf("export: %d events, %v", exported, err)
	}
}

// TestMigratingBelowPayloadsApartKeepsThePayloads: going down past migration 0007 puts every
// payload kept apart back into its accepted events, so no history is lost.
func TestMigratingBelowPayloadsApartKeepsThePayloads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	notification := uuid.Must(uuid.NewV7()).String()
	rec := commands.AcceptRecord{Tenant: "acme", RequestKey: "down-1", RequestHash: []byte("h"), NotificationID: notification,
		Payload: []byte(`{"a": 1}`), Response: []byte(`{}`)}
	at := time.Now()
	for range 2 { // a fan-out: the payload is kept apart
		_, events, err := domain.Accept(domain.AcceptSpec{ID: deliveryIDAt(at), Tenant: "acme", NotificationID: notification,
			Channel: "webhook", Recipient: "https://example.com/" + uuid.Must(uuid.NewV7()).String(), Payload: json.RawMessage(`{"a": 1}`),
			Priority: domain.PriorityNormal, MaxAttempts: 3}, time.Now().UTC())
		if err != nil {
			t.Fatal(err)
		}
		rec.Events = append(rec.Events, events...)
	}
	if _, _, err := b.store.RecordAccept(ctx, rec); err != nil {
		t.Fatal(err)
	}
	apart := func() int {
		t.Helper()
		var n int
		if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE data ? 'payload_sha256'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := apart(); n != 2 {
		t.Fatalf("%d accepted events keep their payload apart, want 2", n)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, 6, nil); err != nil {
		t.Fatal(err)
	}
	var inline int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE data->'payload' = '{"a": 1}'::jsonb AND NOT data ? 'payload_sha256'`).Scan(&inline); err != nil {
		t.Fatal(err)
	}
	if inline != 2 {
		t.Fatalf("after migrating down %d accepted events carry their payload, want 2", inline)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, -1, nil); err != nil {
		t.Fatal(err)
	}
}

// TestAPayloadNamingTheMarkerIsItsOwn: a payload kept inline that happens to hold a
// payload_sha256 member of its own loads as it is.
func TestAPayloadNamingTheMarkerIsItsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	payload := json.RawMessage(`{"payload_sha256": "mine", "notification_id": "also mine"}`)
	_, events, err := domain.Accept(domain.AcceptSpec{ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", NotificationID: uuid.Must(uuid.NewV7()).String(),
		Channel: "webhook", Recipient: "https://example.com/h", Payload: payload, Priority: domain.PriorityNormal, MaxAttempts: 3}, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.RecordAccept(ctx, commands.AcceptRecord{Tenant: "acme", RequestKey: "marker", RequestHash: []byte("h"),
		Payload: payload, Events: events, Response: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.Load(ctx, events[0].DeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	d, err := domain.Rehydrate(got)
	if err != nil {
		t.Fatal(err)
	}
	var own map[string]string
	if err := json.Unmarshal(d.Payload(), &own); err != nil || own["payload_sha256"] != "mine" || own["notification_id"] != "also mine" {
		t.Fatalf("payload %s (%v), want the caller's own", d.Payload(), err)
	}
}

// deliveryIDAt is a new delivery id of accept time at: a version 7 UUID of at's millisecond, as
// commands.DeliveryID makes them, so that it lands in the partitions of that time.
func deliveryIDAt(at time.Time) string {
	id := uuid.Must(uuid.NewV7())
	ms := uint64(at.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	return id.String()
}

// TestAcceptAnswersAreBytesInEveryPartition: the migration that made the stored answers bytes
// changed every partition of accept_requests that was cut before it; going back below it
// refuses while a compact answer is held (jsonb cannot hold it, and deleting it would let a
// repeat of its request be accepted again), and goes once only JSON answers are left.
func TestAcceptAnswersAreBytesInEveryPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	before := pgtest.MigrationVersion(t, "accept_answer_bytes") - 1
	// Partitions cut while the answers were jsonb, then the migration.
	if _, err := postgres.Migrate(ctx, b.schema.Pool, before, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.EnsurePartitions(ctx, b.schema.Pool, postgres.PartitionConfig{Width: time.Hour, Ahead: 3 * time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, -1, nil); err != nil {
		t.Fatal(err)
	}
	var partitions, notBytes int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE a.atttypid <> 'bytea'::regtype)
		FROM pg_inherits i JOIN pg_attribute a ON a.attrelid = i.inhrelid AND a.attname = 'response'
		WHERE i.inhparent = 'accept_requests'::regclass`).Scan(&partitions, &notBytes); err != nil {
		t.Fatal(err)
	}
	if partitions < 2 || notBytes != 0 {
		t.Fatalf("%d of %d partitions of accept_requests hold the answer in another type than bytea", notBytes, partitions)
	}

	answer, err := commands.EncodeAcceptAnswer(commands.AcceptResult{NotificationID: commands.NotificationID("acme", "compact-1"),
		AcceptedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	compact := newAccept(t, "compact-1", "")
	compact.Response = answer
	if _, _, err := b.store.RecordAccept(ctx, compact); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.RecordAccept(ctx, newAccept(t, "json-1", `{"notification_id": "n"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, before, nil); err == nil || !strings.Contains(err.Error(), "1 answers in the compact form") {
		t.Fatalf("migrating below the compact answers: %v, want a refusal naming them", err)
	}
	// The migrations above it went down; the refused one stays.
	if v, err := postgres.SchemaVersion(ctx, b.schema.Pool); err != nil || v != pgtest.MigrationVersion(t, "accept_answer_bytes") {
		t.Fatalf("after the refusal the schema is at %d (%v), want %d", v, err, pgtest.MigrationVersion(t, "accept_answer_bytes"))
	}
	if _, err := b.schema.Pool.Exec(ctx, `DELETE FROM accept_requests WHERE request_key = 'compact-1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, before, nil); err != nil {
		t.Fatal(err)
	}
	var kept string
	if err := b.schema.Pool.QueryRow(ctx, `SELECT response->>'notification_id' FROM accept_requests WHERE request_key = 'json-1'`).Scan(&kept); err != nil || kept != "n" {
		t.Fatalf("the JSON answer below the migration: %q (%v)", kept, err)
	}
	if _, err := postgres.Migrate(ctx, b.schema.Pool, -1, nil); err != nil {
		t.Fatal(err)
	}
}

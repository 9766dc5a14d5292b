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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// narrowPartitions replaces the partitions that pgtest cut ahead (an hour wide, empty) of the
// given tables with partitions of width, from the migration's first partition's bound to now plus
// ahead, and returns them by table.
func narrowPartitions(t *testing.T, b *storeBundle, width, ahead time.Duration, tables ...postgres.PartitionedTable) map[string][]postgres.Partition {
	t.Helper()
	ctx := context.Background()
	out := map[string][]postgres.Partition{}
	for _, table := range tables {
		have, err := postgres.Partitions(ctx, b.schema.Pool, table.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range have {
			if p.From.IsZero() {
				continue
			}
			if _, err := b.schema.Pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{p.Name}.Sanitize()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := postgres.EnsurePartitionsOf(ctx, b.schema.Pool, tables, postgres.PartitionConfig{Width: width, Ahead: ahead}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		have, err := postgres.Partitions(ctx, b.schema.Pool, table.Name)
		if err != nil {
			t.Fatal(err)
		}
		out[table.Name] = have
	}
	return out
}

// partitionOf is the partition of parts that holds time at.
func partitionOf(t *testing.T, parts []postgres.Partition, at time.Time) postgres.Partition {
	t.Helper()
	for _, p := range parts {
		if !at.Before(p.From) && at.Before(p.To) {
			return p
		}
	}
	t.Fatalf("no partition holds %s", at)
	return postgres.Partition{}
}

// fanOut builds the accept record of a notification to two recipients accepted at at: its
// payload is kept apart, once.
func fanOut(t *testing.T, notification, key string, payload string, at time.Time) commands.AcceptRecord {
	t.Helper()
	rec := commands.AcceptRecord{Tenant: "acme", RequestKey: key, RequestHash: []byte(key), NotificationID: notification,
		Payload: []byte(payload), Response: []byte(fmt.Sprintf(`{"key":%q}`, key))}
	for i := range 2 {
		r := commands.Recipient{Channel: "webhook", Recipient: fmt.Sprintf("https://example.com/%d", i)}
		_, events, err := domain.Accept(domain.AcceptSpec{ID: commands.DeliveryID(notification, r, at), Tenant: "acme",
			NotificationID: notification, Channel: r.Channel, Recipient: r.Recipient, Payload: json.RawMessage(payload),
			Priority: domain.PriorityNormal, MaxAttempts: 3}, at)
		if err != nil {
			t.Fatal(err)
		}
		rec.Events = append(rec.Events, events...)
	}
	return rec
}

var eventsTable = postgres.PartitionedTable{Name: "events", Key: postgres.KeyDeliveryID}

// TestADeliveryLivesInItsAcceptPartition: with partitions a second wide, every event of a
// delivery, however late it is recorded, sits in the partition of the delivery's accept time
// (its id's): two deliveries accepted on either side of a boundary sit in two partitions, and a
// retention pass that drops a partition takes whole histories.
func TestADeliveryLivesInItsAcceptPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	parts := narrowPartitions(t, b, time.Second, 10*time.Second, eventsTable)["events"]
	boundary := parts[len(parts)-3].To
	for _, at := range []time.Time{boundary.Add(-time.Millisecond), boundary} {
		d, events, err := domain.Accept(domain.AcceptSpec{ID: deliveryIDAt(at), Tenant: "acme", Channel: "webhook",
			Recipient: "https://example.com/hook", Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 3}, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.Append(ctx, events, nil); err != nil {
			t.Fatal(err)
		}
		later := at.Add(5 * time.Second) // recorded in a later partition's time: it goes by the id
		queued, err := d.Queue(later)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.Append(ctx, queued, nil); err != nil {
			t.Fatal(err)
		}
		started, err := d.StartAttempt("webhook", later)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.Append(ctx, started, nil); err != nil {
			t.Fatal(err)
		}
		rows, err := b.schema.Pool.Query(ctx, `SELECT tableoid::regclass::text FROM events WHERE delivery_id = $1`, d.ID())
		if err != nil {
			t.Fatal(err)
		}
		in, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		want := partitionOf(t, parts, at).Name
		if len(in) != 3 || in[0] != want || in[1] != want || in[2] != want {
			t.Fatalf("the events of a delivery accepted at %s sit in %v, want all 3 in %s", at.Format(time.RFC3339Nano), in, want)
		}
	}
}

// TestAnEventKeyIsOnceAcrossPartitions: the events' idempotency key is unique with its delivery
// (the partition key): a repeat of an operation recorded in an older partition is a duplicate,
// and AppendEach skips it, as when the key alone was unique.
func TestAnEventKeyIsOnceAcrossPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	parts := narrowPartitions(t, b, time.Second, 10*time.Second, eventsTable)["events"]
	old := parts[0].To.Add(-time.Hour) // the migration's first partition
	d, events, err := domain.Accept(domain.AcceptSpec{ID: deliveryIDAt(old), Tenant: "acme", Channel: "webhook",
		Recipient: "https://example.com/hook", Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal, MaxAttempts: 3}, old)
	if err != nil {
		t.Fatal(err)
	}
	_, newer := acceptedEvents(t) // now: another partition
	if err := b.store.Append(ctx, append(events, newer...), nil); err != nil {
		t.Fatal(err)
	}
	var partitions int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(DISTINCT tableoid) FROM events`).Scan(&partitions); err != nil || partitions != 2 {
		t.Fatalf("the two deliveries sit in %d partitions (%v), want 2", partitions, err)
	}
	queued, err := d.Queue(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Append(ctx, queued, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Append(ctx, queued, nil); !errors.Is(err, commands.ErrDuplicate) {
		t.Fatalf("repeat: got %v, want ErrDuplicate", err)
	}
	again := queued[0]
	again.Version = 3 // a writer that did not see the first
	if err := b.store.Append(ctx, []domain.Event{again}, nil); !errors.Is(err, commands.ErrDuplicate) {
		t.Fatalf("repeat at the next version: got %v, want ErrDuplicate", err)
	}
	batcher := postgres.NewAppendBatcher(b.store, 1, 8)
	t.Cleanup(batcher.Close)
	if err := batcher.Append(ctx, []domain.Event{again}, nil); !errors.Is(err, commands.ErrDuplicate) {
		t.Fatalf("batched repeat: got %v, want ErrDuplicate", err)
	}
	if n, err := b.store.AppendEach(ctx, []domain.Event{again}); err != nil || n != 0 {
		t.Fatalf("AppendEach of a recorded key wrote %d (%v), want 0", n, err)
	}
	var n int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE delivery_id = $1`, d.ID()).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d events of the delivery (%v), want 2", n, err)
	}
}

// TestARepeatedAcceptKeyInAnOlderPartitionReplays: an Idempotency-Key whose first use is recorded
// in an older partition of accept_requests gets the stored answer, not a second accept: no
// unique index refuses a second row of the key since the primary key holds created_at, and the
// write looks in every partition first. The repeat comes
// with its own deliveries (a later accept time, so other ids), as the accept handler builds them.
func TestARepeatedAcceptKeyInAnOlderPartitionReplays(t *testing.T) {
	t.Parallel()
	for name, build := range acceptStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			store := build(t, b)
			ctx := context.Background()
			first := fanOut(t, "n-old", "k-old", `{"n": 1}`, time.Now())
			if _, replayed, err := store.RecordAccept(ctx, first); err != nil || replayed {
				t.Fatalf("first use: %v %v", replayed, err)
			}
			// The first use moves to the migration's first partition, as if it had been recorded
			// hours ago.
			if _, err := b.schema.Pool.Exec(ctx, `UPDATE accept_requests SET created_at = created_at - interval '2 hours'`); err != nil {
				t.Fatal(err)
			}
			var in string
			if err := b.schema.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM accept_requests`).Scan(&in); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(in, "accept_requests_p0_") {
				t.Fatalf("the first use sits in %s, want the first partition", in)
			}
			repeat := fanOut(t, "n-old", "k-old", `{"n": 1}`, time.Now().Add(time.Millisecond))
			repeat.Response = []byte(`{"second": true}`)
			resp, replayed, err := store.RecordAccept(ctx, repeat)
			if err != nil || !replayed || !sameJSON(resp, first.Response) {
				t.Fatalf("repeat: %s %v %v, want the stored answer %s replayed", resp, replayed, err, first.Response)
			}
			other := repeat
			other.RequestHash = []byte("another body")
			if _, _, err := store.RecordAccept(ctx, other); !errors.Is(err, commands.ErrRequestMismatch) {
				t.Fatalf("another body: got %v, want ErrRequestMismatch", err)
			}
			// A batch of the repeat and a new key: the repeat replays, the new key is accepted.
			if batcher, ok := store.(*postgres.AcceptBatcher); ok {
				fresh := fanOut(t, "n-new", "k-new", `{"n": 2}`, time.Now().Add(2*time.Millisecond))
				answers := batcher.CommitBatch(ctx, []commands.AcceptRecord{repeat, fresh})
				if a := answers[0]; a.Err != nil || !a.Replayed || !sameJSON(a.Response, first.Response) {
					t.Fatalf("repeat in a batch: %+v", a)
				}
				if a := answers[1]; a.Err != nil || a.Replayed {
					t.Fatalf("new key in a batch: %+v", a)
				}
			}
			var requests, deliveries int
			if err := b.schema.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM accept_requests WHERE request_key = 'k-old'),
				(SELECT count(*) FROM events WHERE data->>'notification_id' = 'n-old')`).Scan(&requests, &deliveries); err != nil {
				t.Fatal(err)
			}
			if requests != 1 || deliveries != 2 {
				t.Fatalf("key recorded %d times with %d deliveries, want once with 2", requests, deliveries)
			}
		})
	}
}

// TestConcurrentFirstUsesAcrossABoundaryAcceptOnce: requests of one Idempotency-Key sent
// together and again and again for longer than a partition of accept_requests is wide (a
// second) make one accept: those that overlap it are in flight, those after it get its answer,
// also when they come in the next partition's time.
func TestConcurrentFirstUsesAcrossABoundaryAcceptOnce(t *testing.T) {
	t.Parallel()
	for name, build := range acceptStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			store := build(t, b)
			ctx := context.Background()
			parts := narrowPartitions(t, b, time.Second, 10*time.Second,
				postgres.PartitionedTable{Name: "accept_requests", Key: postgres.KeyTime})["accept_requests"]
			start := time.Now()
			boundary := partitionOf(t, parts, start).To
			const senders = 6
			type tally struct{ accepted, replayed, inFlight, sent int }
			tallies := make([]tally, senders)
			errs := make(chan error, senders)
			var wg sync.WaitGroup
			for s := range senders {
				wg.Go(func() {
					// Bounded in count and time: past the boundary by a quarter of a second.
					for i := 0; i < 500 && time.Now().Before(boundary.Add(250*time.Millisecond)); i++ {
						rec := fanOut(t, "n-once", "k-once", `{"n": 1}`, time.Now())
						rec.Response = []byte(fmt.Sprintf(`{"sender":%d,"i":%d}`, s, i))
						_, replayed, err := store.RecordAccept(ctx, rec)
						tallies[s].sent++
						switch {
						case errors.Is(err, commands.ErrRequestInFlight):
							tallies[s].inFlight++
						case err != nil:
							errs <- err
							return
						case replayed:
							tallies[s].replayed++
						default:
							tallies[s].accepted++
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var total tally
			for _, x := range tallies {
				total.accepted, total.replayed, total.inFlight, total.sent = total.accepted+x.accepted, total.replayed+x.replayed, total.inFlight+x.inFlight, total.sent+x.sent
			}
			var requests, deliveries int
			if err := b.schema.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM accept_requests), (SELECT count(DISTINCT delivery_id) FROM events)`).Scan(&requests, &deliveries); err != nil {
				t.Fatal(err)
			}
			if total.accepted != 1 || requests != 1 || deliveries != 2 {
				t.Fatalf("%+v: %d accepts, %d stored answers, %d deliveries; want 1, 1 and 2", total, total.accepted, requests, deliveries)
			}
			if total.replayed == 0 || time.Now().Before(boundary) {
				t.Fatalf("%+v: no repeat after the first use, or none past the boundary at %s", total, boundary)
			}
		})
	}
}

// TestPayloadsRoundTripAcrossPartitions: one notification id accepted twice (its tenant reused the
// request key after the first answer left), a second apart, with two payloads: each sits in the
// partition of its accept time, and Load and ExportLog give each delivery its own.
func TestPayloadsRoundTripAcrossPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	parts := narrowPartitions(t, b, time.Second, 10*time.Second,
		postgres.PartitionedTable{Name: "notification_payloads", Key: postgres.KeyTime})["notification_payloads"]
	boundary := parts[len(parts)-3].To
	times := []time.Time{boundary.Add(-time.Millisecond), boundary}
	recs := make([]commands.AcceptRecord, len(times))
	for i, at := range times {
		recs[i] = fanOut(t, "n-twice", fmt.Sprintf("k-%d", i), fmt.Sprintf(`{"use": %d}`, i), at)
		if _, _, err := b.store.RecordAccept(ctx, recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := b.schema.Pool.Query(ctx, `SELECT tableoid::regclass::text FROM notification_payloads ORDER BY accepted_at`)
	if err != nil {
		t.Fatal(err)
	}
	in, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 2 || in[0] != partitionOf(t, parts, times[0]).Name || in[1] != partitionOf(t, parts, times[1]).Name {
		t.Fatalf("payloads sit in %v, want one in each of the partitions of %v", in, times)
	}
	payloadOf := func(data json.RawMessage) string {
		t.Helper()
		var a struct {
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(data, &a); err != nil {
			t.Fatal(err)
		}
		return string(a.Payload)
	}
	want := map[string]string{}
	for i, rec := range recs {
		for _, e := range rec.Events {
			want[e.DeliveryID] = fmt.Sprintf(`{"use": %d}`, i)
			loaded, err := b.store.Load(ctx, e.DeliveryID)
			if err != nil {
				t.Fatal(err)
			}
			if got := payloadOf(loaded[0].Data); !sameJSON([]byte(got), []byte(want[e.DeliveryID])) {
				t.Fatalf("Load of %s: payload %s, want %s", e.DeliveryID, got, want[e.DeliveryID])
			}
		}
	}
	exported := 0
	if err := b.store.ExportLog(ctx, postgres.LogRange{}, func(e projections.LoggedEvent) error {
		if e.Type == domain.EventAccepted {
			exported++
			if got := payloadOf(e.Data); !sameJSON([]byte(got), []byte(want[e.DeliveryID])) {
				return fmt.Errorf("export of %s: payload %s, want %s", e.DeliveryID, got, want[e.DeliveryID])
			}
		}
		return nil
	}); err != nil || exported != 4 {
		t.Fatalf("export: %d accepted events, %v", exported, err)
	}
}

// sameJSON reports whether a and b are the same JSON value (jsonb spells it its own way).
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// TestPartitioningKeepsTheRows: migration 0019 converts tables that hold rows: the events, the
// payloads (given the accept time their events name) and the stored answers land in the first
// partitions, the log's positions go on from the sequence's value, and going down and up again
// keeps them all.
func TestPartitioningKeepsTheRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := postgres.Migrate(ctx, b.schema.Pool, 18, nil); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute)
	rec := fanOut(t, "n-kept", "k-kept", `{"kept": true}`, at)
	// As 0018's store wrote them: the payload apart, keyed by the notification alone.
	if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO notification_payloads (notification_id, tenant, sha256, payload)
		VALUES ('n-kept', 'acme', '\x00', '{"kept": true}')`); err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.Events {
		data := strings.Replace(string(e.Data), `"payload":{"kept":true}`, `"payload_sha256":"00"`, 1)
		if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, e.DeliveryID, e.Tenant, e.Version, string(e.Type), e.Key, data, e.RecordedAt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO accept_requests (tenant, request_key, request_hash, response, created_at)
		VALUES ('acme', 'k-kept', 'h', '{}', $1)`, at); err != nil {
		t.Fatal(err)
	}
	var last int64
	if err := b.schema.Pool.QueryRow(ctx, `SELECT max(position) FROM events`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for _, e := range rec.Events {
			loaded, err := b.store.Load(ctx, e.DeliveryID)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if !strings.Contains(string(loaded[0].Data), `"payload":{"kept":true}`) {
				t.Fatalf("%s: %s lost its payload: %s", when, e.DeliveryID, loaded[0].Data)
			}
		}
		if resp, err := b.store.RequestLookup(ctx, "acme", "k-kept"); err != nil || string(resp) != `{}` {
			t.Fatalf("%s: stored answer %s, %v", when, resp, err)
		}
	}
	for range 2 { // up, and down and up again
		if _, err := postgres.Migrate(ctx, b.schema.Pool, -1, nil); err != nil {
			t.Fatal(err)
		}
		check("after 0019")
		var where []string
		rows, err := b.schema.Pool.Query(ctx, `SELECT DISTINCT tableoid::regclass::text FROM events
			UNION ALL SELECT DISTINCT tableoid::regclass::text FROM notification_payloads
			UNION ALL SELECT DISTINCT tableoid::regclass::text FROM accept_requests ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		if where, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(where) != 3 || !strings.HasPrefix(where[0], "accept_requests_p0_") || !strings.HasPrefix(where[1], "events_p0_") ||
			!strings.HasPrefix(where[2], "notification_payloads_p0_") {
			t.Fatalf("rows sit in %v, want the three first partitions", where)
		}
		_, events := acceptedEvents(t)
		if _, err := b.schema.Pool.Exec(ctx, `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
			VALUES ($1, 'acme', 1, 'delivery.accepted', $2, '{}', now()) RETURNING position`, deliveryIDAt(at), events[0].Key); err != nil {
			t.Fatal(err)
		}
		var next int64
		if err := b.schema.Pool.QueryRow(ctx, `SELECT max(position) FROM events`).Scan(&next); err != nil {
			t.Fatal(err)
		}
		if next <= last {
			t.Fatalf("a new event took position %d, not past %d", next, last)
		}
		last = next
		if _, err := postgres.Migrate(ctx, b.schema.Pool, 18, nil); err != nil {
			t.Fatal(err)
		}
		var kept, payloads, requests int
		if err := b.schema.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM events WHERE data->>'notification_id' = 'n-kept'),
			(SELECT count(*) FROM notification_payloads), (SELECT count(*) FROM accept_requests)`).Scan(&kept, &payloads, &requests); err != nil {
			t.Fatal(err)
		}
		if kept != 2 || payloads != 1 || requests != 1 {
			t.Fatalf("after 0019 down: %d events, %d payloads, %d answers; want 2, 1, 1", kept, payloads, requests)
		}
	}
}

// TestPartitionedReadsPlans: over 30 partitions or more, a stream load and a payload read each
// read one partition, and a follower's read of the log order is a Merge Append of one index scan
// per partition, in order, with no sort; the accept's check of a key probes each partition's key
// index (the price of a key no index holds unique).
func TestPartitionedReadsPlans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	parts := narrowPartitions(t, b, time.Second, 30*time.Second, eventsTable,
		postgres.PartitionedTable{Name: "notification_payloads", Key: postgres.KeyTime},
		postgres.PartitionedTable{Name: "accept_requests", Key: postgres.KeyTime})
	if n := len(parts["events"]); n < 30 {
		t.Fatalf("%d partitions of events, want 30 or more", n)
	}
	at := parts["events"][len(parts["events"])/2].From.Add(time.Millisecond)
	rec := fanOut(t, "n-plan", "k-plan", `{"n": 1}`, at)
	if _, _, err := b.store.RecordAccept(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := b.schema.Pool.Exec(ctx, `ANALYZE events, notification_payloads, accept_requests`); err != nil {
		t.Fatal(err)
	}
	scans := func(plan []string, table string) int {
		n := 0
		for _, line := range plan {
			if strings.Contains(line, " on "+table+"_p") && strings.Contains(line, "Scan") {
				n++
			}
		}
		return n
	}
	id := rec.Events[0].DeliveryID
	for name, c := range map[string]struct {
		query string
		args  []any
		table string
		want  int
	}{
		"eventsByDelivery":       {postgres.EventsQueries["eventsByDelivery"], []any{id}, "events", 1},
		"eventsByDeliveryOf":     {postgres.EventsByDeliveryOf, []any{id, "acme"}, "events", 2}, // the stream and its owner's entry
		"payloadsByNotification": {postgres.PartitionedQueries["payloadsByNotification"], []any{[]string{"n-plan"}, []time.Time{at.Truncate(time.Millisecond)}}, "notification_payloads", 1},
		"acceptRequestsAbsent": {postgres.PartitionedQueries["acceptRequestsAbsent"], []any{[]string{"acme"}, []string{"k-plan"},
			[]pgtype.Timestamptz{{InfinityModifier: pgtype.NegativeInfinity, Valid: true}}}, "accept_requests", len(parts["accept_requests"])},
	} {
		plan := explain(t, b.schema, c.query, c.args...)
		if got := scans(plan, c.table); got != c.want {
			t.Errorf("%s scans %d partitions of %s, want %d:\n%s", name, got, c.table, c.want, strings.Join(plan, "\n"))
		}
	}
	// Within an idempotency window, the key's check reads only the partitions the window
	// reaches (run-time pruning, for each key of the batch).
	since := parts["accept_requests"][len(parts["accept_requests"])-3].From
	rows, err := b.schema.Pool.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+postgres.PartitionedQueries["acceptRequestsAbsent"],
		[]string{"acme"}, []string{"k-plan"}, []time.Time{since})
	if err != nil {
		t.Fatal(err)
	}
	analyzed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	executed := 0
	for _, line := range analyzed {
		if strings.Contains(line, " on accept_requests_p") && strings.Contains(line, "Scan") && !strings.Contains(line, "never executed") {
			executed++
		}
	}
	if executed == 0 || executed > 3 {
		t.Errorf("the key's check within a window from %s ran %d partition scans of %d:\n%s", since, executed, len(parts["accept_requests"]), strings.Join(analyzed, "\n"))
	}
	plan := explain(t, b.schema, postgres.EventsQueries["eventsReadLog"], "0", int64(0), 100)
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "Merge Append") || strings.Contains(text, "Sort  (") || scans(plan, "events") != len(parts["events"]) {
		t.Errorf("the log order's read is not a Merge Append of a scan per partition:\n%s", text)
	}
}

// TestAnAcceptKeyOlderThanTheWindowIsANewRequest: with an idempotency window (retention.keep),
// a repeat within it replays the stored answer; after it, through the single path and through
// the batcher alike, the same key is a new request (its old answer still stored, not yet
// dropped), and the lookup answers the newest. A tenant without a window keeps its answers.
func TestAnAcceptKeyOlderThanTheWindowIsANewRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.store.IdempotencyWindow = func(tenant string) time.Duration {
		if tenant == "acme" {
			return 500 * time.Millisecond
		}
		return 0
	}
	batcher := postgres.NewAcceptBatcher(b.store, 1, 16)
	defer batcher.Close()
	for _, store := range []commands.AcceptStore{b.store, batcher} {
		key := fmt.Sprintf("window-%T", store)
		first := fanOut(t, "n-"+key, key, `{"n": 1}`, time.Now())
		if _, replayed, err := store.RecordAccept(ctx, first); err != nil || replayed {
			t.Fatalf("%T first use: replayed %v, %v", store, replayed, err)
		}
		if _, replayed, err := store.RecordAccept(ctx, fanOut(t, "n-"+key, key, `{"n": 1}`, time.Now())); err != nil || !replayed {
			t.Fatalf("%T repeat within the window: replayed %v, %v", store, replayed, err)
		}
		time.Sleep(600 * time.Millisecond)
		again := fanOut(t, "n-"+key, key, `{"n": 1}`, time.Now())
		again.Response = []byte(`{"again":true}`)
		if _, replayed, err := store.RecordAccept(ctx, again); err != nil || replayed {
			t.Fatalf("%T repeat after the window: replayed %v, %v", store, replayed, err)
		}
		got, err := b.store.RequestLookup(ctx, "acme", key)
		if err != nil || string(got) != `{"again":true}` {
			t.Fatalf("%T lookup after the window: %s, %v", store, got, err)
		}
	}
	var rows int
	if err := b.schema.Pool.QueryRow(ctx, `SELECT count(*) FROM accept_requests WHERE tenant = 'acme'`).Scan(&rows); err != nil || rows != 4 {
		t.Fatalf("stored answers: %d (%v), want both of each key", rows, err)
	}
	// Without a window (globex), a repeat however late replays.
	rec := fanOut(t, "n-globex", "window-globex", `{"n": 1}`, time.Now())
	rec.Tenant = "globex"
	for i := range rec.Events {
		rec.Events[i].Tenant = "globex"
	}
	if _, _, err := b.store.RecordAccept(ctx, rec); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	rec2 := fanOut(t, "n-globex", "window-globex", `{"n": 1}`, time.Now())
	rec2.Tenant = "globex"
	for i := range rec2.Events {
		rec2.Events[i].Tenant = "globex"
	}
	if _, replayed, err := b.store.RecordAccept(ctx, rec2); err != nil || !replayed {
		t.Fatalf("a repeat without a window: replayed %v, %v", replayed, err)
	}
}

package amqp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestRelayMovesEveryRowAcrossBrokerOutage relays 300 outbox rows to a queue through a TCP proxy
// that is cut in the middle of the flow (after the second batch was published, before its
// confirms were awaited) and restored 1.5 s later; rows are also written while the broker is
// unreachable. Every row must reach the queue at least once, OnConfirmed must run for every row,
// and the relay's offset must end at the last row. Duplicates are allowed (at-least-once).
func TestRelayMovesEveryRowAcrossBrokerOutage(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	queue := declareQueue(t)
	proxy := newBrokerProxy(t)

	confirmed := newIDCounter()
	cutAt := make(chan struct{})
	r := startRelay(t, schema, proxy.Rewrite(amqptest.URL()),
		func(_ context.Context, topic string, msg *message.Message) error {
			if topic != queue {
				t.Errorf("OnConfirmed for topic %q, want %q", topic, queue)
			}
			confirmed.add(msg.UUID)
			return nil
		},
		func(batch int) {
			// The second batch is published, its confirms are (partly) still on the way: cut.
			if batch == 2 {
				proxy.Cut()
				close(cutAt)
			}
		})

	// 240 rows before the outage: one append carries a delivery's events with its messages,
	// the others are outbox-only.
	var ids []string
	for i := range 4 {
		var events []domain.Event
		if i == 0 {
			events = acceptEvents(t)
		}
		ids = append(ids, appendOutbox(t, store, queue, events, 60, len(ids))...)
	}

	select {
	case <-cutAt:
	case <-time.After(10 * time.Second):
		t.Fatalf("the relay never reached its second batch (OnConfirmed ran for %d rows)", confirmed.distinct())
	}
	outageStart := time.Now()
	conn := amqptest.Dial(t) // direct, not through the proxy
	before := amqptest.QueueDepth(t, conn, queue)
	if before == 0 || before >= len(ids) {
		t.Fatalf("at the cut the queue held %d of %d messages: the cut is not in the middle of the flow", before, len(ids))
	}
	// 60 more rows while the broker is unreachable.
	for range 2 {
		ids = append(ids, appendOutbox(t, store, queue, nil, 30, len(ids))...)
	}
	time.Sleep(1500*time.Millisecond - time.Since(outageStart)) // the outage lasts 1.5 s
	proxy.Restore()
	t.Logf("proxy cut after the relay's second batch (%d messages in the queue) and restored after %v",
		before, time.Since(outageStart).Round(time.Millisecond))

	waitOffsetAtEnd(t, schema, r.group, 12*time.Second)
	r.stop()

	delivered := drainQueue(t, conn, queue)
	if missing := missingIDs(ids, delivered.counts()); len(missing) > 0 {
		t.Fatalf("%d of %d rows never reached the queue, e.g. %v", len(missing), len(ids), missing[:min(5, len(missing))])
	}
	if missing := missingIDs(ids, confirmed.counts()); len(missing) > 0 {
		t.Fatalf("OnConfirmed never ran for %d of %d rows, e.g. %v", len(missing), len(ids), missing[:min(5, len(missing))])
	}
	if extra := delivered.distinct() - len(ids); extra != 0 {
		t.Fatalf("the queue holds %d message ids that were never written", extra)
	}
	flushes, failed, firstErr := r.flushStats()
	if failed == 0 {
		t.Fatalf("no Flush failed across the outage (%d flushes): the cut did not reach the relay", flushes)
	}
	t.Logf("%d rows, %d messages delivered (%d duplicates), OnConfirmed ran %d times (%d repeats); "+
		"%d flushes, %d failed, first failure: %v",
		len(ids), delivered.total(), delivered.total()-len(ids), confirmed.total(), confirmed.total()-len(ids),
		flushes, failed, firstErr)
}

// TestRelayHoldsNoTransactionWhileTheBrokerIsDown: while the broker is unreachable the relay
// waits outside any transaction. A poll's transaction holds a transaction id, and while one is
// open no gap-safe reader of the cluster (the projector, every other relay) can read past it, so
// a broker outage must not freeze the status views. When the broker is back, every row moves.
func TestRelayHoldsNoTransactionWhileTheBrokerIsDown(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	queue := declareQueue(t)
	proxy := newBrokerProxy(t)
	proxy.Cut()

	// The relay's own connections carry a name, to find them in pg_stat_activity.
	app := "relay-test-" + uuid.Must(uuid.NewV7()).String()[:8]
	sep := "?"
	if strings.Contains(schema.URL, "?") {
		sep = "&"
	}
	pool, err := postgres.Connect(context.Background(), schema.URL+sep+"application_name="+app, "", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	r := startRelayOn(t, pool, proxy.Rewrite(amqptest.URL()), nil, nil)
	defer r.stop()
	// Let the relay make its first poll (which nothing gates) on the empty outbox.
	time.Sleep(500 * time.Millisecond)
	ids := appendOutbox(t, store, queue, nil, 20, 0)

	samples, held := 0, 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		err := schema.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND backend_xid IS NOT NULL`, app).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		samples++
		if n > 0 {
			held++
		}
	}
	if held > 0 {
		t.Fatalf("with the broker down, the relay held a transaction id in %d of %d samples", held, samples)
	}

	proxy.Restore()
	waitOffsetAtEnd(t, schema, r.group, 10*time.Second)
	r.stop()
	delivered := drainQueue(t, amqptest.Dial(t), queue)
	if missing := missingIDs(ids, delivered.counts()); len(missing) > 0 {
		t.Fatalf("%d of %d rows never reached the queue after the broker came back", len(missing), len(ids))
	}
}

// TestRelayDoesNotAckABatchWhoseConfirmFailed shows that when OnConfirmed fails (once, for one
// message in the middle of a batch), the relay does not move its offset past that batch: the
// whole batch is read and published again, so each of its messages arrives twice, while the
// batch acknowledged before it arrives once, and the offset still ends at the last row.
func TestRelayDoesNotAckABatchWhoseConfirmFailed(t *testing.T) {
	t.Parallel()
	schema := pgtest.New(t)
	store := postgres.NewEventStore(schema.Pool)
	queue := declareQueue(t)

	confirmed := newIDCounter()
	var (
		mu       sync.Mutex
		failID   string // set before the failing batch is written
		injected bool
	)
	r := startRelay(t, schema, amqptest.URL(),
		func(_ context.Context, _ string, msg *message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if msg.UUID == failID && !injected {
				injected = true
				return errors.New("injected failure")
			}
			confirmed.add(msg.UUID)
			return nil
		}, nil)

	// A first batch, acknowledged normally.
	first := appendOutbox(t, store, queue, nil, 20, 0)
	waitOffsetAtEnd(t, schema, r.group, 10*time.Second)

	// A second batch (one transaction, so one read) whose 11th message fails once after its confirm.
	second := make([]string, 30)
	for i := range second {
		second[i] = uuid.Must(uuid.NewV7()).String()
	}
	mu.Lock()
	failID = second[10]
	mu.Unlock()
	writeOutbox(t, store, queue, nil, second, len(first))
	waitOffsetAtEnd(t, schema, r.group, 10*time.Second)
	r.stop()

	mu.Lock()
	wasInjected := injected
	mu.Unlock()
	if !wasInjected {
		t.Fatal("OnConfirmed never saw the message meant to fail")
	}
	_, failed, firstErr := r.flushStats()
	if failed != 1 || !strings.Contains(fmt.Sprint(firstErr), failID) {
		t.Fatalf("%d failed flushes (first: %v), want exactly 1, naming %s", failed, firstErr, failID)
	}

	delivered := drainQueue(t, amqptest.Dial(t), queue).counts()
	for _, id := range first {
		if delivered[id] != 1 {
			t.Errorf("message %s of the acknowledged batch arrived %d times, want 1", id, delivered[id])
		}
	}
	for _, id := range second {
		if delivered[id] != 2 {
			t.Errorf("message %s of the failed batch arrived %d times, want 2 (published, then again)", id, delivered[id])
		}
	}
	if missing := missingIDs(append(first, second...), confirmed.counts()); len(missing) > 0 {
		t.Errorf("OnConfirmed never succeeded for %v", missing)
	}
	t.Logf("failed flush: %v; OnConfirmed succeeded %d times for %d rows", firstErr, confirmed.total(), len(first)+len(second))
}

// TestPublisherForgetsTheFailureOfAnAbandonedBatch: a batch whose first publish failed (the broker
// was unreachable) ends with nothing published and no Flush. Once the broker is back, the next
// batch must be judged on its own confirms: a failure kept from before would fail its Flush and
// make the relay publish every one of its messages twice.
func TestPublisherForgetsTheFailureOfAnAbandonedBatch(t *testing.T) {
	t.Parallel()
	queue := declareQueue(t)
	proxy := newBrokerProxy(t)
	_, wmLogger := relayLoggers()
	pub, err := amqp.NewPublisher(amqp.RelayConfig{URL: proxy.Rewrite(amqptest.URL()), OutboxTopic: "unused"}, wmLogger)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	proxy.Cut()
	if err := pub.Publish(queue, message.NewMessage(uuid.Must(uuid.NewV7()).String(), []byte(`{}`))); err == nil {
		t.Fatal("publish through a cut connection succeeded")
	}
	proxy.Restore()

	ids := []string{uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()}
	for i, id := range ids {
		if err := pub.Publish(queue, message.NewMessage(id, payloadOf(id, i))); err != nil {
			t.Fatalf("publish after the broker came back: %v", err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatalf("Flush of a batch whose every message was confirmed: %v", err)
	}
	if missing := missingIDs(ids, drainQueue(t, amqptest.Dial(t), queue).counts()); len(missing) > 0 {
		t.Fatalf("confirmed messages %v are not in the queue", missing)
	}
}

// relayUnderTest is a relay wired as cmd/ledger runRelayShard wires it, with its flushes counted.
type relayUnderTest struct {
	group string

	mu       sync.Mutex
	flushes  int
	failed   int
	firstErr error

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan error
	t        *testing.T
}

// startRelay runs a relay over schema's outbox to the broker at amqpURL, under its own consumer
// group. beforeFlush, if set, runs with the batch number (from 1) before each batch's Flush. The
// relay stops when the test ends, before its schema is dropped.
func startRelay(t *testing.T, schema *pgtest.Schema, amqpURL string, onConfirmed amqp.Confirmed, beforeFlush func(batch int)) *relayUnderTest {
	t.Helper()
	return startRelayOn(t, schema.Pool, amqpURL, onConfirmed, beforeFlush)
}

// startRelayOn is startRelay with the relay's database connections taken from pool.
func startRelayOn(t *testing.T, pool *pgxpool.Pool, amqpURL string, onConfirmed amqp.Confirmed, beforeFlush func(batch int)) *relayUnderTest {
	t.Helper()
	logger, wmLogger := relayLoggers()
	r := &relayUnderTest{group: "relay-test-" + uuid.Must(uuid.NewV7()).String()[:8], done: make(chan error, 1), t: t}
	cfg := amqp.RelayConfig{
		URL:            amqpURL,
		OutboxTopic:    postgres.OutboxTopicOf(0),
		OnConfirmed:    onConfirmed,
		ConfirmTimeout: 5 * time.Second,
	}
	pub, err := amqp.NewPublisher(cfg, wmLogger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	sub, err := postgres.NewOutboxSubscriber(ctx, pool, postgres.OutboxSubscriberConfig{
		ConsumerGroup: r.group,
		Logger:        logger,
		Ready:         pub.Ready,
		BeforeAck: func() error {
			r.mu.Lock()
			r.flushes++
			n := r.flushes
			r.mu.Unlock()
			if beforeFlush != nil {
				beforeFlush(n)
			}
			err := pub.Flush()
			if err != nil {
				r.mu.Lock()
				r.failed++
				if r.firstErr == nil {
					r.firstErr = err
				}
				r.mu.Unlock()
			}
			return err
		},
	}, wmLogger)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	relay, err := amqp.NewRelay(cfg, sub, pub, wmLogger)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() { r.done <- relay.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

// stop stops the relay and waits for it (idempotent).
func (r *relayUnderTest) stop() {
	r.stopOnce.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				r.t.Errorf("relay: %v", err)
			}
		case <-time.After(15 * time.Second):
			r.t.Errorf("relay did not stop within 15 s")
		}
	})
}

func (r *relayUnderTest) flushStats() (flushes, failed int, firstErr error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flushes, r.failed, r.firstErr
}

// relayLoggers are silent unless LEDGER_TEST_DEBUG is set: an outage makes the relay log an
// error per attempt.
func relayLoggers() (*slog.Logger, watermill.LoggerAdapter) {
	if os.Getenv("LEDGER_TEST_DEBUG") == "" {
		return slog.New(slog.DiscardHandler), watermill.NopLogger{}
	}
	l := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return l, watermill.NewSlogLogger(l)
}

// declareQueue declares a topology of one channel under the test's own prefix (removed when the
// test ends) and returns its normal-priority work queue.
func declareQueue(t *testing.T) string {
	t.Helper()
	topo := amqp.Topology{Prefix: amqptest.Prefix(), Channels: []string{"relay"}, Tiers: []time.Duration{time.Second}}
	amqptest.Declare(t, topo)
	return topo.Work("relay", domain.PriorityNormal)
}

// acceptEvents builds the opening events of a new delivery.
func acceptEvents(t *testing.T) []domain.Event {
	t.Helper()
	_, events, err := domain.Accept(domain.AcceptSpec{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: "acme", Channel: "webhook", Recipient: "https://example.com/hook",
		Payload: json.RawMessage(`{"a":1}`), Priority: domain.PriorityNormal, MaxAttempts: 3,
	}, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// appendOutbox writes n new outbox messages to queue (with events, in one transaction) and
// returns their ids; from numbers them for their payloads.
func appendOutbox(t *testing.T, store *postgres.EventStore, queue string, events []domain.Event, n, from int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	writeOutbox(t, store, queue, events, ids, from)
	return ids
}

func writeOutbox(t *testing.T, store *postgres.EventStore, queue string, events []domain.Event, ids []string, from int) {
	t.Helper()
	msgs := make([]commands.OutboxMessage, len(ids))
	for i, id := range ids {
		msgs[i] = commands.OutboxMessage{
			ID: id, Topic: queue, PartitionKey: id,
			Payload:  payloadOf(id, from+i),
			Metadata: map[string]string{"test_n": strconv.Itoa(from + i)},
		}
	}
	if err := store.Append(context.Background(), events, msgs); err != nil {
		t.Fatalf("append %d outbox messages: %v", len(msgs), err)
	}
}

func payloadOf(id string, n int) []byte { return fmt.Appendf(nil, `{"id":%q,"n":%d}`, id, n) }

// waitOffsetAtEnd waits until the relay's offset is the outbox's last row, in the relay's read
// order (transaction id, offset).
func waitOffsetAtEnd(t *testing.T, schema *pgtest.Schema, group string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		var lastOffset, ackedOffset int64
		var lastTx, ackedTx string
		err := schema.Pool.QueryRow(ctx, `SELECT "offset", transaction_id::text FROM watermill_ledger_outbox
			ORDER BY transaction_id DESC, "offset" DESC LIMIT 1`).Scan(&lastOffset, &lastTx)
		if err != nil {
			t.Fatalf("last outbox row: %v", err)
		}
		// The relay creates its offset row when it subscribes, which may not have happened yet.
		err = schema.Pool.QueryRow(ctx, `SELECT coalesce(offset_acked, 0), last_processed_transaction_id::text
			FROM watermill_offsets_ledger_outbox WHERE consumer_group = $1`, group).Scan(&ackedOffset, &ackedTx)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("relay offset of %s: %v", group, err)
		}
		if ackedOffset == lastOffset && ackedTx == lastTx {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the relay's offset is %d (tx %s), the last row is %d (tx %s)",
				timeout, ackedOffset, ackedTx, lastOffset, lastTx)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drainQueue takes every message out of queue (acking it), checking each body against the
// payload written for its id, and counts them by message id.
func drainQueue(t *testing.T, conn *amqp091.Connection, queue string) *idCounter {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	got := newIDCounter()
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return got
		}
		var body struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(d.Body, &body); err != nil || body.ID != d.MessageId {
			t.Fatalf("message %q carries body %s", d.MessageId, d.Body)
		}
		got.add(d.MessageId)
	}
}

// idCounter counts occurrences of ids, safely across goroutines.
type idCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func newIDCounter() *idCounter { return &idCounter{n: map[string]int{}} }

func (c *idCounter) add(id string) {
	c.mu.Lock()
	c.n[id]++
	c.mu.Unlock()
}

func (c *idCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *idCounter) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}

func (c *idCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

func missingIDs(ids []string, seen map[string]int) []string {
	var missing []string
	for _, id := range ids {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	return missing
}

// newBrokerProxy starts a cuttable proxy to the test broker; it stops with the test.
func newBrokerProxy(t *testing.T) *pgtest.Proxy {
	t.Helper()
	u, err := url.Parse(amqptest.URL())
	if err != nil {
		t.Fatal(err)
	}
	return pgtest.NewProxyTo(t, u.Host)
}

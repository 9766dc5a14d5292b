package amqp_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
)

// TestDeclareUsesQueueVersion2AndKeepsOlderQueues: a new topology's queues are classic queues
// of storage version 2. A work queue that an older ledger declared without a version does not
// make Declare fail on upgrade: it keeps its version and Declare names it.
func TestDeclareUsesQueueVersion2AndKeepsOlderQueues(t *testing.T) {
	t.Parallel()
	topo := amqp.Topology{Prefix: amqptest.Prefix(), Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	conn := amqptest.Dial(t)
	t.Cleanup(func() {
		c := amqptest.Dial(t)
		if err := topo.Delete(c); err != nil {
			t.Errorf("clean up topology: %v", err)
		}
	})

	// The work queue as the previous release declared it: no x-queue-version.
	older := topo.Work("webhook", "normal")
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(older, true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange":    topo.DeadLetterExchange(),
		"x-dead-letter-routing-key": topo.Dead("webhook"),
	}); err != nil {
		t.Fatal(err)
	}

	kept, err := topo.Declare(conn)
	if err != nil {
		t.Fatalf("declare over a queue of the previous release: %v", err)
	}
	if !slices.Equal(kept, []string{older}) {
		t.Fatalf("kept %v, want just %s", kept, older)
	}
	// Declaring again falls back for the older queue only: every other queue took version 2
	// (a declare with version 2 and the same arguments is accepted only by a version 2 queue).
	if kept, err := topo.Declare(conn); err != nil || !slices.Equal(kept, []string{older}) {
		t.Fatalf("second declare: kept %v, err %v; want just %s kept, no error", kept, err, older)
	}
	// And the older queue still is what it was: version 2 is refused for it.
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare(older, true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange":    topo.DeadLetterExchange(),
		"x-dead-letter-routing-key": topo.Dead("webhook"),
		"x-queue-version":           int32(2),
	})
	if err == nil || !strings.Contains(err.Error(), "x-queue-version") {
		t.Fatalf("redeclaring the older queue with version 2: %v, want a refusal naming x-queue-version", err)
	}
}

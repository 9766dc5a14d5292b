package amqp_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
)

// TestQuorumTopology: with QueueType quorum every queue is a quorum queue; a message that is
// given back more often than the delivery limit (a consumer that crashes on it every time) ends
// in the dead queue instead of looping; a delay tier's expired message returns to its work queue
// (at-least-once dead-lettering); and a classic queue of the same name is refused with an error
// that says how to move.
func TestQuorumTopology(t *testing.T) {
	t.Parallel()
	topo := amqp.Topology{Prefix: amqptest.Prefix(), Channels: []string{"webhook"}, Tiers: []time.Duration{200 * time.Millisecond},
		QueueType: amqp.QueueQuorum, DeliveryLimit: 3}
	amqptest.Declare(t, topo)
	conn := amqptest.Dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	// Every queue is a quorum queue, as the broker lists them.
	out, err := exec.Command("rabbitmqctl", "-q", "list_queues", "name", "type").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v", err)
	}
	types := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			types[f[0]] = f[1]
		}
	}
	for _, q := range topo.Queues() {
		if types[q] != "quorum" {
			t.Errorf("queue %s is %q, want quorum", q, types[q])
		}
	}

	publish := func(queue, body string, headers amqp091.Table) {
		t.Helper()
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
			amqp091.Publishing{Body: []byte(body), DeliveryMode: amqp091.Persistent, Headers: headers})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish to %s not confirmed: %v", queue, err)
		}
	}

	// A poison message: handed out, given back, again and again.
	work := topo.Work("webhook", "normal")
	publish(work, "poison", nil)
	given := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		d, ok, err := ch.Get(work, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			if given >= 3 {
				break // gone: dead-lettered
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		given++
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
		if given > 10 {
			t.Fatal("the message is still handed out after 10 deliveries: no delivery limit")
		}
	}
	if given < 3 {
		t.Fatalf("handed out %d times, want the limit's 3 at least", given)
	}
	dead, ok := amqptest.Get(t, conn, topo.Dead("webhook"), 5*time.Second)
	if !ok || string(dead.Body) != "poison" {
		t.Fatalf("the poison message is not in the dead queue after %d deliveries", given)
	}
	_ = dead.Ack(false)

	// A delay tier's message comes back to the work queue of its priority when it expires.
	publish(topo.Retry("webhook", 100*time.Millisecond), "later", amqp091.Table{"ledger_priority": "normal"})
	back, ok := amqptest.Get(t, conn, work, 10*time.Second)
	if !ok || string(back.Body) != "later" {
		t.Fatal("the delay tier's message did not return to the work queue")
	}
	_ = back.Ack(false)

	// Declaring it again is idempotent; quorum over classic queues is refused with the way out.
	if _, err := topo.Declare(amqptest.Dial(t)); err != nil {
		t.Fatalf("declaring the same quorum topology again: %v", err)
	}
	other := amqp.Topology{Prefix: amqptest.Prefix(), Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second}}
	amqptest.Declare(t, other) // classic
	other.QueueType = amqp.QueueQuorum
	if _, err := other.Declare(amqptest.Dial(t)); err == nil || !strings.Contains(err.Error(), "LEDGER_AMQP_PREFIX") {
		t.Fatalf("declaring quorum over classic queues: %v, want a refusal that names the way out", err)
	}
}

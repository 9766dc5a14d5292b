// Package amqptest gives each test its own RabbitMQ name prefix and removes the test's queues
// when it ends, so tests share one broker in parallel and leave nothing behind.
package amqptest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp"
)

// DefaultURL is the test broker; LEDGER_TEST_AMQP_URL overrides it.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// URL returns the test broker URL.
func URL() string {
	if u := os.Getenv("LEDGER_TEST_AMQP_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Prefix returns a name prefix no other test uses.
func Prefix() string { return "test-" + strings.ReplaceAll(uuid.NewString()[:13], "-", "") }

// Dial connects to the test broker and closes the connection when the test ends.
func Dial(t testing.TB) *amqp091.Connection {
	t.Helper()
	conn, err := amqp091.Dial(URL())
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Declare declares topo and deletes its queues and exchange when the test ends.
func Declare(t testing.TB, topo amqp.Topology) {
	t.Helper()
	conn := Dial(t)
	if _, err := topo.Declare(conn); err != nil {
		t.Fatalf("declare topology: %v", err)
	}
	t.Cleanup(func() {
		c, err := amqp091.Dial(URL())
		if err != nil {
			t.Errorf("clean up topology: %v", err)
			return
		}
		defer c.Close()
		if err := topo.Delete(c); err != nil {
			t.Errorf("clean up topology: %v", err)
		}
	})
}

// QueueDepth returns the number of ready messages in a queue.
func QueueDepth(t testing.TB, conn *amqp091.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}

// Get takes one message from a queue (acking it), waiting up to timeout.
func Get(t testing.TB, conn *amqp091.Connection, queue string, timeout time.Duration) (amqp091.Delivery, bool) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	deadline := time.Now().Add(timeout)
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if ok || time.Now().After(deadline) {
			return d, ok
		}
		time.Sleep(10 * time.Millisecond)
	}
}

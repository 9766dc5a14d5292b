package amqp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
)

// TestDeclareRefusalNamesTheWayOut: a queue cannot change its type or arguments in place, in
// either direction; the refusal names the queue and the procedure, classic over quorum as
// quorum over classic (TestQuorumTopology), and for another delivery limit.
func TestDeclareRefusalNamesTheWayOut(t *testing.T) {
	t.Parallel()
	quorum := amqp.Topology{Prefix: amqptest.Prefix(), Channels: []string{"webhook"}, Tiers: []time.Duration{time.Second},
		QueueType: amqp.QueueQuorum, DeliveryLimit: 3}
	amqptest.Declare(t, quorum)

	classic := quorum
	classic.QueueType, classic.DeliveryLimit = amqp.QueueClassic, 0
	_, err := classic.Declare(amqptest.Dial(t))
	if err == nil || !strings.Contains(err.Error(), quorum.Work("webhook", "high")) ||
		!strings.Contains(err.Error(), "LEDGER_AMQP_PREFIX") || !strings.Contains(err.Error(), "Changing the type of existing queues") {
		t.Fatalf("declaring classic over quorum queues: %v, want a refusal that names the queue and the way out", err)
	}

	limit := quorum
	limit.DeliveryLimit = 5
	_, err = limit.Declare(amqptest.Dial(t))
	if err == nil || !strings.Contains(err.Error(), "LEDGER_AMQP_DELIVERY_LIMIT=5") || !strings.Contains(err.Error(), "LEDGER_AMQP_PREFIX") {
		t.Fatalf("declaring another delivery limit: %v, want a refusal that names the setting and the way out", err)
	}
}

// TestDeclareRefusalOfAValueNamesIt: a delay tier whose TTL RabbitMQ takes for no queue
// (value_too_large) is refused as such, not with the advice of a queue that exists with other
// arguments (a new LEDGER_AMQP_PREFIX would be refused the same way).
func TestDeclareRefusalOfAValueNamesIt(t *testing.T) {
	t.Parallel()
	topo := amqp.Topology{Prefix: amqptest.Prefix(), Channels: []string{"webhook"}, Tiers: []time.Duration{(1 << 40) * time.Millisecond}}
	conn := amqptest.Dial(t)
	t.Cleanup(func() {
		if err := topo.Delete(amqptest.Dial(t)); err != nil {
			t.Errorf("clean up topology: %v", err)
		}
	})
	_, err := topo.Declare(conn)
	if err == nil || !strings.Contains(err.Error(), "value_too_large") || strings.Contains(err.Error(), "LEDGER_AMQP_PREFIX") ||
		!strings.Contains(err.Error(), "a delay tier's TTL is at most 2^32-1 ms") {
		t.Fatalf("declaring a tier of 2^40 ms: %v, want the value named, without the advice of a new prefix", err)
	}
}

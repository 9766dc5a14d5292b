package app

import (
	"errors"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
)

// assertQueueType checks, on the broker and over AMQP, that the ledger of b declared its queues
// as the type the suite runs on (testQueueType): a run of the suite on quorum queues that got
// classic ones would otherwise pass unnoticed. RabbitMQ refuses to redeclare a queue with any
// argument that differs (PRECONDITION_FAILED, "inequivalent arg"), so a redeclare with the
// arguments written out here succeeds only if the queue has them; on quorum that includes the
// at-least-once dead-letter strategy, and a redeclare with the default at-most-once must fail.
func assertQueueType(t *testing.T, b *e2eBundle) {
	t.Helper()
	topo := b.app.topology
	conn := amqptest.Dial(t)
	redeclare := func(name string, args amqp091.Table) error {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		_, err = ch.QueueDeclare(name, true, false, false, false, args)
		return err
	}
	quorum := testQueueType() == amqp.QueueQuorum
	expected := func(args amqp091.Table) amqp091.Table {
		if !quorum {
			args["x-queue-version"] = int32(amqp.QueueVersion)
			return args
		}
		args["x-queue-type"] = amqp.QueueQuorum
		if _, dlx := args["x-dead-letter-exchange"]; dlx {
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
		return args
	}
	limit := b.cfg.AMQPDeliveryLim
	if limit == 0 {
		limit = amqp.DefaultDeliveryLimit
	}
	channel := topo.Channels[0]
	work := topo.Work(channel, "normal")
	workArgs := func() amqp091.Table {
		args := amqp091.Table{"x-dead-letter-exchange": topo.DeadLetterExchange(), "x-dead-letter-routing-key": topo.Dead(channel)}
		if quorum {
			args["x-delivery-limit"] = int32(limit)
		}
		return expected(args)
	}
	if err := redeclare(work, workArgs()); err != nil {
		t.Fatalf("work queue %s is not a %s queue with the ledger's arguments: %v", work, testQueueType(), err)
	}
	if err := redeclare(topo.Dead(channel), expected(amqp091.Table{})); err != nil {
		t.Fatalf("dead queue %s is not a %s queue: %v", topo.Dead(channel), testQueueType(), err)
	}
	if tiers := topo.TiersOf(channel); len(tiers) > 0 {
		tier := topo.Retry(channel, tiers[0])
		args := expected(amqp091.Table{"x-message-ttl": tiers[0].Milliseconds(), "x-dead-letter-exchange": topo.ReturnExchange(channel)})
		if err := redeclare(tier, args); err != nil {
			t.Fatalf("delay tier %s is not a %s queue with the ledger's arguments: %v", tier, testQueueType(), err)
		}
	}
	if !quorum {
		return
	}
	// The broker compares the strategy too: at-most-once (its default) is refused.
	args := workArgs()
	args["x-dead-letter-strategy"] = "at-most-once"
	var amqpErr *amqp091.Error
	if err := redeclare(work, args); !errors.As(err, &amqpErr) || !strings.Contains(amqpErr.Reason, "x-dead-letter-strategy") {
		t.Fatalf("redeclaring %s with at-most-once dead-lettering: %v, want it refused for x-dead-letter-strategy", work, err)
	}
}

// Package amqp is the ledger's RabbitMQ adapter: the queue topology, the relay that moves outbox
// rows to the broker with publisher confirms, and the consumer that feeds workers.
package amqp

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// Topology names and declares every exchange and queue. All names start with Prefix, so tests,
// benchmarks and several deployments can share one broker.
//
// Per channel:
//
//	<prefix>.<channel>              work queue of normal priority
//	<prefix>.<channel>.high         work queue of high priority
//	<prefix>.<channel>.low          work queue of low priority
//	<prefix>.<channel>.retry.<tier> delay tier: queue TTL = tier, then dead-letters to the return exchange
//	<prefix>.<channel>.defer.<wait> short wait of a deferral (DeferWaits), likewise
//	<prefix>.<channel>.return       headers exchange: routes an expired delay message back to the
//	                                work queue of its priority (header ledger_priority)
//	<prefix>.<channel>.dead         dead queue, bound to <prefix>.dlx
//
// Work queues dead-letter (Nack without requeue) into <prefix>.dlx, which routes to the channel's
// dead queue. One set of tiers serves all priorities: the return exchange restores the class.
type Topology struct {
	Prefix   string
	Channels []string
	// Tiers are the delay queues' TTLs, ascending (see domain.RetryPolicy.Tiers), of every
	// channel without its own in ChannelTiers.
	Tiers []time.Duration
	// ChannelTiers holds the tiers of channels with a retry policy of their own.
	ChannelTiers map[string][]time.Duration
	// QueueType is QueueClassic (also "") or QueueQuorum: the type of every queue declared.
	QueueType string
	// DeliveryLimit is how many times a quorum work queue hands a message out before it
	// dead-letters it (x-delivery-limit): a message that crashes every consumer ends in the
	// dead queue instead of looping. Zero means DefaultDeliveryLimit. Classic queues have none.
	DeliveryLimit int
}

// Queue types.
const (
	QueueClassic = "classic"
	QueueQuorum  = "quorum"
)

// DefaultDeliveryLimit is the delivery limit of quorum work queues. A worker gives a message
// back (requeue) only when it cannot record anything (the database is down) or a limit is busy,
// and a crash gives back what it held: 20 redeliveries is far beyond either, and a message that
// reaches it has crashed its consumers again and again.
const DefaultDeliveryLimit = 20

// TiersOf returns a channel's delay tiers.
func (t Topology) TiersOf(channel string) []time.Duration {
	if tiers, ok := t.ChannelTiers[channel]; ok {
		return tiers
	}
	return t.Tiers
}

var _ commands.Topics = Topology{}

// Validate reports every problem of the topology at once.
func (t Topology) Validate() error {
	var errs []error
	if t.Prefix == "" {
		errs = append(errs, errors.New("amqp prefix is empty"))
	}
	if len(t.Channels) == 0 {
		errs = append(errs, errors.New("no channels"))
	}
	switch t.QueueType {
	case "", QueueClassic, QueueQuorum:
	default:
		errs = append(errs, fmt.Errorf("queue type %q: want classic or quorum", t.QueueType))
	}
	if t.DeliveryLimit < 0 {
		errs = append(errs, fmt.Errorf("delivery limit %d is below 0", t.DeliveryLimit))
	}
	for _, ch := range t.Channels {
		tiers := t.TiersOf(ch)
		if len(tiers) == 0 {
			errs = append(errs, fmt.Errorf("channel %s: no delay tiers", ch))
		}
		if !sort.SliceIsSorted(tiers, func(i, j int) bool { return tiers[i] < tiers[j] }) {
			errs = append(errs, fmt.Errorf("channel %s: delay tiers are not ascending", ch))
		}
	}
	return errors.Join(errs...)
}

// DeadLetterExchange is the exchange work queues dead-letter into.
func (t Topology) DeadLetterExchange() string { return t.Prefix + ".dlx" }

// Work is the work queue of a channel's priority class.
func (t Topology) Work(channel string, p domain.Priority) string {
	switch p {
	case domain.PriorityHigh, domain.PriorityLow:
		return t.Prefix + "." + channel + "." + string(p)
	}
	return t.Prefix + "." + channel
}

// Priorities are the classes, each with its own work queue.
var Priorities = []domain.Priority{domain.PriorityHigh, domain.PriorityNormal, domain.PriorityLow}

// ReturnExchange routes expired delay messages back to their work queue.
func (t Topology) ReturnExchange(channel string) string { return t.Prefix + "." + channel + ".return" }

// Dead is the dead queue of a channel.
func (t Topology) Dead(channel string) string { return t.Prefix + "." + channel + ".dead" }

// DeferWaits are the waits of deferred messages (a limit held them back): short, because a slot
// frees when a call ends and a token bucket refills in a fraction of a second, and separate from
// the retry tiers, whose shortest is the retry policy's base (30 s by default).
var DeferWaits = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}

// Hop is the delay queue a message due in delay takes next: the longest of the channel's retry
// tiers and DeferWaits not longer than delay, or the shortest wait. Rounding down, never up, is
// what keeps a due time true: a message comes back no later than it is due, and the rest of
// its wait is a shorter hop, down to the shortest wait. A wait of hours takes a few hops of the
// longest tier, then fewer than one per shorter queue.
func (t Topology) Hop(channel string, delay time.Duration) (string, time.Duration) {
	topic, holds := t.deferQueue(channel, DeferWaits[0]), DeferWaits[0]
	for _, w := range DeferWaits {
		if w <= delay && w > holds {
			topic, holds = t.deferQueue(channel, w), w
		}
	}
	for _, tier := range t.TiersOf(channel) {
		if tier <= delay && tier > holds {
			topic, holds = t.retryQueue(channel, tier), tier
		}
	}
	return topic, holds
}

func (t Topology) deferQueue(channel string, wait time.Duration) string {
	return t.Prefix + "." + channel + ".defer." + FormatTier(wait)
}

// Tier returns the smallest of a channel's tiers that is at least delay (or the largest tier).
func (t Topology) Tier(channel string, delay time.Duration) time.Duration {
	tiers := t.TiersOf(channel)
	for _, tier := range tiers {
		if tier >= delay {
			return tier
		}
	}
	return tiers[len(tiers)-1]
}

// Retry is the delay queue that holds a message for delay, rounded up to a tier, so a long delay
// never holds back a short one (RabbitMQ expires messages only at a queue's head).
func (t Topology) Retry(channel string, delay time.Duration) string {
	return t.retryQueue(channel, t.Tier(channel, delay))
}

func (t Topology) retryQueue(channel string, tier time.Duration) string {
	return t.Prefix + "." + channel + ".retry." + FormatTier(tier)
}

// FormatTier renders a tier compactly for queue names: 200ms, 30s, 2m, 1h30m.
func FormatTier(d time.Duration) string {
	if d < time.Second || d%time.Second != 0 {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	var b strings.Builder
	h, m, s := int(d/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second)
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if s > 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}

// Queues lists every queue the topology declares.
func (t Topology) Queues() []string {
	var qs []string
	for _, ch := range t.Channels {
		for _, p := range Priorities {
			qs = append(qs, t.Work(ch, p))
		}
		qs = append(qs, t.Dead(ch))
		for _, tier := range t.TiersOf(ch) {
			qs = append(qs, t.retryQueue(ch, tier))
		}
		for _, w := range DeferWaits {
			qs = append(qs, t.deferQueue(ch, w))
		}
	}
	return qs
}

// QueueVersion is the classic queue storage version the topology declares (x-queue-version):
// version 2 keeps persistent messages with less work per message than version 1, RabbitMQ 3.10's
// default (docs/benchmarks.md, "Figures once kept in code comments").
const QueueVersion = 2

// Declare declares the whole topology, idempotently. Redeclaring a queue with other arguments
// fails (PRECONDITION_FAILED): changing an argument needs a new queue name. The one exception is
// the storage version: a queue that an older ledger declared without it keeps the version it has
// (it works the same, only slower), and Declare returns its name in kept so that the caller can
// say how to move it to version 2 (a policy with queue-version 2, or a new queue).
func (t Topology) Declare(conn *amqp091.Connection) (kept []string, err error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("declare topology: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.ExchangeDeclare(t.DeadLetterExchange(), "direct", true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("declare %s: %w", t.DeadLetterExchange(), err)
	}
	quorum := t.QueueType == QueueQuorum
	declare := func(name string, args amqp091.Table) error {
		if quorum {
			return t.declareQuorum(ch, name, args)
		}
		versioned := amqp091.Table{"x-queue-version": int32(QueueVersion)}
		for k, v := range args {
			versioned[k] = v
		}
		_, err := ch.QueueDeclare(name, true, false, false, false, versioned)
		var amqpErr *amqp091.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.PreconditionFailed &&
			strings.Contains(amqpErr.Reason, "x-queue-version") {
			// The failed declare closed the channel: open another and take the queue as it is.
			if ch, err = conn.Channel(); err != nil {
				return fmt.Errorf("declare topology: open channel: %w", err)
			}
			if _, err = ch.QueueDeclare(name, true, false, false, false, args); err == nil {
				kept = append(kept, name)
			}
		}
		if err != nil {
			return t.refused(name, err)
		}
		return nil
	}
	for _, channel := range t.Channels {
		ret := t.ReturnExchange(channel)
		if err := ch.ExchangeDeclare(ret, "headers", true, false, false, false, nil); err != nil {
			return kept, fmt.Errorf("declare %s: %w", ret, err)
		}
		for _, p := range Priorities {
			work := t.Work(channel, p)
			args := amqp091.Table{
				"x-dead-letter-exchange":    t.DeadLetterExchange(),
				"x-dead-letter-routing-key": t.Dead(channel),
			}
			if quorum {
				args["x-delivery-limit"] = int32(t.deliveryLimit())
			}
			if err := declare(work, args); err != nil {
				return kept, err
			}
			match := amqp091.Table{"x-match": "all", commands.MetaPriority: string(p)}
			if err := ch.QueueBind(work, "", ret, false, match); err != nil {
				return kept, fmt.Errorf("bind %s to %s: %w", work, ret, err)
			}
		}
		if err := declare(t.Dead(channel), nil); err != nil {
			return kept, err
		}
		if err := ch.QueueBind(t.Dead(channel), t.Dead(channel), t.DeadLetterExchange(), false, nil); err != nil {
			return kept, fmt.Errorf("bind %s: %w", t.Dead(channel), err)
		}
		for _, tier := range t.TiersOf(channel) {
			if err := declare(t.retryQueue(channel, tier), amqp091.Table{
				"x-message-ttl":          tier.Milliseconds(),
				"x-dead-letter-exchange": ret,
			}); err != nil {
				return kept, err
			}
		}
		for _, w := range DeferWaits {
			if err := declare(t.deferQueue(channel, w), amqp091.Table{
				"x-message-ttl":          w.Milliseconds(),
				"x-dead-letter-exchange": ret,
			}); err != nil {
				return kept, err
			}
		}
	}
	return kept, nil
}

// declareQuorum declares a quorum queue. Dead-lettering (from a work queue to the dead queue,
// and from a delay tier back to the work queue when its TTL expires) is at-least-once: the
// message leaves the source queue only once the target queue has confirmed it, where RabbitMQ's
// default (at-most-once) drops a message that the target could not take. That strategy needs
// x-overflow=reject-publish, which only matters with a length limit, and the ledger sets none. A
// queue that exists with another type cannot change it (PRECONDITION_FAILED): see refused.
func (t Topology) declareQuorum(ch *amqp091.Channel, name string, args amqp091.Table) error {
	q := amqp091.Table{"x-queue-type": QueueQuorum}
	for k, v := range args {
		q[k] = v
	}
	if _, dlx := args["x-dead-letter-exchange"]; dlx {
		q["x-dead-letter-strategy"] = "at-least-once"
		q["x-overflow"] = "reject-publish"
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, q); err != nil {
		return t.refused(name, err)
	}
	return nil
}

// refused explains a failed declare of queue name. RabbitMQ refuses to declare a queue that
// exists with other arguments (PRECONDITION_FAILED, "inequivalent arg"), and cannot change a
// queue's type or arguments in place, whichever way: quorum over classic, classic over quorum,
// or another delivery limit. The error names the queue and the way out, in either direction.
func (t Topology) refused(name string, err error) error {
	var amqpErr *amqp091.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp091.PreconditionFailed {
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	if strings.Contains(amqpErr.Reason, "invalid arg") {
		// A value the broker takes for no queue (a TTL beyond its longest): a new prefix would
		// be refused the same way.
		return fmt.Errorf("declare queue %s: %w (RabbitMQ takes no queue with this argument's value: a delay tier's TTL "+
			"is at most 2^32-1 ms, about 49.7 days; see docs/configuration.md, \"A channel's retry\")", name, err)
	}
	queueType := t.QueueType
	if queueType == "" {
		queueType = QueueClassic
	}
	const procedure = `use a new LEDGER_AMQP_PREFIX, or drain and delete the old queues; see docs/operations.md, "Changing the type of existing queues"`
	if t.QueueType == QueueQuorum && strings.Contains(amqpErr.Reason, "x-delivery-limit") {
		return fmt.Errorf("declare quorum queue %s: %w (the queue exists with another delivery limit than LEDGER_AMQP_DELIVERY_LIMIT=%d "+
			"and cannot change it: set the limit it has, or %s)", name, err, t.deliveryLimit(), procedure)
	}
	return fmt.Errorf("declare %s queue %s: %w (the queue exists with another type or other arguments, "+
		"which RabbitMQ cannot change in place (LEDGER_AMQP_QUEUE_TYPE=%s): %s)", queueType, name, err, queueType, procedure)
}

// deliveryLimit is the quorum work queues' delivery limit.
func (t Topology) deliveryLimit() int {
	if t.DeliveryLimit == 0 {
		return DefaultDeliveryLimit
	}
	return t.DeliveryLimit
}

// Delete removes every queue and the exchange of the topology (tests and benchmarks clean up
// with it).
func (t Topology) Delete(conn *amqp091.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	var errs []error
	for _, q := range t.Queues() {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	exchanges := []string{t.DeadLetterExchange()}
	for _, c := range t.Channels {
		exchanges = append(exchanges, t.ReturnExchange(c))
	}
	for _, x := range exchanges {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

package amqp

import (
	"fmt"
	"strconv"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// Marshaler replaces watermill-amqp's DefaultMarshaler on both sides. Publishing, it adds what
// the default never sets: the persistent delivery mode (kept), a content type and the message id.
// Consuming, it tolerates headers that are not strings: RabbitMQ adds x-death (an array of
// tables) to every dead-lettered or TTL-expired message, and the default marshaler refuses such a
// message forever. x-death is summarised as MetaDeathCount; other non-string headers are
// rendered with fmt.
type Marshaler struct {
	wamqp.DefaultMarshaler
}

var _ wamqp.Marshaler = Marshaler{}

// MetaDeathCount is the metadata key holding how many times the message was dead-lettered
// (including delay-tier expiries).
const MetaDeathCount = "x-death-count"

// Marshal builds a persistent publishing.
func (m Marshaler) Marshal(msg *message.Message) (amqp091.Publishing, error) {
	p, err := m.DefaultMarshaler.Marshal(msg)
	if err != nil {
		return p, err
	}
	p.ContentType = "application/json"
	p.MessageId = msg.UUID
	switch domain.Priority(msg.Metadata.Get(commands.MetaPriority)) {
	case domain.PriorityHigh:
		p.Priority = 2
	case domain.PriorityNormal:
		p.Priority = 1
	}
	return p, nil
}

// Unmarshal turns a delivery into a watermill message, whatever its header types.
func (m Marshaler) Unmarshal(d amqp091.Delivery) (*message.Message, error) {
	id := d.MessageId
	if v, ok := d.Headers[wamqp.DefaultMessageUUIDHeaderKey].(string); ok {
		id = v
	}
	msg := message.NewMessage(id, d.Body)
	for k, v := range d.Headers {
		switch {
		case k == wamqp.DefaultMessageUUIDHeaderKey:
		case k == "x-death":
			msg.Metadata.Set(MetaDeathCount, strconv.FormatInt(deathCount(v), 10))
		default:
			if s, ok := v.(string); ok {
				msg.Metadata.Set(k, s)
			} else {
				msg.Metadata.Set(k, fmt.Sprint(v))
			}
		}
	}
	return msg, nil
}

// deathCount sums the counts of an x-death header.
func deathCount(v any) int64 {
	deaths, ok := v.([]any)
	if !ok {
		return 0
	}
	var n int64
	for _, d := range deaths {
		if t, ok := d.(amqp091.Table); ok {
			if c, ok := t["count"].(int64); ok {
				n += c
			}
		}
	}
	return n
}

package amqp

import (
	"context"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// WorkQueues lists the topology's work queues: what the workers take their attempts from.
func (t Topology) WorkQueues() []string {
	var qs []string
	for _, ch := range t.Channels {
		for _, p := range Priorities {
			qs = append(qs, t.Work(ch, p))
		}
	}
	return qs
}

// WatchWaiting reports every interval how many messages wait in queues, ready and not yet taken
// by a consumer (a passive declare's count), over one connection it keeps open, until ctx ends.
// While the broker cannot be asked it reports ok false and dials again at the next interval.
func WatchWaiting(ctx context.Context, url string, queues []string, interval time.Duration, report func(n int, ok bool)) {
	var conn *amqp091.Connection
	var ch *amqp091.Channel
	drop := func() {
		if conn != nil {
			_ = conn.Close()
		}
		conn, ch = nil, nil
	}
	defer drop()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		n, ok := 0, true
		if ch == nil {
			c, err := Dial(url)
			if err == nil {
				conn = c
				ch, err = conn.Channel()
			}
			if err != nil {
				drop()
				ok = false
			}
		}
		for _, q := range queues {
			if !ok {
				break
			}
			info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			if err != nil {
				drop() // a failed passive declare closes the channel
				ok = false
				break
			}
			n += info.Messages
		}
		report(n, ok)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

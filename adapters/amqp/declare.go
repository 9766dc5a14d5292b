package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// DeclareTopology connects to the broker at url and declares t (see Topology.Declare). Queues an
// older ledger declared without a storage version are named in a warning, with how to move them.
func DeclareTopology(url string, t Topology, logger *slog.Logger) error {
	conn, err := Dial(url)
	if err != nil {
		return fmt.Errorf("reach RabbitMQ at %s: %w", RedactURL(url), err)
	}
	defer conn.Close()
	kept, err := t.Declare(conn)
	if len(kept) > 0 {
		logger.Warn("queues declared by an older ledger keep their classic queue version 1, which costs the broker more per message; "+
			"move them to version 2 with a policy (rabbitmqctl set_policy ... '{\"queue-version\":2}' --apply-to queues)",
			"queues", kept)
	}
	return err
}

// Pauses between attempts to declare the topology while the broker is unreachable.
const (
	declareRetryFirst = 500 * time.Millisecond
	declareRetryMax   = 5 * time.Second
)

// DeclareWhenReachable declares t, waiting with growing pauses while the broker cannot be
// reached, until it succeeds, ctx ends, or the broker refuses for a reason waiting cannot mend
// (credentials, a queue declared with other arguments). A broker restarting as the ledger starts
// then costs a pause, not a crash loop.
func DeclareWhenReachable(ctx context.Context, url string, t Topology, logger *slog.Logger) error {
	err := DeclareTopology(url, t, logger)
	start, logged := time.Now(), time.Time{}
	for pause := declareRetryFirst; err != nil; pause = min(pause*2, declareRetryMax) {
		if !Unreachable(err) {
			return err
		}
		if time.Since(logged) >= 30*time.Second {
			logger.Warn("broker unreachable: the relay and workers wait for it before they start",
				"err", err, "waited", time.Since(start).Round(time.Second))
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(pause):
		}
		if err = DeclareTopology(url, t, logger); err == nil {
			logger.Info("broker reachable; topology declared", "waited", time.Since(start).Round(time.Second))
		}
	}
	return nil
}

// Unreachable tells a broker that cannot be reached (down, restarting, the connection dropped)
// from one that answered and refused.
func Unreachable(err error) bool {
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) {
		return amqpErr.Code != amqp091.AccessRefused && amqpErr.Code != amqp091.PreconditionFailed &&
			amqpErr.Code != amqp091.NotAllowed && amqpErr.Code != amqp091.NotFound
	}
	return !errors.Is(err, amqp091.ErrCredentials) && !errors.Is(err, amqp091.ErrSASL) && !errors.Is(err, amqp091.ErrVhost)
}

// QueueDepths returns the ready messages of each queue, read with passive declares over one
// connection. A queue that cannot be inspected (it does not exist) is left out.
func QueueDepths(url string, queues []string) (map[string]int, error) {
	conn, err := Dial(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	depths := make(map[string]int, len(queues))
	for _, q := range queues {
		// A failed passive declare closes its channel, so each queue gets its own.
		ch, err := conn.Channel()
		if err != nil {
			return depths, err
		}
		if info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err == nil {
			depths[q] = info.Messages
			_ = ch.Close()
		}
	}
	return depths, nil
}

// RedactURL hides a URL's password for messages.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}

package postgres

import (
	"context"

	"github.com/deliveryledger/ledger/commands"
)

// AcceptAnswer is what a group commit answers one request.
type AcceptAnswer struct {
	Response []byte
	Replayed bool
	Err      error
}

// CommitBatch commits recs as one batch, as a committer does with the requests waiting together,
// and returns their answers in order: a test chooses the batch instead of hoping that concurrent
// requests meet in one.
func (b *AcceptBatcher) CommitBatch(ctx context.Context, recs []commands.AcceptRecord) []AcceptAnswer {
	calls := make([]*acceptCall, len(recs))
	for i, rec := range recs {
		calls[i] = &acceptCall{ctx: ctx, rec: rec, done: make(chan acceptAnswer, 1)}
	}
	b.commit(calls)
	answers := make([]AcceptAnswer, len(calls))
	for i, c := range calls {
		a := <-c.done
		answers[i] = AcceptAnswer{Response: a.response, Replayed: a.replayed, Err: a.err}
	}
	return answers
}

// EventsByDeliveryOf is the query of EventStore.LoadOf, for a test to explain.
const EventsByDeliveryOf = eventsByDeliveryOf

// EventsQueries are the queries of the events table that an index serves, for a test to
// explain, by the name of the query.
var EventsQueries = map[string]string{
	"eventsReadLog":        eventsReadLog,
	"checkpointLagGet":     checkpointLagGet,
	"tenantPendingGet":     tenantPendingGet,
	"eventsByDelivery":     eventsByDelivery,
	"eventsByDeliveries":   eventsByDeliveries,
	"eventsExistingKeys":   eventsExistingKeys,
	"eventsTaken":          eventsTaken,
	"operationFind":        operationFind,
	"eventsByDeliveryOf":   eventsByDeliveryOf,
	"eventsOfNotification": eventsOfNotification,
}

// PartitionedQueries are the queries of the partitioned tables' hot paths (migration 0019), for
// a test to explain, by name.
var PartitionedQueries = map[string]string{
	"acceptRequestsAbsent":   acceptRequestsAbsent,
	"acceptRequestGet":       acceptRequestGet,
	"acceptRequestGetMany":   acceptRequestGetMany,
	"payloadsByNotification": payloadsByNotification,
	"eventsAppend":           eventsAppend,
}

// OutboxShardsPendingQuery and OutboxPartitionUnrelayed are the outbox's shard probes, for
// their plans.
var (
	OutboxShardsPendingQuery = outboxShardsPending
	OutboxPartitionUnrelayed = outboxPartitionUnrelayed
)

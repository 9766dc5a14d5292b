package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// DLQRow is a dead or unknown delivery in the DLQ view. The db tags name the columns;
// postgres.dlqColumns, the one list every statement of the view derives from, is held to them by
// a test.
type DLQRow struct {
	ID        string          `db:"id"`
	Tenant    string          `db:"tenant"`
	Channel   string          `db:"channel"`
	Recipient string          `db:"recipient"`
	Priority  domain.Priority `db:"priority"`
	// State is dead or unknown.
	State   domain.State `db:"state"`
	Version int          `db:"version"`
	// Attempts is the number of the latest attempt, over every cycle; AttemptsInCycle counts the
	// attempts since the latest replay, the ones MaxAttempts bounds.
	Attempts        int `db:"attempts"`
	AttemptsInCycle int `db:"attempts_in_cycle"`
	MaxAttempts     int `db:"max_attempts"`
	// Cycle is the number of replays so far.
	Cycle int `db:"cycle"`
	// FailureClass is the class of the latest attempt's failure (permanent, transient when the
	// attempts ran out, unknown, panic).
	FailureClass   domain.ErrorClass `db:"failure_class"`
	Exhausted      bool              `db:"exhausted"`
	LastError      string            `db:"last_error"`
	LastStatusCode int               `db:"last_status_code"`
	Provider       string            `db:"provider"`
	AcceptedAt     time.Time         `db:"accepted_at"`
	// EnteredAt is when the delivery entered its current state.
	EnteredAt time.Time `db:"entered_at"`
	// Evidence is the JSON array of the current cycle's Evidence, oldest first.
	Evidence json.RawMessage `db:"evidence"`
}

// Evidence is one attempt outcome or reconciliation of a DLQ entry: what an operator reads
// before replaying a dead delivery (was the failure permanent? did every attempt fail the same
// way?) or resolving an unknown one (did the request reach the provider? how long did it take?).
type Evidence struct {
	Attempt             int               `json:"attempt"`
	Event               domain.EventType  `json:"event"`
	At                  time.Time         `json:"at"`
	Provider            string            `json:"provider,omitempty"`
	Class               domain.ErrorClass `json:"error_class,omitempty"`
	Error               string            `json:"error,omitempty"`
	StatusCode          int               `json:"status_code,omitempty"`
	LatencyMS           float64           `json:"latency_ms,omitempty"`
	ProviderOperationID string            `json:"provider_operation_id,omitempty"`
	// FailedOver lists the providers the attempt tried first, whose calls never reached them.
	FailedOver []domain.ProviderTry `json:"failed_over,omitempty"`
	// Evidence and Actor are a reconciliation's.
	Evidence string `json:"evidence,omitempty"`
	Actor    string `json:"actor,omitempty"`
}

// dlqFold folds a whole stream, from version 1, into what the DLQ view needs.
type dlqFold struct {
	row        DLQRow
	cycleStart int
	evidence   []Evidence
}

func (f *dlqFold) apply(e domain.Event) error {
	if e.Version != f.row.Version+1 {
		return fmt.Errorf("delivery %s: event version %d follows version %d", e.DeliveryID, e.Version, f.row.Version)
	}
	next, err := domain.Next(f.row.State, e.Type)
	if err != nil {
		return fmt.Errorf("delivery %s at version %d: %w", e.DeliveryID, e.Version, err)
	}
	data, err := domain.DecodeData(e)
	if err != nil {
		return err
	}
	at := micro(e.RecordedAt)
	r := &f.row
	switch v := data.(type) {
	case *domain.Accepted:
		r.ID, r.Tenant, r.Channel, r.Recipient = e.DeliveryID, e.Tenant, v.Channel, v.Recipient
		r.Priority, r.MaxAttempts, r.AcceptedAt = v.Priority, v.MaxAttempts, at
		f.cycleStart = 1
	case *domain.Queued:
		r.Attempts = v.Attempt
	case *domain.AttemptStarted:
		r.Attempts = v.Attempt
		if v.Provider != "" {
			r.Provider = v.Provider
		}
	case *domain.AttemptResult:
		if v.Provider != "" {
			r.Provider = v.Provider
		}
		r.FailureClass, r.Exhausted, r.LastError, r.LastStatusCode = v.Class, v.Exhausted, v.Error, v.StatusCode
		f.evidence = append(f.evidence, Evidence{Attempt: v.Attempt, Event: e.Type, At: at, Provider: v.Provider,
			Class: v.Class, Error: v.Error, StatusCode: v.StatusCode, LatencyMS: v.LatencyMS,
			ProviderOperationID: v.ProviderOperationID, FailedOver: v.FailedOver})
	case *domain.Resolution:
		if v.Exhausted {
			r.Exhausted = true
		}
		f.evidence = append(f.evidence, Evidence{Attempt: v.Attempt, Event: e.Type, At: at, Evidence: v.Evidence,
			Actor: v.Actor, StatusCode: v.StatusCode, ProviderOperationID: v.ProviderOperationID})
	case *domain.ProviderAcceptance:
		r.Provider = v.Provider
		f.evidence = append(f.evidence, Evidence{Attempt: v.Attempt, Event: e.Type, At: at, Provider: v.Provider,
			StatusCode: v.StatusCode, LatencyMS: v.LatencyMS, ProviderOperationID: v.ProviderOperationID,
			Evidence: "accepted by the provider, awaiting its receipt"})
	case *domain.FailOver:
		r.Provider = v.To
		f.evidence = append(f.evidence, Evidence{Attempt: v.Attempt, Event: e.Type, At: at, Provider: v.From,
			Error: v.Error, Evidence: "the call never reached " + v.From + "; the attempt moved on to " + v.To})
	case *domain.ReceiptData:
		text := v.Source + ": " + v.Status
		if v.ProviderStatus != "" {
			text += " (" + v.ProviderStatus
			if v.Code != "" {
				text += ", code " + v.Code
			}
			text += ")"
		}
		if v.Detail != "" {
			text += ": " + v.Detail
		}
		if v.Evidence != "" {
			text += "; " + v.Evidence
		}
		f.evidence = append(f.evidence, Evidence{Attempt: v.Attempt, Event: e.Type, At: at, Provider: v.Provider,
			ProviderOperationID: v.ProviderOperationID, Evidence: text, Actor: v.Source})
	case *domain.Replayed:
		r.Attempts, r.Cycle, f.cycleStart = v.Attempt, v.Cycle, v.Attempt
		r.FailureClass, r.Exhausted, r.LastError, r.LastStatusCode = "", false, "", 0
		f.evidence = nil
	}
	if inDLQ(next) && next != r.State {
		r.EnteredAt = at
	}
	r.State, r.Version = next, e.Version
	return nil
}

// result returns the DLQ row of the folded stream; ok is false when the delivery is not dead or
// unknown.
func (f *dlqFold) result() (DLQRow, bool) {
	if !inDLQ(f.row.State) {
		return DLQRow{}, false
	}
	r := f.row
	if r.Attempts >= f.cycleStart {
		r.AttemptsInCycle = r.Attempts - f.cycleStart + 1
	}
	ev := f.evidence
	if ev == nil {
		ev = []Evidence{}
	}
	r.Evidence, _ = json.Marshal(ev) // plain values marshal
	return r, true
}

// DLQProjection keeps dlq_view.
type DLQProjection struct{}

// Name implements Projection.
func (DLQProjection) Name() string { return NameDLQ }

// Table implements Projection.
func (DLQProjection) Table() string { return "dlq_view" }

// Version implements Projection. Version 2 keeps providers' acceptances and receipts as evidence.
func (DLQProjection) Version() int { return 2 }

// Apply implements Projection. The DLQ keeps no copy of deliveries that are not in it: the type
// of a delivery's latest event in the batch says whether it is dead or unknown now; those that
// are get their row folded from their stream (read from the log, up to that event), and those
// whose batch took them out of dead or unknown lose it.
func (DLQProjection) Apply(ctx context.Context, tx Tx, table string, batch []LoggedEvent) error {
	streams, err := groupStreams(batch)
	if err != nil {
		return err
	}
	var enterIDs []string
	var enterUpTo []int32
	var leave []string
	kept := map[string]int32{} // deliveries whose batch only added evidence, by their last version
	for _, s := range streams {
		last := s.events[len(s.events)-1]
		changing := lastChanging(s.events)
		if changing == nil {
			kept[s.id] = int32(last.Version)
			continue
		}
		state, err := StateAfter(changing.Type)
		if err != nil {
			return err
		}
		if inDLQ(state) {
			enterIDs = append(enterIDs, s.id)
			enterUpTo = append(enterUpTo, int32(last.Version))
			continue
		}
		for _, e := range s.events {
			if leavesDLQ[e.Type] {
				leave = append(leave, s.id)
				break
			}
		}
	}
	if len(kept) > 0 {
		// Evidence on a delivery that is in the DLQ refolds its row; on any other, nothing.
		ids := make([]string, 0, len(kept))
		for id := range kept {
			ids = append(ids, id)
		}
		present, err := tx.DLQRowsPresent(ctx, table, ids)
		if err != nil {
			return fmt.Errorf("read dlq rows: %w", err)
		}
		for _, id := range present {
			enterIDs = append(enterIDs, id)
			enterUpTo = append(enterUpTo, kept[id])
		}
	}
	if len(leave) > 0 {
		if err := tx.DLQRowsDelete(ctx, table, leave); err != nil {
			return fmt.Errorf("delete dlq rows: %w", err)
		}
	}
	if len(enterIDs) == 0 {
		return nil
	}
	// The streams are read up to the version the batch reached: the events are immutable, so
	// the fold is the same whenever it runs.
	events, err := tx.StreamsGet(ctx, enterIDs, enterUpTo)
	if err != nil {
		return fmt.Errorf("read dlq streams: %w", err)
	}
	folds := map[string]*dlqFold{}
	for _, e := range events {
		f := folds[e.DeliveryID]
		if f == nil {
			f = &dlqFold{}
			folds[e.DeliveryID] = f
		}
		if err := f.apply(e); err != nil {
			return err
		}
	}
	rows := make([]DLQRow, 0, len(enterIDs))
	for i, id := range enterIDs {
		f := folds[id]
		if f == nil || f.row.Version != int(enterUpTo[i]) {
			return fmt.Errorf("delivery %s: the log does not hold its stream up to version %d", id, enterUpTo[i])
		}
		row, ok := f.result()
		if !ok {
			return fmt.Errorf("delivery %s: folded to state %s, not dead or unknown", id, f.row.State)
		}
		rows = append(rows, row)
	}
	// A row is replaced only by a later version of the same delivery.
	n, err := tx.DLQRowsUpsert(ctx, table, rows)
	if err != nil {
		return fmt.Errorf("write dlq rows: %w", err)
	}
	if int(n) != len(rows) {
		return fmt.Errorf("write dlq rows: %d of %d rows written; a row was ahead of the log", n, len(rows))
	}
	return nil
}

// Verify implements Projection.
func (DLQProjection) Verify(ctx context.Context, snap Snapshot, table string, upTo LogPosition, report func(Difference)) error {
	live, err := snap.DLQRowsList(ctx, table)
	if err != nil {
		return err
	}
	streams, err := openStreams(ctx, snap, upTo)
	if err != nil {
		return err
	}
	return mergeByID(ctx, live, streams, func(r DLQRow) string { return r.ID },
		func(s *stream) (DLQRow, bool, error) {
			var f dlqFold
			for _, e := range s.events {
				if err := f.apply(e); err != nil {
					return DLQRow{}, false, err
				}
			}
			row, ok := f.result()
			return row, ok, nil
		}, report)
}

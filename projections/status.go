package projections

import (
	"context"
	"fmt"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// StatusRow is one delivery in the status view. The db tags name the columns (in Verify's
// differences); postgres.statusColumns, the one list every statement of the view derives from,
// is held to them by a test.
type StatusRow struct {
	ID             string          `db:"id"`
	Tenant         string          `db:"tenant"`
	NotificationID string          `db:"notification_id"`
	Channel        string          `db:"channel"`
	Recipient      string          `db:"recipient"`
	Priority       domain.Priority `db:"priority"`
	State          domain.State    `db:"state"`
	Version        int             `db:"version"`
	// Attempts is the number of the latest attempt queued or started, over every cycle.
	Attempts            int               `db:"attempts"`
	MaxAttempts         int               `db:"max_attempts"`
	Provider            string            `db:"provider"`
	ProviderOperationID string            `db:"provider_operation_id"`
	LastErrorClass      domain.ErrorClass `db:"last_error_class"`
	LastError           string            `db:"last_error"`
	LastStatusCode      int               `db:"last_status_code"`
	NextAttemptAt       *time.Time        `db:"next_attempt_at"`
	RequestKey          string            `db:"idempotency_key"`
	AcceptedAt          time.Time         `db:"accepted_at"`
	UpdatedAt           time.Time         `db:"updated_at"`
	// TerminalAt is when the delivery entered delivered or dead; nil while it is not terminal.
	TerminalAt *time.Time `db:"terminal_at"`
	// FirstAttemptAt is when attempt 1 started (version 2 of the projection, migration 0004).
	FirstAttemptAt *time.Time `db:"first_attempt_at"`
	// CheckAt is when the reconciler asks the provider about the delivery: an attempt the
	// provider accepted and no receipt decided (after the receipt timeout, then after each
	// lookup that found the message on its way), or an unknown outcome (at once). GiveUpAt is
	// when an accepted attempt with no word becomes unknown. Both nil otherwise (version 3,
	// migration 0009).
	CheckAt  *time.Time `db:"check_at"`
	GiveUpAt *time.Time `db:"give_up_at"`
	// Suppression is the data of the delivery.suppressed event that ended the delivery (JSON
	// of domain.Suppressed), "" for any other delivery (migration 0017).
	Suppression string `db:"suppression"`
}

// FoldStatus folds a whole stream, oldest first, into its status row: the row the status view
// holds for the delivery once the projector has applied the stream. The API answers a single
// delivery with it, so a delivery has one shape whether it is read from its stream or listed.
func FoldStatus(events []domain.Event) (StatusRow, error) {
	var r StatusRow
	for _, e := range events {
		if err := r.apply(e); err != nil {
			return r, err
		}
	}
	return r, nil
}

// apply folds one event into the row. It mirrors domain.Delivery's fold for the fields both
// have (a test holds them together) and fails on an event the transition table refuses.
func (r *StatusRow) apply(e domain.Event) error {
	if e.Version != r.Version+1 {
		return fmt.Errorf("delivery %s: event version %d follows version %d", e.DeliveryID, e.Version, r.Version)
	}
	next, err := domain.Next(r.State, e.Type)
	if err != nil {
		return fmt.Errorf("delivery %s at version %d: %w", e.DeliveryID, e.Version, err)
	}
	data, err := domain.DecodeData(e)
	if err != nil {
		return err
	}
	at := micro(e.RecordedAt)
	switch v := data.(type) {
	case *domain.Accepted:
		r.ID, r.Tenant = e.DeliveryID, e.Tenant
		r.NotificationID, r.Channel, r.Recipient = v.NotificationID, v.Channel, v.Recipient
		r.Priority, r.MaxAttempts, r.RequestKey = v.Priority, v.MaxAttempts, v.RequestKey
		r.AcceptedAt = at
	case *domain.Queued:
		r.Attempts = v.Attempt
		r.NextAttemptAt = nil
	case *domain.Deferred:
		until := micro(v.Until)
		r.NextAttemptAt = &until
	case *domain.AttemptStarted:
		r.Attempts = v.Attempt
		if v.Provider != "" {
			r.Provider = v.Provider
		}
		if v.Attempt == 1 {
			r.FirstAttemptAt = &at
		}
	case *domain.AttemptResult:
		if v.Provider != "" {
			r.Provider = v.Provider
		}
		r.ProviderOperationID = v.ProviderOperationID
		r.LastErrorClass, r.LastError, r.LastStatusCode = v.Class, v.Error, v.StatusCode
		r.NextAttemptAt = microPtr(v.NextAttemptAt)
		r.CheckAt, r.GiveUpAt = nil, nil
		if e.Type == domain.EventOutcomeUnknown {
			r.CheckAt = &at
		}
	case *domain.ProviderAcceptance:
		r.Provider, r.ProviderOperationID = v.Provider, v.ProviderOperationID
		r.CheckAt, r.GiveUpAt = microPtr(&v.CheckAt), microPtr(&v.GiveUpAt)
	case *domain.FailOver:
		r.Provider = v.To
	case *domain.ReceiptData:
		if v.NextCheckAt != nil && r.CheckAt != nil {
			r.CheckAt = microPtr(v.NextCheckAt)
		}
	case *domain.Resolution:
		if v.ProviderOperationID != "" {
			r.ProviderOperationID = v.ProviderOperationID
		}
		r.NextAttemptAt = microPtr(v.NextAttemptAt)
		r.CheckAt, r.GiveUpAt = nil, nil
	case *domain.Scheduled:
		r.NextAttemptAt = microPtr(&v.SendAt) // the status view lists a scheduled send by its time
	case *domain.Cancelled:
		r.NextAttemptAt = nil
	case *domain.Suppressed:
		r.NextAttemptAt = nil
		r.Suppression = string(e.Data)
	case *domain.Replayed:
		r.Attempts = v.Attempt
		r.ProviderOperationID, r.LastErrorClass, r.LastError, r.LastStatusCode = "", "", "", 0
	}
	r.State, r.Version, r.UpdatedAt = next, e.Version, at
	r.TerminalAt = nil
	if next.Terminal() {
		r.TerminalAt = &at
	}
	return nil
}

// StatusProjection keeps status_view.
type StatusProjection struct{}

// Name implements Projection.
func (StatusProjection) Name() string { return NameStatus }

// Table implements Projection.
func (StatusProjection) Table() string { return "status_view" }

// Version implements Projection. Version 2 fills first_attempt_at, version 3 check_at and
// give_up_at.
func (StatusProjection) Version() int { return 3 }

// Apply implements Projection: it reads the rows of the deliveries the batch continues, folds
// the batch in memory, and writes the result with one insert and one update.
func (StatusProjection) Apply(ctx context.Context, tx Tx, table string, batch []LoggedEvent) error {
	streams, err := groupStreams(batch)
	if err != nil {
		return err
	}
	var continued []string
	for _, s := range streams {
		if s.events[0].Version > 1 {
			continued = append(continued, s.id)
		}
	}
	existing := map[string]StatusRow{}
	if len(continued) > 0 {
		got, err := tx.StatusRowsGet(ctx, table, continued)
		if err != nil {
			return fmt.Errorf("read status rows: %w", err)
		}
		for _, r := range got {
			existing[r.ID] = r
		}
	}
	var inserts, updates []StatusRow
	var expected []int
	for _, s := range streams {
		row, ok := existing[s.id]
		if !ok && s.events[0].Version > 1 {
			return fmt.Errorf("delivery %s: event version %d but no status row", s.id, s.events[0].Version)
		}
		before := row.Version
		for _, e := range s.events {
			if err := row.apply(e); err != nil {
				return err
			}
		}
		if ok {
			updates, expected = append(updates, row), append(expected, before)
		} else {
			inserts = append(inserts, row)
		}
	}
	if len(inserts) > 0 {
		if err := tx.StatusRowsInsert(ctx, table, inserts); err != nil {
			return fmt.Errorf("insert status rows: %w", err)
		}
	}
	if len(updates) > 0 {
		// The update is guarded by the version each row had when it was read: a row that moved
		// in between (which the checkpoint lock rules out) is not overwritten, and the count tells.
		n, err := tx.StatusRowsUpdate(ctx, table, updates, expected)
		if err != nil {
			return fmt.Errorf("update status rows: %w", err)
		}
		if int(n) != len(updates) {
			return fmt.Errorf("update status rows: %d of %d rows were at the expected version", n, len(updates))
		}
	}
	return nil
}

// Verify implements Projection: it walks the view and the log's streams side by side, both in
// delivery id order, folding each stream from nothing.
func (StatusProjection) Verify(ctx context.Context, snap Snapshot, table string, upTo LogPosition, report func(Difference)) error {
	live, err := snap.StatusRowsList(ctx, table)
	if err != nil {
		return err
	}
	streams, err := openStreams(ctx, snap, upTo)
	if err != nil {
		return err
	}
	return mergeByID(ctx, live, streams, func(r StatusRow) string { return r.ID },
		func(s *stream) (StatusRow, bool, error) {
			var row StatusRow
			for _, e := range s.events {
				if err := row.apply(e); err != nil {
					return row, false, err
				}
			}
			return row, true, nil
		}, report)
}

// mergeByID walks live rows and streams, both ordered by delivery id, and reports the rows that
// are missing, extra or different. fold returns the row a stream should have (ok false: none).
func mergeByID[R any](ctx context.Context, live Rows[R], streams *streamReader, id func(R) string,
	fold func(*stream) (R, bool, error), report func(Difference)) error {
	row, haveRow, err := live.Next(ctx)
	if err != nil {
		return err
	}
	s, err := streams.next(ctx)
	if err != nil {
		return err
	}
	for haveRow || s != nil {
		switch {
		case s == nil || (haveRow && id(row) < s.id):
			report(Difference{Key: id(row), Live: "a row", Expected: noRow})
			if row, haveRow, err = live.Next(ctx); err != nil {
				return err
			}
		case !haveRow || s.id < id(row):
			want, ok, err := fold(s)
			if err != nil {
				return err
			}
			if ok {
				report(Difference{Key: s.id, Live: noRow, Expected: fmt.Sprintf("%+v", want)})
			}
			if s, err = streams.next(ctx); err != nil {
				return err
			}
		default:
			want, ok, err := fold(s)
			if err != nil {
				return err
			}
			if ok {
				diffRows(s.id, row, want, report)
			} else {
				report(Difference{Key: s.id, Live: "a row", Expected: noRow})
			}
			if row, haveRow, err = live.Next(ctx); err != nil {
				return err
			}
			if s, err = streams.next(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

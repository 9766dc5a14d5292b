package projections

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/domain"
)

// StatusRow is one delivery in the status view.
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

const statusColumns = `id::text, tenant, notification_id, channel, recipient, priority, state, version, attempts,
max_attempts, provider, provider_operation_id, last_error_class, last_error, last_status_code, next_attempt_at,
idempotency_key, accepted_at, updated_at, terminal_at, first_attempt_at, check_at, give_up_at`

func scanStatus(row pgx.CollectableRow) (StatusRow, error) {
	var r StatusRow
	err := row.Scan(&r.ID, &r.Tenant, &r.NotificationID, &r.Channel, &r.Recipient, &r.Priority, &r.State, &r.Version,
		&r.Attempts, &r.MaxAttempts, &r.Provider, &r.ProviderOperationID, &r.LastErrorClass, &r.LastError,
		&r.LastStatusCode, &r.NextAttemptAt, &r.RequestKey, &r.AcceptedAt, &r.UpdatedAt, &r.TerminalAt, &r.FirstAttemptAt,
		&r.CheckAt, &r.GiveUpAt)
	r.AcceptedAt, r.UpdatedAt = r.AcceptedAt.UTC(), r.UpdatedAt.UTC()
	r.NextAttemptAt, r.TerminalAt, r.FirstAttemptAt = utcPtr(r.NextAttemptAt), utcPtr(r.TerminalAt), utcPtr(r.FirstAttemptAt)
	r.CheckAt, r.GiveUpAt = utcPtr(r.CheckAt), utcPtr(r.GiveUpAt)
	return r, err
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// Statements of the status projection; %[1]s is the table (live or shadow).
const (
	statusRowsGet = `SELECT ` + statusColumns + ` FROM %[1]s WHERE id = ANY($1::uuid[])`

	// The update is guarded by the version the row had when it was read: a row that moved in
	// between (which the checkpoint lock rules out) is not overwritten, and the count tells.
	statusRowsUpdate = `UPDATE %[1]s AS v SET
	tenant = u.tenant, notification_id = u.notification_id, channel = u.channel, recipient = u.recipient,
	priority = u.priority, state = u.state, version = u.version, attempts = u.attempts,
	max_attempts = u.max_attempts, provider = u.provider, provider_operation_id = u.provider_operation_id,
	last_error_class = u.last_error_class, last_error = u.last_error, last_status_code = u.last_status_code,
	next_attempt_at = u.next_attempt_at, idempotency_key = u.idempotency_key, accepted_at = u.accepted_at,
	updated_at = u.updated_at, terminal_at = u.terminal_at, first_attempt_at = u.first_attempt_at,
	check_at = u.check_at, give_up_at = u.give_up_at
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[],
	$9::int[], $10::int[], $11::text[], $12::text[], $13::text[], $14::text[], $15::int[], $16::timestamptz[],
	$17::text[], $18::timestamptz[], $19::timestamptz[], $20::timestamptz[], $21::timestamptz[], $22::timestamptz[],
	$23::timestamptz[], $24::int[])
	AS u(id, tenant, notification_id, channel, recipient, priority, state, version, attempts, max_attempts,
	provider, provider_operation_id, last_error_class, last_error, last_status_code, next_attempt_at,
	idempotency_key, accepted_at, updated_at, terminal_at, first_attempt_at, check_at, give_up_at, expected_version)
WHERE v.id = u.id AND v.version = u.expected_version`

	// By the uuid column (the index), not the text output column of the same name; both orders
	// agree with the log's delivery_id order, which the merge in Verify relies on.
	statusRowsList = `SELECT ` + statusColumns + ` FROM %[1]s AS v ORDER BY v.id`
)

// Apply implements Projection: it reads the rows of the deliveries the batch continues, folds
// the batch in memory, and writes the result with one insert and one update.
func (StatusProjection) Apply(ctx context.Context, tx pgx.Tx, table string, batch []LoggedEvent) error {
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
		rows, err := tx.Query(ctx, fmt.Sprintf(statusRowsGet, ident(table)), continued)
		if err != nil {
			return fmt.Errorf("read status rows: %w", err)
		}
		got, err := pgx.CollectRows(rows, scanStatus)
		if err != nil {
			return fmt.Errorf("read status rows: %w", err)
		}
		for _, r := range got {
			existing[r.ID] = r
		}
	}
	var inserts, updates statusColumnsArrays
	for _, s := range streams {
		row, ok := existing[s.id]
		if !ok && s.events[0].Version > 1 {
			return fmt.Errorf("delivery %s: event version %d but no status row", s.id, s.events[0].Version)
		}
		expected := row.Version
		for _, e := range s.events {
			if err := row.apply(e); err != nil {
				return err
			}
		}
		if ok {
			updates.add(row, expected)
		} else {
			inserts.add(row, 0)
		}
	}
	if inserts.n > 0 {
		// COPY is the cheapest way in for the new rows, which are most rows of a rebuild.
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{table}, statusCopyColumns, pgx.CopyFromSlice(inserts.n, inserts.row)); err != nil {
			return fmt.Errorf("insert status rows: %w", err)
		}
	}
	if updates.n > 0 {
		tag, err := tx.Exec(ctx, fmt.Sprintf(statusRowsUpdate, ident(table)), updates.args()...)
		if err != nil {
			return fmt.Errorf("update status rows: %w", err)
		}
		if int(tag.RowsAffected()) != updates.n {
			return fmt.Errorf("update status rows: %d of %d rows were at the expected version", tag.RowsAffected(), updates.n)
		}
	}
	return nil
}

// statusColumnsArrays holds rows column by column, the shape unnest takes.
type statusColumnsArrays struct {
	n                                                             int
	ids, tenants, notifications, channels, recipients, priorities []string
	states, providers, operations, classes, errors, keys          []string
	versions, attempts, maxAttempts, codes, expected              []int32
	accepted, updated                                             []time.Time
	next, terminal, first, check, giveUp                          []*time.Time
}

func (a *statusColumnsArrays) add(r StatusRow, expected int) {
	a.n++
	a.ids = append(a.ids, r.ID)
	a.tenants = append(a.tenants, r.Tenant)
	a.notifications = append(a.notifications, r.NotificationID)
	a.channels = append(a.channels, r.Channel)
	a.recipients = append(a.recipients, r.Recipient)
	a.priorities = append(a.priorities, string(r.Priority))
	a.states = append(a.states, string(r.State))
	a.versions = append(a.versions, int32(r.Version))
	a.attempts = append(a.attempts, int32(r.Attempts))
	a.maxAttempts = append(a.maxAttempts, int32(r.MaxAttempts))
	a.providers = append(a.providers, r.Provider)
	a.operations = append(a.operations, r.ProviderOperationID)
	a.classes = append(a.classes, string(r.LastErrorClass))
	a.errors = append(a.errors, r.LastError)
	a.codes = append(a.codes, int32(r.LastStatusCode))
	a.next = append(a.next, r.NextAttemptAt)
	a.keys = append(a.keys, r.RequestKey)
	a.accepted = append(a.accepted, r.AcceptedAt)
	a.updated = append(a.updated, r.UpdatedAt)
	a.terminal = append(a.terminal, r.TerminalAt)
	a.first = append(a.first, r.FirstAttemptAt)
	a.check = append(a.check, r.CheckAt)
	a.giveUp = append(a.giveUp, r.GiveUpAt)
	a.expected = append(a.expected, int32(expected))
}

// statusCopyColumns are the columns COPY writes.
var statusCopyColumns = []string{"id", "tenant", "notification_id", "channel", "recipient", "priority", "state", "version",
	"attempts", "max_attempts", "provider", "provider_operation_id", "last_error_class", "last_error", "last_status_code",
	"next_attempt_at", "idempotency_key", "accepted_at", "updated_at", "terminal_at", "first_attempt_at", "check_at",
	"give_up_at"}

// row is row i in the column order of statusCopyColumns, for COPY.
func (a *statusColumnsArrays) row(i int) ([]any, error) {
	id, err := uuid.Parse(a.ids[i])
	if err != nil {
		return nil, err
	}
	return []any{id, a.tenants[i], a.notifications[i], a.channels[i], a.recipients[i], a.priorities[i], a.states[i],
		a.versions[i], a.attempts[i], a.maxAttempts[i], a.providers[i], a.operations[i], a.classes[i], a.errors[i],
		a.codes[i], a.next[i], a.keys[i], a.accepted[i], a.updated[i], a.terminal[i], a.first[i], a.check[i], a.giveUp[i]}, nil
}

// args are the arrays of statusRowsUpdate.
func (a *statusColumnsArrays) args() []any {
	return []any{a.ids, a.tenants, a.notifications, a.channels, a.recipients, a.priorities, a.states, a.versions,
		a.attempts, a.maxAttempts, a.providers, a.operations, a.classes, a.errors, a.codes, a.next, a.keys,
		a.accepted, a.updated, a.terminal, a.first, a.check, a.giveUp, a.expected}
}

// Verify implements Projection: it walks the view and the log's streams side by side, both in
// delivery id order, folding each stream from nothing.
func (StatusProjection) Verify(ctx context.Context, tx pgx.Tx, table string, upTo LogPosition, report func(Difference)) error {
	live, err := openCursor(ctx, tx, "verify_rows", fmt.Sprintf(statusRowsList, ident(table)), scanStatus)
	if err != nil {
		return err
	}
	streams, err := openStreams(ctx, tx, upTo)
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
func mergeByID[R any](ctx context.Context, live *cursor[R], streams *streamReader, id func(R) string,
	fold func(*stream) (R, bool, error), report func(Difference)) error {
	row, haveRow, err := live.next(ctx)
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
			if row, haveRow, err = live.next(ctx); err != nil {
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
			if row, haveRow, err = live.next(ctx); err != nil {
				return err
			}
			if s, err = streams.next(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// ident quotes a table name for SQL text.
func ident(name string) string {
	return pgx.Identifier{strings.TrimSpace(name)}.Sanitize()
}

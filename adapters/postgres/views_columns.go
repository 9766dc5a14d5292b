package postgres

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// column is one column of a view, declared once: its name, its type as PostgreSQL spells it
// (format_type), and the field of the row that holds its value. The SELECT list, the scan, the
// COPY, the unnest arrays and the UPDATE of a view all derive from its list of columns, so a new
// column is one entry here (and the migration that adds it; a test holds the two together).
type column[R any] struct {
	name    string
	sqlType string
	// selected is the column as a SELECT reads it (a uuid is read as its text).
	selected string
	// dest is where a scan puts the column's value; after, when set, normalizes it (times
	// come back in the session's zone, the rows hold UTC).
	dest  func(*R) any
	after func(*R)
	// array starts the array of this column that unnest takes, filled row by row.
	array func() columnArray[R]
	// copied is the value COPY writes.
	copied func(*R) (any, error)
}

// columnArray is one column's values of many rows, in the Go type its SQL array takes.
type columnArray[R any] interface {
	add(*R)
	value() any
}

// sliceArray is a columnArray of the values get returns.
type sliceArray[R, T any] struct {
	get  func(*R) T
	vals []T
}

func (a *sliceArray[R, T]) add(r *R)   { a.vals = append(a.vals, a.get(r)) }
func (a *sliceArray[R, T]) value() any { return a.vals }

// newColumn declares a column whose field f holds values that unnest and COPY take as the array
// element get returns.
func newColumn[R, F, T any](name, sqlType string, f func(*R) *F, get func(F) T) column[R] {
	return column[R]{
		name: name, sqlType: sqlType, selected: name,
		dest:   func(r *R) any { return f(r) },
		array:  func() columnArray[R] { return &sliceArray[R, T]{get: func(r *R) T { return get(*f(r)) }} },
		copied: func(r *R) (any, error) { return get(*f(r)), nil },
	}
}

// textColumn is a text column of any string type (a state, a priority, an error class).
func textColumn[R any, S ~string](name string, f func(*R) *S) column[R] {
	return newColumn(name, "text", f, func(v S) string { return string(v) })
}

// uuidColumn is a uuid column held as its text in the row.
func uuidColumn[R any](name string, f func(*R) *string) column[R] {
	c := newColumn(name, "uuid", f, func(v string) string { return v })
	c.selected = name + "::text"
	c.copied = func(r *R) (any, error) { return uuid.Parse(*f(r)) }
	return c
}

func intColumn[R any](name string, f func(*R) *int) column[R] {
	return newColumn(name, "integer", f, func(v int) int32 { return int32(v) })
}

func boolColumn[R any](name string, f func(*R) *bool) column[R] {
	return newColumn(name, "boolean", f, func(v bool) bool { return v })
}

func timeColumn[R any](name string, f func(*R) *time.Time) column[R] {
	c := newColumn(name, "timestamp with time zone", f, func(v time.Time) time.Time { return v })
	c.after = func(r *R) { *f(r) = f(r).UTC() }
	return c
}

// nullTimeColumn is a timestamptz column that may be NULL.
func nullTimeColumn[R any](name string, f func(*R) **time.Time) column[R] {
	c := newColumn(name, "timestamp with time zone", f, func(v *time.Time) *time.Time { return v })
	c.after = func(r *R) { *f(r) = utcPtr(*f(r)) }
	return c
}

func jsonbColumn[R any](name string, f func(*R) *json.RawMessage) column[R] {
	c := newColumn(name, "jsonb", f, func(v json.RawMessage) string { return string(v) })
	c.copied = func(r *R) (any, error) { return *f(r), nil }
	return c
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// columns is a view's list of columns, and the statement parts derived from it.
type columns[R any] []column[R]

// names returns the column names, in order.
func (cs columns[R]) names() []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.name
	}
	return out
}

// selectList is the SELECT list that scan reads.
func (cs columns[R]) selectList() string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.selected
	}
	return strings.Join(out, ", ")
}

// scan reads one row of a SELECT of selectList.
func (cs columns[R]) scan(row interface{ Scan(...any) error }) (R, error) {
	var r R
	dest := make([]any, len(cs))
	for i, c := range cs {
		dest[i] = c.dest(&r)
	}
	if err := row.Scan(dest...); err != nil {
		return r, err
	}
	for _, c := range cs {
		if c.after != nil {
			c.after(&r)
		}
	}
	return r, nil
}

// unnest is `unnest($1::type[], ...) AS alias(name, ...)` over the columns and then extra
// (name, type) pairs, with arguments from $1.
func (cs columns[R]) unnest(alias string, extra ...[2]string) string {
	types := make([]string, 0, len(cs)+len(extra))
	names := make([]string, 0, len(cs)+len(extra))
	for i, c := range cs {
		types = append(types, fmt.Sprintf("$%d::%s[]", i+1, c.sqlType))
		names = append(names, c.name)
	}
	for i, e := range extra {
		types = append(types, fmt.Sprintf("$%d::%s[]", len(cs)+i+1, e[1]))
		names = append(names, e[0])
	}
	return "unnest(" + strings.Join(types, ", ") + ") AS " + alias + "(" + strings.Join(names, ", ") + ")"
}

// set is `name = from.name, ...` over every column but the key.
func (cs columns[R]) set(key, from string) string {
	var out []string
	for _, c := range cs {
		if c.name != key {
			out = append(out, c.name+" = "+from+"."+c.name)
		}
	}
	return strings.Join(out, ", ")
}

// arrays returns the arguments of unnest for rows, column by column.
func (cs columns[R]) arrays(rows []R) []any {
	out := make([]any, len(cs))
	for i, c := range cs {
		a := c.array()
		for j := range rows {
			a.add(&rows[j])
		}
		out[i] = a.value()
	}
	return out
}

// copySource is a pgx.CopyFromSource over rows.
type copySource[R any] struct {
	cs   columns[R]
	rows []R
	i    int
	vals []any
	err  error
}

func (s *copySource[R]) Next() bool {
	if s.err != nil || s.i >= len(s.rows) {
		return false
	}
	r := &s.rows[s.i]
	s.i++
	s.vals = make([]any, len(s.cs))
	for k, c := range s.cs {
		if s.vals[k], s.err = c.copied(r); s.err != nil {
			return false
		}
	}
	return true
}

func (s *copySource[R]) Values() ([]any, error) { return s.vals, s.err }
func (s *copySource[R]) Err() error             { return s.err }

// statusColumns are the status view's columns.
var statusColumns = columns[projections.StatusRow]{
	uuidColumn("id", func(r *projections.StatusRow) *string { return &r.ID }),
	textColumn("tenant", func(r *projections.StatusRow) *string { return &r.Tenant }),
	textColumn("notification_id", func(r *projections.StatusRow) *string { return &r.NotificationID }),
	textColumn("channel", func(r *projections.StatusRow) *string { return &r.Channel }),
	textColumn("recipient", func(r *projections.StatusRow) *string { return &r.Recipient }),
	textColumn("priority", func(r *projections.StatusRow) *domain.Priority { return &r.Priority }),
	textColumn("state", func(r *projections.StatusRow) *domain.State { return &r.State }),
	intColumn("version", func(r *projections.StatusRow) *int { return &r.Version }),
	intColumn("attempts", func(r *projections.StatusRow) *int { return &r.Attempts }),
	intColumn("max_attempts", func(r *projections.StatusRow) *int { return &r.MaxAttempts }),
	textColumn("provider", func(r *projections.StatusRow) *string { return &r.Provider }),
	textColumn("provider_operation_id", func(r *projections.StatusRow) *string { return &r.ProviderOperationID }),
	textColumn("last_error_class", func(r *projections.StatusRow) *domain.ErrorClass { return &r.LastErrorClass }),
	textColumn("last_error", func(r *projections.StatusRow) *string { return &r.LastError }),
	intColumn("last_status_code", func(r *projections.StatusRow) *int { return &r.LastStatusCode }),
	nullTimeColumn("next_attempt_at", func(r *projections.StatusRow) **time.Time { return &r.NextAttemptAt }),
	textColumn("idempotency_key", func(r *projections.StatusRow) *string { return &r.RequestKey }),
	timeColumn("accepted_at", func(r *projections.StatusRow) *time.Time { return &r.AcceptedAt }),
	timeColumn("updated_at", func(r *projections.StatusRow) *time.Time { return &r.UpdatedAt }),
	nullTimeColumn("terminal_at", func(r *projections.StatusRow) **time.Time { return &r.TerminalAt }),
	nullTimeColumn("first_attempt_at", func(r *projections.StatusRow) **time.Time { return &r.FirstAttemptAt }),
	nullTimeColumn("check_at", func(r *projections.StatusRow) **time.Time { return &r.CheckAt }),
	nullTimeColumn("give_up_at", func(r *projections.StatusRow) **time.Time { return &r.GiveUpAt }),
	textColumn("suppression", func(r *projections.StatusRow) *string { return &r.Suppression }),
}

// dlqColumns are the DLQ view's columns.
var dlqColumns = columns[projections.DLQRow]{
	uuidColumn("id", func(r *projections.DLQRow) *string { return &r.ID }),
	textColumn("tenant", func(r *projections.DLQRow) *string { return &r.Tenant }),
	textColumn("channel", func(r *projections.DLQRow) *string { return &r.Channel }),
	textColumn("recipient", func(r *projections.DLQRow) *string { return &r.Recipient }),
	textColumn("priority", func(r *projections.DLQRow) *domain.Priority { return &r.Priority }),
	textColumn("state", func(r *projections.DLQRow) *domain.State { return &r.State }),
	intColumn("version", func(r *projections.DLQRow) *int { return &r.Version }),
	intColumn("attempts", func(r *projections.DLQRow) *int { return &r.Attempts }),
	intColumn("attempts_in_cycle", func(r *projections.DLQRow) *int { return &r.AttemptsInCycle }),
	intColumn("max_attempts", func(r *projections.DLQRow) *int { return &r.MaxAttempts }),
	intColumn("cycle", func(r *projections.DLQRow) *int { return &r.Cycle }),
	textColumn("failure_class", func(r *projections.DLQRow) *domain.ErrorClass { return &r.FailureClass }),
	boolColumn("exhausted", func(r *projections.DLQRow) *bool { return &r.Exhausted }),
	textColumn("last_error", func(r *projections.DLQRow) *string { return &r.LastError }),
	intColumn("last_status_code", func(r *projections.DLQRow) *int { return &r.LastStatusCode }),
	textColumn("provider", func(r *projections.DLQRow) *string { return &r.Provider }),
	timeColumn("accepted_at", func(r *projections.DLQRow) *time.Time { return &r.AcceptedAt }),
	timeColumn("entered_at", func(r *projections.DLQRow) *time.Time { return &r.EnteredAt }),
	jsonbColumn("evidence", func(r *projections.DLQRow) *json.RawMessage { return &r.Evidence }),
}

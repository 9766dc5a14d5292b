package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/domain"
)

// cursorChunk is how many rows a cursor fetches at a time.
const cursorChunk = 2000

// cursor reads a query's rows in chunks through a server-side cursor. Verify reads a view and the
// log side by side in one transaction; a connection serves one result set at a time, and holding
// either side in memory would not scale with the log, so each side is a cursor.
type cursor[T any] struct {
	tx   pgx.Tx
	name string
	scan func(pgx.CollectableRow) (T, error)
	buf  []T
	done bool
}

// openCursor declares a cursor named name for query (which must not take parameters).
func openCursor[T any](ctx context.Context, tx pgx.Tx, name, query string, scan func(pgx.CollectableRow) (T, error)) (*cursor[T], error) {
	if _, err := tx.Exec(ctx, `DECLARE `+name+` NO SCROLL CURSOR FOR `+query); err != nil {
		return nil, fmt.Errorf("declare cursor %s: %w", name, err)
	}
	return &cursor[T]{tx: tx, name: name, scan: scan}, nil
}

// next returns the next row; ok is false after the last one.
func (c *cursor[T]) next(ctx context.Context) (row T, ok bool, err error) {
	if len(c.buf) == 0 && !c.done {
		// Describe each time rather than cache by text: the same FETCH names cursors of other
		// shapes in other transactions on this connection.
		rows, err := c.tx.Query(ctx, fmt.Sprintf(`FETCH FORWARD %d FROM %s`, cursorChunk, c.name), pgx.QueryExecModeDescribeExec)
		if err != nil {
			return row, false, fmt.Errorf("fetch from %s: %w", c.name, err)
		}
		c.buf, err = pgx.CollectRows(rows, c.scan)
		if err != nil {
			return row, false, fmt.Errorf("fetch from %s: %w", c.name, err)
		}
		c.done = len(c.buf) < cursorChunk
	}
	if len(c.buf) == 0 {
		return row, false, nil
	}
	row, c.buf = c.buf[0], c.buf[1:]
	return row, true, nil
}

// streamsUpTo is the log up to a checkpoint, one delivery after another in id order (the order of
// the views' primary keys), each in version order. ORDER BY names the table's columns: a bare
// delivery_id would be the text output column, sorted instead of read from the index. Every event at or before the checkpoint had
// committed before the checkpoint was written, so a snapshot that sees the checkpoint sees them
// all. The position is formatted into the text because cursors take no parameters; it is two
// integers.
func streamsUpToQuery(upTo LogPosition) string {
	return fmt.Sprintf(`SELECT delivery_id::text, tenant, version, type, data, recorded_at FROM events
WHERE (transaction_id, position) <= ('%d'::xid8, %d)
ORDER BY events.delivery_id, events.version`, upTo.TransactionID, upTo.Position)
}

func scanStreamEvent(rows pgx.CollectableRow) (domain.Event, error) {
	var e domain.Event
	var typ string
	err := rows.Scan(&e.DeliveryID, &e.Tenant, &e.Version, &typ, &e.Data, &e.RecordedAt)
	e.Type = domain.EventType(typ)
	e.RecordedAt = e.RecordedAt.UTC()
	return e, err
}

// streamReader groups the rows of streamsUpToQuery into whole streams.
type streamReader struct {
	events  *cursor[domain.Event]
	pending *domain.Event
}

func openStreams(ctx context.Context, tx pgx.Tx, upTo LogPosition) (*streamReader, error) {
	c, err := openCursor(ctx, tx, "verify_streams", streamsUpToQuery(upTo), scanStreamEvent)
	if err != nil {
		return nil, err
	}
	return &streamReader{events: c}, nil
}

// next returns the next whole stream, or nil after the last.
func (r *streamReader) next(ctx context.Context) (*stream, error) {
	var s *stream
	for {
		var e domain.Event
		if r.pending != nil {
			e, r.pending = *r.pending, nil
		} else {
			var ok bool
			var err error
			if e, ok, err = r.events.next(ctx); err != nil {
				return nil, err
			} else if !ok {
				return s, nil
			}
		}
		if s == nil {
			s = &stream{id: e.DeliveryID, tenant: e.Tenant}
		} else if e.DeliveryID != s.id {
			r.pending = &e
			return s, nil
		}
		s.events = append(s.events, e)
	}
}

// diffRows reports every field (tagged db:"column") in which two rows of the same struct type
// differ. Times compare by instant, JSON by content.
func diffRows(key string, live, expected any, report func(Difference)) {
	lv, ev := reflect.ValueOf(live), reflect.ValueOf(expected)
	t := lv.Type()
	for i := 0; i < t.NumField(); i++ {
		col := t.Field(i).Tag.Get("db")
		if col == "" {
			continue
		}
		a, b := lv.Field(i).Interface(), ev.Field(i).Interface()
		if !sameValue(a, b) {
			report(Difference{Key: key, Column: col, Live: render(a), Expected: render(b)})
		}
	}
}

func sameValue(a, b any) bool {
	switch x := a.(type) {
	case time.Time:
		return x.Equal(b.(time.Time))
	case *time.Time:
		y := b.(*time.Time)
		if x == nil || y == nil {
			return x == nil && y == nil
		}
		return x.Equal(*y)
	case json.RawMessage:
		return canonicalJSON(x) == canonicalJSON(b.(json.RawMessage))
	}
	return reflect.DeepEqual(a, b)
}

// canonicalJSON renders a JSON document with sorted keys and no spaces, as jsonb would return
// it in any order.
func canonicalJSON(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v) // a decoded document marshals; maps marshal with sorted keys
	return string(b)
}

func render(v any) string {
	switch x := v.(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case *time.Time:
		if x == nil {
			return "NULL"
		}
		return x.UTC().Format(time.RFC3339Nano)
	case json.RawMessage:
		return canonicalJSON(x)
	case string:
		return fmt.Sprintf("%q", x)
	case domain.State, domain.Priority, domain.ErrorClass:
		return fmt.Sprintf("%q", x)
	}
	return strings.TrimSpace(fmt.Sprint(v))
}

// micro truncates a time to PostgreSQL's precision, so that a folded row equals the stored one.
func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// microPtr is micro for an optional time.
func microPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	m := micro(*t)
	return &m
}

package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// streamReader groups the events of Snapshot.StreamsUpTo into whole streams.
type streamReader struct {
	events  Rows[domain.Event]
	pending *domain.Event
}

// openStreams reads the log up to a checkpoint, one delivery after another in id order (the
// order of the views' primary keys). Every event at or before the checkpoint had committed
// before the checkpoint was written, so a snapshot that sees the checkpoint sees them all.
func openStreams(ctx context.Context, snap Snapshot, upTo LogPosition) (*streamReader, error) {
	events, err := snap.StreamsUpTo(ctx, upTo)
	if err != nil {
		return nil, err
	}
	return &streamReader{events: events}, nil
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
			if e, ok, err = r.events.Next(ctx); err != nil {
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

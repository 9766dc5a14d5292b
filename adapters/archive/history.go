package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/projections"
)

// DeliveryTime is the accept time a delivery id carries: a UUIDv7's first 48 bits are Unix
// milliseconds (commands.DeliveryID). ok is false for an id that is not a UUIDv7.
func DeliveryTime(id string) (t time.Time, ok bool) {
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		return time.Time{}, false
	}
	var ms int64
	for i := range 6 {
		ms = ms<<8 | int64(u[i])
	}
	return time.UnixMilli(ms).UTC(), true
}

// Holding returns the manifests whose [From, To) holds the delivery id's time, since a
// segment holds the streams of the delivery ids of its range; all of them when none does or the
// id carries no time, so a delivery is still found in an archive whose ranges are unusual.
func Holding(ms []Manifest, deliveryID string) []Manifest {
	t, ok := DeliveryTime(deliveryID)
	if !ok {
		return ms
	}
	var in []Manifest
	for _, m := range ms {
		if !t.Before(m.From) && t.Before(m.To) {
			in = append(in, m)
		}
	}
	if len(in) == 0 {
		return ms
	}
	return in
}

// History returns a delivery's archived events, in stream order, and the segments they came
// from. It reads only the segments that hold the id's time (Holding); an id in none of them is
// an error wrapping ErrNotFound.
func History(ctx context.Context, s Store, deliveryID string) ([]Line, []Manifest, error) {
	// A damaged manifest does not hide the others' deliveries; it is named if the delivery is
	// found nowhere else.
	ms, listErr := s.Manifests(ctx)
	if listErr != nil && !errors.Is(listErr, ErrCheckFailed) {
		return nil, nil, listErr
	}
	var lines []Line
	var from []Manifest
	for _, m := range Holding(ms, deliveryID) {
		found := false
		err := s.Lines(ctx, m.ID, func(l Line) error {
			if l.DeliveryID == deliveryID {
				lines = append(lines, l)
				found = true
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("history of %s: %w", deliveryID, err)
		}
		if found {
			from = append(from, m)
		}
	}
	if len(lines) == 0 && listErr != nil {
		return nil, nil, fmt.Errorf("delivery %s: in no readable segment: %w", deliveryID, listErr)
	}
	if len(lines) == 0 {
		return nil, nil, fmt.Errorf("delivery %s: %w", deliveryID, ErrNotFound)
	}
	slices.SortStableFunc(lines, func(a, b Line) int { return a.Version - b.Version })
	return lines, from, nil
}

// errStopRows ends the read of the rows when the archive ran out first.
var errStopRows = errors.New("archive ended before the rows")

// CompareRows reads segment id from the archive beside the events it was made of (read again,
// from the partition about to be dropped) and fails, wrapping ErrCheckFailed, at the first line
// that differs from its row, or when one side has more. It is the check "against the rows" a
// retention pass runs after Put and before it drops anything; like Put it streams.
func CompareRows(ctx context.Context, s Store, id string, events func(emit func(projections.LoggedEvent) error) error) error {
	var rowsErr error
	next, stop := iter.Pull(func(yield func(projections.LoggedEvent) bool) {
		rowsErr = events(func(e projections.LoggedEvent) error {
			if !yield(e) {
				return errStopRows
			}
			return nil
		})
	})
	defer stop()
	var n int64
	err := s.Lines(ctx, id, func(got Line) error {
		n++
		e, ok := next()
		if !ok {
			if rowsErr != nil {
				return fmt.Errorf("read rows: %w", rowsErr)
			}
			return fmt.Errorf("%w: segment %s has more lines than the rows (line %d, position %d)", ErrCheckFailed, id, n, got.Position)
		}
		want, err := LineOf(e)
		if err != nil {
			return err
		}
		if !sameLine(got, want) {
			return fmt.Errorf("%w: segment %s line %d is position %d of delivery %s version %d; the row says position %d of delivery %s version %d (or its data differs)",
				ErrCheckFailed, id, n, got.Position, got.DeliveryID, got.Version, want.Position, want.DeliveryID, want.Version)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("compare segment %s with its rows: %w", id, err)
	}
	if _, more := next(); more {
		return fmt.Errorf("compare segment %s with its rows: %w: the rows have more than the segment's %d lines", id, ErrCheckFailed, n)
	}
	if rowsErr != nil && !errors.Is(rowsErr, errStopRows) {
		return fmt.Errorf("compare segment %s with its rows: read rows: %w", id, rowsErr)
	}
	return nil
}

// sameLine compares two lines as their encodings would: data by its compact JSON (the
// database's jsonb text has spaces the file's encoding drops), times as instants.
func sameLine(a, b Line) bool {
	ad, aerr := json.Marshal(a.Data)
	bd, berr := json.Marshal(b.Data)
	if aerr != nil || berr != nil || string(ad) != string(bd) {
		return false
	}
	return a.Position == b.Position && a.TransactionID == b.TransactionID && a.DeliveryID == b.DeliveryID &&
		a.Tenant == b.Tenant && a.Version == b.Version && a.Type == b.Type && a.State == b.State &&
		a.RecordedAt.Equal(b.RecordedAt) && a.IdempotencyKey == b.IdempotencyKey
}

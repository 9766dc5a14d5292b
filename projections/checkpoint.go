package projections

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errCheckpointMoved: the checkpoint moved between reading a batch and locking it; the batch
// is dropped and read again.
var errCheckpointMoved = errors.New("checkpoint moved")

// applyBatch applies batch to table and moves the checkpoint name past it, both in tx, provided
// that the checkpoint is still at from (the position the batch was read after). The checkpoint
// row is locked first: two projectors, or a projector and the switch of a rebuild, take turns
// instead of applying the same events twice.
func applyBatch(ctx context.Context, tx Tx, p Projection, name, table string, from LogPosition, batch []LoggedEvent) error {
	cur, err := tx.CheckpointLock(ctx, name)
	if err != nil {
		return err
	}
	if cur.At != from {
		return errCheckpointMoved
	}
	if err := p.Apply(ctx, tx, table, batch); err != nil {
		return fmt.Errorf("apply %d events after %s to %s: %w", len(batch), from, name, err)
	}
	version := cur.Version
	if cur.Events == 0 {
		// An empty view is the same whatever code built it: it adopts this code's version.
		version = p.Version()
	}
	if err := tx.CheckpointAdvance(ctx, name, batch[len(batch)-1], len(batch), version); err != nil {
		return fmt.Errorf("advance checkpoint of %s: %w", name, err)
	}
	return nil
}

// ViewPosition says how far a view has followed the log.
type ViewPosition struct {
	// Name is the projection's name.
	Name string
	// Position is the log position of the last event applied.
	Position LogPosition
	// Version is the projection code version that built the view.
	Version int
	// Events is the number of events applied since the view was built from position zero.
	Events int64
	// UpdatedAt is when the checkpoint last moved.
	UpdatedAt time.Time
	// LagEvents is the number of committed events the view has not applied yet.
	LagEvents int64
	// LagSeconds is the age of the oldest event the view has not applied (0 when none).
	LagSeconds float64
}

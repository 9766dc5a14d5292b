package projections

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// checkpoint is a row of projection_checkpoints.
type checkpoint struct {
	at      LogPosition
	events  int64
	version int
}

// Statements on projection_checkpoints.
const (
	checkpointGet          = `SELECT transaction_id::text, position, events, version FROM projection_checkpoints WHERE name = $1`
	checkpointGetForUpdate = checkpointGet + ` FOR UPDATE`
	checkpointAdvance      = `UPDATE projection_checkpoints SET transaction_id = $2::text::xid8, position = $3,
	events = events + $4, version = $5, last_recorded_at = $6, updated_at = now()
WHERE name = $1`
	checkpointEnsure = `INSERT INTO projection_checkpoints (name, version) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`
	checkpointReset  = `INSERT INTO projection_checkpoints (name, version) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET transaction_id = '0', position = 0, events = 0, version = excluded.version,
	last_recorded_at = NULL, updated_at = now()`
	// checkpointMove gives the live view the shadow's checkpoint, at the switch of a rebuild.
	checkpointMove = `UPDATE projection_checkpoints AS live SET transaction_id = s.transaction_id,
	position = s.position, events = s.events, version = s.version, last_recorded_at = s.last_recorded_at,
	updated_at = now()
FROM projection_checkpoints AS s WHERE live.name = $1 AND s.name = $2`
	checkpointDelete = `DELETE FROM projection_checkpoints WHERE name = $1`
)

// errNoCheckpoint: the projection has no checkpoint row (the schema is behind, or a shadow was
// never started).
var errNoCheckpoint = errors.New("no checkpoint")

// querier is a pool, a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func getCheckpoint(ctx context.Context, q querier, name string, forUpdate bool) (checkpoint, error) {
	query := checkpointGet
	if forUpdate {
		query = checkpointGetForUpdate
	}
	var cp checkpoint
	var txid string
	err := q.QueryRow(ctx, query, name).Scan(&txid, &cp.at.Position, &cp.events, &cp.version)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, fmt.Errorf("projection %s: %w", name, errNoCheckpoint)
	}
	if err != nil {
		return cp, fmt.Errorf("read checkpoint of %s: %w", name, err)
	}
	cp.at.TransactionID, err = strconv.ParseUint(txid, 10, 64)
	return cp, err
}

// commitAsyncSet turns off the wait for the commit's WAL flush in a batch transaction. A view is
// derived: a crash that loses the last batches loses their rows and their checkpoint together,
// and the projector applies them again from the log. The fsync per batch was most of a batch's
// time.
const commitAsyncSet = `SET LOCAL synchronous_commit = off`

// errCheckpointMoved: the checkpoint moved between reading a batch and locking it; the batch
// is dropped and read again.
var errCheckpointMoved = errors.New("checkpoint moved")

// applyBatch applies batch to table and moves the checkpoint name past it, both in tx, provided
// that the checkpoint is still at from (the position the batch was read after). The checkpoint
// row is locked first: two projectors, or a projector and the switch of a rebuild, take turns
// instead of applying the same events twice.
func applyBatch(ctx context.Context, tx pgx.Tx, p Projection, name, table string, from LogPosition, batch []LoggedEvent) error {
	cur, err := getCheckpoint(ctx, tx, name, true)
	if err != nil {
		return err
	}
	if cur.at != from {
		return errCheckpointMoved
	}
	if err := p.Apply(ctx, tx, table, batch); err != nil {
		return fmt.Errorf("apply %d events after %s to %s: %w", len(batch), from, name, err)
	}
	version := cur.version
	if cur.events == 0 {
		// An empty view is the same whatever code built it: it adopts this code's version.
		version = p.Version()
	}
	last := batch[len(batch)-1]
	_, err = tx.Exec(ctx, checkpointAdvance, name, strconv.FormatUint(last.At.TransactionID, 10), last.At.Position,
		len(batch), version, last.RecordedAt)
	if err != nil {
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

// checkpointLagGet reads a checkpoint and how far the log has moved past it. The age is measured
// from the oldest unapplied event, so it says how stale the view may be.
const checkpointLagGet = `SELECT c.transaction_id::text, c.position, c.version, c.events, c.updated_at,
	(SELECT count(*) FROM events e WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position)),
	(SELECT extract(epoch FROM now() - e.recorded_at)::float8 FROM events e
	 WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position)
	 ORDER BY e.transaction_id, e.position LIMIT 1)
FROM projection_checkpoints c WHERE c.name = $1`

// viewPosition reads a projection's checkpoint and lag.
func viewPosition(ctx context.Context, q querier, name string) (ViewPosition, error) {
	v := ViewPosition{Name: name}
	var txid string
	var age *float64
	err := q.QueryRow(ctx, checkpointLagGet, name).Scan(&txid, &v.Position.Position, &v.Version, &v.Events,
		&v.UpdatedAt, &v.LagEvents, &age)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, fmt.Errorf("projection %s: %w", name, errNoCheckpoint)
	}
	if err != nil {
		return v, fmt.Errorf("read position of %s: %w", name, err)
	}
	v.UpdatedAt = v.UpdatedAt.UTC()
	if age != nil && *age > 0 {
		v.LagSeconds = *age
	}
	v.Position.TransactionID, err = strconv.ParseUint(txid, 10, 64)
	return v, err
}

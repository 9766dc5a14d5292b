package projections

import (
	"context"
	"errors"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// Store is the database the views live in, as the projections use it; postgres.Views
// implements it. Every statement on the views, on projection_checkpoints and on the events they
// read is the adapter's: the projections hold the folds, the order of batches and checkpoints,
// and the steps of a rebuild and a verify, and ask for each read and write by name, the way
// River keeps its runtime SQL behind its driver's executor.
type Store interface {
	// CheckpointEnsure creates name's checkpoint at the start of the log, built by version,
	// unless it exists.
	CheckpointEnsure(ctx context.Context, name string, version int) error
	// CheckpointGet reads name's checkpoint; ErrNoCheckpoint when there is none.
	CheckpointGet(ctx context.Context, name string) (Checkpoint, error)
	// Position reads name's checkpoint and how far the log has moved past it.
	Position(ctx context.Context, name string) (ViewPosition, error)
	// InTx runs fn in one transaction, committed when fn returns nil and rolled back otherwise.
	InTx(ctx context.Context, opts TxOptions, fn func(Tx) error) error
	// Snapshot runs fn in one read-only snapshot in which table's rows and every checkpoint
	// agree. The table is locked against a rebuild's switch before the snapshot is taken, and
	// the snapshot holds no transaction id, so it does not hold back the log's followers.
	Snapshot(ctx context.Context, table string, fn func(Snapshot) error) error
	// RebuildLock takes the lock that lets one rebuild of name run at a time; ok is false when
	// another holds it. release gives it back.
	RebuildLock(ctx context.Context, name string) (release func(), ok bool, err error)
	// CountersTotals sums the counters view over tenants: deliveries per channel and state.
	CountersTotals(ctx context.Context) ([]CountRow, error)
}

// TxOptions are the settings of a Store.InTx transaction.
type TxOptions struct {
	// AsyncCommit lets the commit return before its WAL flush. A view is derived: a crash that
	// loses the last batches loses their rows and their checkpoint together, and the projector
	// applies them again from the log. The fsync per batch was most of a batch's time.
	AsyncCommit bool
	// LockTimeout bounds each wait for a lock; zero waits as long as it takes. A wait that
	// times out, or a lost deadlock, fails with an error wrapping ErrBusy.
	LockTimeout time.Duration
}

// Errors of a Store.
var (
	// ErrNoCheckpoint: the projection has no checkpoint row (the schema is behind, or a shadow
	// was never started).
	ErrNoCheckpoint = errors.New("no checkpoint")
	// ErrBusy: a lock was not granted within TxOptions.LockTimeout, or a deadlock was lost;
	// the transaction may simply be tried again.
	ErrBusy = errors.New("lock not granted in time")
)

// Checkpoint is how far one view (or a rebuild's shadow) has applied the log.
type Checkpoint struct {
	// At is the position of the last event applied.
	At LogPosition
	// Events counts the events applied since the view was built from position zero.
	Events int64
	// Version is the projection code version that built the view.
	Version int
}

// Tx is one transaction on the views: the writes of a batch with its checkpoint, and the steps
// of a rebuild. Each table argument names the live view or a rebuild's shadow.
type Tx interface {
	// CheckpointLock reads name's checkpoint and locks it to the end of the transaction: two
	// projectors, or a projector and a rebuild's switch, take turns on it.
	CheckpointLock(ctx context.Context, name string) (Checkpoint, error)
	// CheckpointAdvance moves name's checkpoint to last (the batch's last event), adds events to
	// its count and records version as the code that built it. A zero last.RecordedAt keeps the
	// recorded time of the event applied before (a position moved past events that left the log).
	CheckpointAdvance(ctx context.Context, name string, last LoggedEvent, events int, version int) error
	// CheckpointReset puts name's checkpoint (created if need be) back at the start, at version.
	CheckpointReset(ctx context.Context, name string, version int) error
	// CheckpointMove gives live the checkpoint of shadow and deletes shadow's.
	CheckpointMove(ctx context.Context, live, shadow string) error

	// ShadowMatches reports whether shadow exists with the columns of live (a migration may
	// have run since a rebuild started it).
	ShadowMatches(ctx context.Context, live, shadow string) (bool, error)
	// ShadowCreate drops shadow if it exists and creates it empty, like live.
	ShadowCreate(ctx context.Context, live, shadow string) error
	// ShadowSwitch puts shadow in live's place, in one step for readers, and drops the old
	// table; the indexes take the names the migrations gave live's.
	ShadowSwitch(ctx context.Context, live, shadow string) error

	// StatusRowsGet returns the rows of table for the deliveries ids (those it has).
	StatusRowsGet(ctx context.Context, table string, ids []string) ([]StatusRow, error)
	// StatusRowsInsert writes new rows.
	StatusRowsInsert(ctx context.Context, table string, rows []StatusRow) error
	// StatusRowsUpdate overwrites rows, each only where the stored row is still at expected[i];
	// it returns how many were.
	StatusRowsUpdate(ctx context.Context, table string, rows []StatusRow, expected []int) (int64, error)

	// DLQRowsPresent returns which of ids have a row in table.
	DLQRowsPresent(ctx context.Context, table string, ids []string) ([]string, error)
	// DLQRowsDelete deletes the rows of ids.
	DLQRowsDelete(ctx context.Context, table string, ids []string) error
	// DLQRowsUpsert writes rows, each replacing only an older version of the same delivery; it
	// returns how many were written.
	DLQRowsUpsert(ctx context.Context, table string, rows []DLQRow) (int64, error)

	// StreamsGet returns the events of each delivery ids[i] up to version upTo[i], ordered by
	// delivery id and version.
	StreamsGet(ctx context.Context, ids []string, upTo []int32) ([]domain.Event, error)
	// StreamsContextGet returns, for each delivery ids[i], its accepted event and its event at
	// version before[i] (the one before a batch), without their data beyond the channel.
	StreamsContextGet(ctx context.Context, ids []string, before []int32) ([]ContextEvent, error)
	// StreamsStateGet returns, for each delivery ids[i], the type of its latest event before
	// version before[i] whose type is not one of skip (the event that says its state).
	StreamsStateGet(ctx context.Context, ids []string, before []int32, skip []string) (map[string]domain.EventType, error)

	// CountersAdd adds each row's Deliveries and Entered to table's counts of its key.
	CountersAdd(ctx context.Context, table string, rows []CountRow) error
	// ArchivedCounters sums, per key, the counts the archived segments took with them: a
	// rebuild of the whole-life counters starts from them, since their events are no longer in
	// the log. It fails with ErrBusy while a segment is archiving (its events have left the log
	// and its counts are not recorded yet).
	ArchivedCounters(ctx context.Context) ([]CountRow, error)
}

// ContextEvent is an event of a stream, reduced to what the counters need of it.
type ContextEvent struct {
	DeliveryID string
	Version    int
	Type       domain.EventType
	// Channel is the accepted event's channel; empty for other events.
	Channel string
}

// Snapshot is a read-only snapshot of a view and the log, for Verify.
//
// The log holds the hot window only: the retention pass moves old partitions to the archive. A
// view's rows of the deliveries that left are outside the comparison (the lists leave them out),
// and the whole-life counters are compared with the log's fold plus what the archived segments
// took with them (ArchivedCounters).
type Snapshot interface {
	// Position reads name's checkpoint and lag as the snapshot sees them.
	Position(ctx context.Context, name string) (ViewPosition, error)
	// StatusRowsList returns table's rows in delivery id order, but those of deliveries in an
	// archived (or archiving) segment's range: the view may keep them a while after their events
	// left (its partitions leave once no older partition of the log stays).
	StatusRowsList(ctx context.Context, table string) (Rows[StatusRow], error)
	// DLQRowsList returns table's rows in delivery id order, but those of deliveries in an
	// archived (or archiving) segment's range, as StatusRowsList.
	DLQRowsList(ctx context.Context, table string) (Rows[DLQRow], error)
	// StreamsUpTo returns every event at or before upTo, ordered by delivery id (the order of
	// StatusRowsList and DLQRowsList) and version.
	StreamsUpTo(ctx context.Context, upTo LogPosition) (Rows[domain.Event], error)
	// CountersList returns table's rows.
	CountersList(ctx context.Context, table string) ([]CountRow, error)
	// ArchivedCounters is Tx.ArchivedCounters as the snapshot sees the segments (ErrBusy while
	// one is archiving: no fold could be compared then).
	ArchivedCounters(ctx context.Context) ([]CountRow, error)
}

// Rows is a result read as it is consumed: a view and the log are walked side by side, and
// neither fits in memory as the log grows.
type Rows[T any] interface {
	// Next returns the next row; ok is false after the last one.
	Next(ctx context.Context) (row T, ok bool, err error)
}

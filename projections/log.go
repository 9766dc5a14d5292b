package projections

import (
	"context"
	"strconv"

	"github.com/deliveryledger/ledger/domain"
)

// Log is the events log as the projections follow it: in commit-safe order, never skipping an
// event whose transaction committed late. postgres.EventStore implements it.
type Log interface {
	// ReadLog returns up to limit events after `after`, in log order. Only transactions below
	// the oldest one still running are visible, so a transaction that took its position early
	// but commits late is read when it commits, before anything after it.
	ReadLog(ctx context.Context, after LogPosition, limit int) ([]LoggedEvent, error)
}

// LogPosition is a place in the global log in commit-safe order: (transaction id, position).
type LogPosition struct {
	TransactionID uint64
	Position      int64
}

// String renders the position as "txid:position".
func (p LogPosition) String() string {
	return strconv.FormatUint(p.TransactionID, 10) + ":" + strconv.FormatInt(p.Position, 10)
}

// LoggedEvent is an event with its place in the log.
type LoggedEvent struct {
	domain.Event
	At LogPosition
}

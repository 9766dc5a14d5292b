package projections

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/domain"
)

// Limits of a page.
const (
	DefaultPageLimit = 50
	MaxPageLimit     = 500
)

// Filter selects the deliveries of a list. Zero fields do not filter.
type Filter struct {
	State     domain.State
	Channel   string
	Recipient string
	// FailureClass selects the DLQ view's entries of one failure class; the status view has no
	// such column (a list of it with one is an error).
	FailureClass domain.ErrorClass
	// Since and Until bound accepted_at: Since <= accepted_at < Until.
	Since, Until time.Time
	// Limit is the page size (1..MaxPageLimit); zero means DefaultPageLimit.
	Limit int
	// After continues a list after the last item of the previous page.
	After *Cursor
}

// Cursor is a place in a list ordered by (accepted_at, id), newest first. Both are fixed when a
// delivery is accepted, so deliveries that arrive while a client pages never shift the pages:
// the next page is "everything older than the last item", whatever was added meanwhile.
type Cursor struct {
	AcceptedAt time.Time
	ID         string
}

// cursorWire is a cursor's encoded form: microseconds keep the database's precision exactly.
type cursorWire struct {
	At int64  `json:"a"`
	ID string `json:"i"`
}

// String encodes the cursor as an opaque token.
func (c Cursor) String() string {
	b, _ := json.Marshal(cursorWire{At: c.AcceptedAt.UnixMicro(), ID: c.ID}) // an int and a string marshal
	return base64.RawURLEncoding.EncodeToString(b)
}

// ErrBadCursor is returned by ParseCursor for a token it did not make.
var ErrBadCursor = errors.New("not a cursor this API returned")

// maxCursorMicros is the year 10000 in Unix microseconds.
const maxCursorMicros = 253402300800 * 1_000_000

// ParseCursor decodes a token made by Cursor.String.
func ParseCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	var w cursorWire
	// A time outside [1970, 10000) was not made here, and PostgreSQL's timestamps would refuse
	// the extremes of an int64.
	if err := json.Unmarshal(b, &w); err != nil || w.At <= 0 || w.At >= maxCursorMicros {
		return Cursor{}, ErrBadCursor
	}
	// The id travels in its canonical form: uuid.Parse takes spellings PostgreSQL refuses.
	id, err := uuid.Parse(w.ID)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	return Cursor{AcceptedAt: time.UnixMicro(w.At).UTC(), ID: id.String()}, nil
}

// Page is one page of a list, with the position of the view it was read from.
type Page[T any] struct {
	Items []T
	// Next continues the list; nil on the last page.
	Next *Cursor
	View TenantView
}

// Stats are a tenant's counters.
type Stats struct {
	Counts []CountRow
	View   TenantView
}

// TenantView says how far a view is behind one tenant's own history, and nothing about any
// other tenant's: not the log's global position, not the events others append.
type TenantView struct {
	// Name is the projection's name.
	Name string
	// Version is the projection code version that built the view.
	Version int
	// Pending is the number of the tenant's committed events the view has not applied yet,
	// counted up to MaxPending (a larger number is reported as MaxPending).
	Pending int64
}

// MaxPending bounds the count of a tenant's events a view has not applied: counting them reads
// the log past the view's checkpoint, which is short unless the projector has stopped.
const MaxPending = 1000

// PageLimit is the page size f asks for, within the limits.
func (f Filter) PageLimit() int {
	if f.Limit <= 0 {
		return DefaultPageLimit
	}
	return min(f.Limit, MaxPageLimit)
}

// CutPage cuts the extra row a list reads (PageLimit+1) to know whether another page follows,
// and returns the cursor of the next page, nil on the last.
func CutPage[T any](items []T, f Filter, cursorOf func(T) Cursor) ([]T, *Cursor) {
	if len(items) <= f.PageLimit() {
		return items, nil
	}
	items = items[:f.PageLimit()]
	c := cursorOf(items[len(items)-1])
	return items, &c
}

// DueRow is a delivery the status view says is due a look at its provider.
type DueRow struct {
	ID       string
	Provider string
	State    domain.State
	CheckAt  time.Time
	GiveUpAt *time.Time
}

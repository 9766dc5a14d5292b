// Package archive keeps the events that leave the database: a time partition of the events
// table, before it is dropped, is written to an archive as JSON lines (the `ledger export`
// format) compressed with zstd, read back and checked, and described by a manifest that is
// written last, as the segment's commit marker. Store is the port; Dir, a directory on a file
// system, is its first adapter (docs/design.md, "The archive").
package archive

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/deliveryledger/ledger/projections"
)

// Format is the version of the segment format a manifest describes: JSON lines of Line, one
// zstd stream, a manifest of Manifest. A reader refuses a format it does not know.
const Format = 1

// ErrCheckFailed is wrapped by every error that says an archived segment is not what it should
// be: a read-back after Put, or Verify, found a file that differs from what was written or from
// its manifest. The retention pass drops nothing on it and raises an alert.
var ErrCheckFailed = errors.New("archive check failed")

// ErrExists is returned by Put of a segment whose manifest exists: an archived segment is never
// written twice, so a retention pass that runs again after a crash learns that the partition is
// archived already.
var ErrExists = errors.New("segment already archived")

// ErrNotFound is wrapped when a segment (no manifest of that id) or a delivery (in no segment)
// is not in the archive.
var ErrNotFound = errors.New("not in the archive")

// Segment names what leaves: one partition of the events table, covering delivery ids whose
// UUIDv7 time is in [From, To). A delivery's events all live in the partition of its id, so a
// segment holds whole streams. A zero From is the open lower bound: the table's first partition,
// which holds everything from before the table was partitioned.
type Segment struct {
	// ID names the segment in the archive and its files' names: letters, digits, '.', '_' and
	// '-', not starting with '.', at most 200 characters.
	ID        string
	Partition string
	From, To  time.Time
}

// segmentID is what an ID may be: safe as a file name and as an object key.
var segmentID = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$`)

// Validate joins every problem of the segment's description.
func (s Segment) Validate() error {
	var errs []error
	if !segmentID.MatchString(s.ID) {
		errs = append(errs, fmt.Errorf("segment id %q: want 1 to 200 letters, digits, '.', '_' or '-', not starting with '.'", s.ID))
	}
	if s.To.IsZero() || !s.From.IsZero() && !s.To.After(s.From) {
		errs = append(errs, fmt.Errorf("segment %q: [from %s, to %s) is not a time range", s.ID,
			s.From.Format(time.RFC3339), s.To.Format(time.RFC3339)))
	}
	return errors.Join(errs...)
}

// Manifest is written next to the segment's file, after the file has been read back and
// checked: its presence is what says the segment is archived.
type Manifest struct {
	ID        string    `json:"id"`
	Partition string    `json:"partition"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	// File is the data file's name relative to the archive's root, e.g. "<id>.jsonl.zst".
	File string `json:"file"`
	// Bytes is the size of the compressed file.
	Bytes int64 `json:"bytes"`
	// SHA256 is the hex SHA-256 of the compressed file, as `sha256sum FILE` prints it.
	SHA256 string `json:"sha256"`
	// LinesSHA256 is the hex SHA-256 of the uncompressed JSON lines, as
	// `zstd -dc FILE | sha256sum` prints it: it survives a recompression.
	LinesSHA256 string `json:"lines_sha256"`
	Events      int64  `json:"events"`
	// Deliveries counts the streams that start in the segment (their version 1 event); since a
	// segment holds whole streams, that is its deliveries.
	Deliveries int64 `json:"deliveries"`
	// Tenants is sorted and distinct.
	Tenants []string `json:"tenants"`
	// Counts is the events per tenant.
	Counts map[string]int64 `json:"counts"`
	// FirstPosition and LastPosition are those of the first and last line, in log order
	// (transaction id, position), the order of the file.
	FirstPosition int64 `json:"first_position"`
	LastPosition  int64 `json:"last_position"`
	// FirstRecordedAt and LastRecordedAt are those of the first and last line.
	FirstRecordedAt time.Time `json:"first_recorded_at"`
	LastRecordedAt  time.Time `json:"last_recorded_at"`
	CreatedAt       time.Time `json:"created_at"`
	// Format is the segment format's version, Format.
	Format int `json:"format"`
}

// Store is the port: where archived segments live. Dir is its first adapter; an S3-compatible
// store is the production target (docs/design.md, "The archive").
type Store interface {
	// Put writes seg's events (emit is called by events, once per event, in log order; events is
	// called once) as JSON lines compressed with zstd, reads the written file back, checks it
	// (decompresses, SHA-256 of the file and of the lines, count, each line decodes to the event
	// given) and only then writes the manifest, atomically (temp file + fsync + rename; the data
	// file fsynced too). A failed check leaves no manifest (and removes the partial file) and
	// returns an error wrapping ErrCheckFailed. Put of an ID whose manifest exists returns
	// ErrExists. An error from events or emit's caller stops Put, leaving no manifest.
	Put(ctx context.Context, seg Segment, events func(emit func(projections.LoggedEvent) error) error) (Manifest, error)
	// Manifests lists every manifest, ordered by From (then ID). A manifest that cannot be read
	// as one is left out and named in the error, which then wraps ErrCheckFailed while the
	// others are still returned: a verify reports every damage, not the first.
	Manifests(ctx context.Context) ([]Manifest, error)
	// Verify re-reads a segment and checks it against its manifest (file SHA-256, size, lines
	// SHA-256, counts, first/last positions); the error wraps ErrCheckFailed on a mismatch and
	// ErrNotFound when no manifest has the id.
	Verify(ctx context.Context, id string) (Manifest, error)
	// Lines calls fn for each line of the segment, in order. An error of fn stops it and is
	// returned; a file that does not match its manifest (seen once every line is read) returns
	// an error wrapping ErrCheckFailed.
	Lines(ctx context.Context, id string, fn func(Line) error) error
	// Discard moves a segment aside: it is no longer listed, read or answered as kept, and a
	// Put of its id writes it afresh; its files stay, renamed, for an operator to inspect. The
	// retention pass discards a segment that did not match the rows it was read from, since the
	// partition goes back to the hot store, where it may change before it leaves again. A
	// segment that does not exist is no error.
	Discard(ctx context.Context, id string) error
}

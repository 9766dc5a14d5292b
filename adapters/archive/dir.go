package archive

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/deliveryledger/ledger/projections"
)

// The files of segment ID in a Dir's root: the data, then its manifest, written last.
const (
	dataSuffix     = ".jsonl.zst"
	manifestSuffix = ".manifest.json"
)

// fileMode is a segment's files': the group (auditors, a backup job) may read them, where a
// temporary file's 0600 would leave them to the ledger's user alone.
const fileMode = 0o640

// Dir is the archive in a directory of a local (or mounted) file system: segment ID is the file
// ID.jsonl.zst and its manifest ID.manifest.json, side by side in Root. Put of one ID must not run
// in two processes at once (the retention pass runs alone); Puts of different IDs may.
type Dir struct {
	Root string

	// afterWrite, when set (tests), runs on the written data file before it is read back.
	afterWrite func(path string) error
	// now stamps manifests; time.Now unless a test sets it.
	now func() time.Time
}

var _ Store = (*Dir)(nil)

// NewDir opens the archive in root for writing: it creates root if missing and checks that a
// file can be created there, so a retention pass learns of a read-only or missing mount before it
// reads a partition, not after.
func NewDir(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o750); err != nil {
		return nil, fmt.Errorf("archive directory: %w", err)
	}
	f, err := os.CreateTemp(root, ".writable-*")
	if err != nil {
		return nil, fmt.Errorf("archive directory %s is not writable: %w", root, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return nil, fmt.Errorf("archive directory %s: %w", root, err)
	}
	return &Dir{Root: root}, nil
}

// OpenDir opens an existing archive for reading (verify, show): unlike NewDir it creates
// nothing, so a mistyped path is an error and a read-only copy of an archive can be checked.
func OpenDir(root string) (*Dir, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("archive directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("archive directory %s is not a directory", root)
	}
	return &Dir{Root: root}, nil
}

func (d *Dir) manifestPath(id string) string { return filepath.Join(d.Root, id+manifestSuffix) }

func (d *Dir) clock() time.Time {
	if d.now != nil {
		return d.now()
	}
	return time.Now()
}

// Put implements Store.
func (d *Dir) Put(ctx context.Context, seg Segment, events func(emit func(projections.LoggedEvent) error) error) (m Manifest, err error) {
	if err := seg.Validate(); err != nil {
		return Manifest{}, fmt.Errorf("put segment: %w", err)
	}
	switch _, err := os.Stat(d.manifestPath(seg.ID)); {
	case err == nil:
		return Manifest{}, fmt.Errorf("put segment %s: %w", seg.ID, ErrExists)
	case !errors.Is(err, fs.ErrNotExist):
		return Manifest{}, fmt.Errorf("put segment %s: %w", seg.ID, err)
	}
	f, err := os.CreateTemp(d.Root, "."+seg.ID+".*.tmp")
	if err != nil {
		return Manifest{}, fmt.Errorf("put segment %s: %w", seg.ID, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil && tmp != "" {
			os.Remove(tmp) // the partial file: nothing may be left that looks archived
		}
	}()
	written, err := writeSegment(ctx, f, events)
	if err == nil {
		err = f.Chmod(fileMode)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("put segment %s: %w", seg.ID, err)
	}
	if d.afterWrite != nil {
		if err := d.afterWrite(tmp); err != nil {
			return Manifest{}, fmt.Errorf("put segment %s: %w", seg.ID, err)
		}
	}
	read, err := readFile(ctx, tmp, func(Line) error { return nil })
	if err != nil {
		return Manifest{}, fmt.Errorf("put segment %s: read back: %w", seg.ID, err)
	}
	if diffs := written.diff(read); len(diffs) > 0 {
		return Manifest{}, fmt.Errorf("put segment %s: read back: %w: %s", seg.ID, ErrCheckFailed, strings.Join(diffs, "; "))
	}
	file := seg.ID + dataSuffix
	if err := os.Rename(tmp, filepath.Join(d.Root, file)); err != nil {
		return Manifest{}, fmt.Errorf("put segment %s: %w", seg.ID, err)
	}
	tmp = filepath.Join(d.Root, file) // a manifest that fails to commit takes its data along
	if err := syncDir(d.Root); err != nil {
		return Manifest{}, fmt.Errorf("put segment %s: %w", seg.ID, err)
	}
	m = Manifest{ID: seg.ID, Partition: seg.Partition, From: seg.From.UTC(), To: seg.To.UTC(), File: file,
		Bytes: read.Bytes, SHA256: read.SHA256, LinesSHA256: read.LinesSHA256, Events: read.Events,
		Deliveries: read.Deliveries, Tenants: tenants(read.Counts), Counts: read.Counts,
		FirstPosition: read.FirstPosition, LastPosition: read.LastPosition,
		FirstRecordedAt: read.FirstRecordedAt, LastRecordedAt: read.LastRecordedAt,
		CreatedAt: d.clock().UTC(), Format: Format}
	if m.Counts == nil {
		m.Counts, m.Tenants = map[string]int64{}, []string{}
	}
	if err := d.writeManifest(m); err != nil {
		if errors.Is(err, ErrExists) {
			tmp = "" // another Put of the ID committed first: the data file is its now
		}
		return Manifest{}, fmt.Errorf("put segment %s: %w", seg.ID, err)
	}
	return m, nil
}

// writeSegment streams the events into f through a JSON line writer, a buffer, a zstd encoder
// and a buffer, hashing the lines and the compressed bytes on the way, and fsyncs f.
func writeSegment(ctx context.Context, f *os.File, events func(emit func(projections.LoggedEvent) error) error) (tally, error) {
	file := newCountingHash()
	fileBuf := bufio.NewWriterSize(io.MultiWriter(f, file), 1<<16)
	// One goroutine and a 1 MiB window: the retention pass runs beside the ledger's other roles
	// under its memory limit, and JSON lines repeat within a few lines, not megabytes (a million
	// events: 9 MiB of heap at most and 12 MB on disk, against 36 MiB and 16 MB with the default
	// 8 MiB window).
	zw, err := zstd.NewWriter(fileBuf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		return tally{}, fmt.Errorf("zstd writer: %w", err)
	}
	lines := newCountingHash()
	lineBuf := bufio.NewWriterSize(io.MultiWriter(zw, lines), 1<<16)
	lw := NewLineWriter(lineBuf)
	var t tally
	err = events(func(e projections.LoggedEvent) error {
		if t.Events%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		l, err := LineOf(e)
		if err != nil {
			return err
		}
		if err := lw.Write(l); err != nil {
			return err
		}
		t.add(l)
		return nil
	})
	if err != nil {
		zw.Close()
		return t, fmt.Errorf("write events: %w", err)
	}
	if err := lineBuf.Flush(); err != nil {
		return t, fmt.Errorf("write events: %w", err)
	}
	if err := zw.Close(); err != nil {
		return t, fmt.Errorf("write events: zstd: %w", err)
	}
	if err := fileBuf.Flush(); err != nil {
		return t, fmt.Errorf("write events: %w", err)
	}
	if err := f.Sync(); err != nil {
		return t, fmt.Errorf("write events: fsync: %w", err)
	}
	t.Bytes, t.SHA256, t.LinesSHA256 = file.n, file.sum(), lines.sum()
	return t, nil
}

// readFile scans the segment file at path (see scan), stopping when ctx ends.
func readFile(ctx context.Context, path string, fn func(Line) error) (tally, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return tally{}, fmt.Errorf("%w: data file %s is missing", ErrCheckFailed, filepath.Base(path))
	}
	if err != nil {
		return tally{}, err
	}
	defer f.Close()
	var n int64
	return scan(f, func(l Line) error {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return fn(l)
	})
}

// writeManifest commits the segment: the manifest goes to a temporary file, is fsynced, and is
// linked under its name, which fails rather than replace a manifest that appeared meanwhile.
func (d *Dir) writeManifest(m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	f, err := os.CreateTemp(d.Root, "."+m.ID+".*.manifest.tmp")
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Chmod(fileMode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	if err := os.Link(tmp, d.manifestPath(m.ID)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return ErrExists
		}
		return fmt.Errorf("write manifest: %w", err)
	}
	if err := syncDir(d.Root); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}

// syncDir fsyncs a directory, so that a rename or link in it survives a crash.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// readManifest reads segment id's manifest; ErrNotFound when there is none, ErrCheckFailed when
// it does not decode or names another segment or a file outside the root.
func (d *Dir) readManifest(id string) (Manifest, error) {
	if !segmentID.MatchString(id) {
		return Manifest{}, fmt.Errorf("segment %q: %w (not a segment id)", id, ErrNotFound)
	}
	b, err := os.ReadFile(d.manifestPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("segment %s in %s: %w", id, d.Root, ErrNotFound)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("segment %s: %w", id, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("segment %s: %w: manifest does not decode: %v", id, ErrCheckFailed, err)
	}
	var bad []string
	if m.ID != id {
		bad = append(bad, fmt.Sprintf("id %q, want %q", m.ID, id))
	}
	if m.File != filepath.Base(m.File) || m.File == "" || m.File[0] == '.' {
		bad = append(bad, fmt.Sprintf("file %q is not a name in the archive's root", m.File))
	}
	if m.Format != Format {
		bad = append(bad, fmt.Sprintf("format %d, this binary reads %d", m.Format, Format))
	}
	if !slices.Equal(m.Tenants, tenants(m.Counts)) {
		bad = append(bad, fmt.Sprintf("tenants %v are not the sorted tenants of counts %v", m.Tenants, m.Counts))
	}
	if len(bad) > 0 {
		return m, fmt.Errorf("segment %s: %w: manifest: %s", id, ErrCheckFailed, strings.Join(bad, "; "))
	}
	return m, nil
}

// Manifests implements Store.
func (d *Dir) Manifests(ctx context.Context) ([]Manifest, error) {
	entries, err := os.ReadDir(d.Root)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var ms []Manifest
	var damaged []error
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), manifestSuffix)
		if !ok || e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := d.readManifest(id)
		switch {
		case errors.Is(err, ErrCheckFailed):
			damaged = append(damaged, err)
			continue
		case err != nil:
			return nil, fmt.Errorf("list segments: %w", err)
		}
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b Manifest) int {
		if c := a.From.Compare(b.From); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(damaged) > 0 {
		return ms, fmt.Errorf("list segments: %w", errors.Join(damaged...))
	}
	return ms, nil
}

// discardedSuffix ends the names of a discarded segment's files (Discard), after the time it was
// discarded: neither a manifest's nor a data file's name, so no list or read finds them.
const discardedSuffix = ".discarded"

// Discard implements Store: the manifest is renamed first, so that a crash between the two
// renames leaves a data file without a manifest, which a Put of the id replaces.
func (d *Dir) Discard(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stamp := "." + strconv.FormatInt(d.clock().UnixNano(), 10) + discardedSuffix
	for _, name := range []string{id + manifestSuffix, id + dataSuffix} {
		from := filepath.Join(d.Root, name)
		if err := os.Rename(from, from+stamp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("discard segment %s: %w", id, err)
		}
	}
	if err := syncDir(d.Root); err != nil {
		return fmt.Errorf("discard segment %s: %w", id, err)
	}
	return nil
}

// Verify implements Store.
func (d *Dir) Verify(ctx context.Context, id string) (Manifest, error) {
	return d.check(ctx, id, func(Line) error { return nil })
}

// Lines implements Store.
func (d *Dir) Lines(ctx context.Context, id string, fn func(Line) error) error {
	_, err := d.check(ctx, id, fn)
	return err
}

// check reads segment id's file, calling fn for each line, and compares what it read with the
// manifest.
func (d *Dir) check(ctx context.Context, id string, fn func(Line) error) (Manifest, error) {
	m, err := d.readManifest(id)
	if err != nil {
		return m, err
	}
	path := filepath.Join(d.Root, m.File)
	if fi, err := os.Stat(path); err == nil && fi.Size() != m.Bytes {
		// Cheap, and it names the usual damage (a copy cut short) before reading gigabytes.
		return m, fmt.Errorf("segment %s: %w: bytes: %d, want %d", id, ErrCheckFailed, fi.Size(), m.Bytes)
	}
	got, err := readFile(ctx, path, fn)
	if err != nil {
		return m, fmt.Errorf("segment %s: %w", id, err)
	}
	if diffs := tallyOf(m).diff(got); len(diffs) > 0 {
		return m, fmt.Errorf("segment %s: %w: %s", id, ErrCheckFailed, strings.Join(diffs, "; "))
	}
	return m, nil
}

package archive

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"
)

// tally is what a segment's manifest says of its content, computed from the events as they are
// written and again from the file as it is read: the two must agree.
type tally struct {
	Bytes                           int64
	SHA256, LinesSHA256             string
	Events, Deliveries              int64
	Counts                          map[string]int64
	FirstPosition, LastPosition     int64
	FirstRecordedAt, LastRecordedAt time.Time
}

// add counts one line.
func (t *tally) add(l Line) {
	if t.Counts == nil {
		t.Counts = map[string]int64{}
	}
	t.Events++
	if l.Version == 1 {
		t.Deliveries++
	}
	t.Counts[l.Tenant]++
	if t.Events == 1 {
		t.FirstPosition, t.FirstRecordedAt = l.Position, l.RecordedAt
	}
	t.LastPosition, t.LastRecordedAt = l.Position, l.RecordedAt
}

// tallyOf is the tally a manifest states.
func tallyOf(m Manifest) tally {
	return tally{Bytes: m.Bytes, SHA256: m.SHA256, LinesSHA256: m.LinesSHA256, Events: m.Events,
		Deliveries: m.Deliveries, Counts: m.Counts, FirstPosition: m.FirstPosition, LastPosition: m.LastPosition,
		FirstRecordedAt: m.FirstRecordedAt, LastRecordedAt: m.LastRecordedAt}
}

// diff names every field where got differs from want ("events: 10, want 12").
func (want tally) diff(got tally) []string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s: %v, want %v", field, g, w)) }
	if got.Bytes != want.Bytes {
		add("bytes", got.Bytes, want.Bytes)
	}
	if got.SHA256 != want.SHA256 {
		add("sha256", got.SHA256, want.SHA256)
	}
	if got.LinesSHA256 != want.LinesSHA256 {
		add("lines_sha256", got.LinesSHA256, want.LinesSHA256)
	}
	if got.Events != want.Events {
		add("events", got.Events, want.Events)
	}
	if got.Deliveries != want.Deliveries {
		add("deliveries", got.Deliveries, want.Deliveries)
	}
	if !maps.Equal(got.Counts, want.Counts) && (len(got.Counts) > 0 || len(want.Counts) > 0) {
		add("counts", got.Counts, want.Counts)
	}
	if got.FirstPosition != want.FirstPosition {
		add("first_position", got.FirstPosition, want.FirstPosition)
	}
	if got.LastPosition != want.LastPosition {
		add("last_position", got.LastPosition, want.LastPosition)
	}
	if !got.FirstRecordedAt.Equal(want.FirstRecordedAt) {
		add("first_recorded_at", got.FirstRecordedAt.Format(time.RFC3339Nano), want.FirstRecordedAt.Format(time.RFC3339Nano))
	}
	if !got.LastRecordedAt.Equal(want.LastRecordedAt) {
		add("last_recorded_at", got.LastRecordedAt.Format(time.RFC3339Nano), want.LastRecordedAt.Format(time.RFC3339Nano))
	}
	return d
}

// tenants is the sorted tenants of counts.
func tenants(counts map[string]int64) []string {
	return slices.Sorted(maps.Keys(counts))
}

// countingHash hashes and counts what passes through it.
type countingHash struct {
	h hash.Hash
	n int64
}

func newCountingHash() *countingHash { return &countingHash{h: sha256.New()} }

func (c *countingHash) Write(p []byte) (int, error) {
	c.h.Write(p) // a hash never fails
	c.n += int64(len(p))
	return len(p), nil
}

func (c *countingHash) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// maxLine bounds one line read back: an event's data is bounded far below it (the payload
// limit), so a longer line is damage, not data, and must not be held in memory.
const maxLine = 64 << 20

// scan reads a segment file (compressed) from r and calls fn for each of its lines, in order. It
// checks each line as it goes: it must decode as a Line and encode back to the same bytes, so
// every line says exactly what the written Line said. It returns the tally of what it read; a
// damaged file (bad zstd, bad JSON, a line cut short) is an error wrapping ErrCheckFailed. An
// error of fn is returned as it is.
func scan(r io.Reader, fn func(Line) error) (tally, error) {
	file := newCountingHash()
	zr, err := zstd.NewReader(bufio.NewReaderSize(io.TeeReader(r, file), 1<<16),
		zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(1<<27))
	if err != nil {
		return tally{}, fmt.Errorf("zstd reader: %w", err)
	}
	defer zr.Close()
	lines := newCountingHash()
	br := bufio.NewReaderSize(io.TeeReader(zr, lines), 1<<16)
	var t tally
	var buf bytes.Buffer
	for n := int64(1); ; n++ {
		raw, err := readLine(br)
		if errors.Is(err, io.EOF) && len(raw) == 0 {
			break
		}
		if err != nil {
			return t, fmt.Errorf("%w: line %d: %v", ErrCheckFailed, n, err)
		}
		var l Line
		if err := json.Unmarshal(raw, &l); err != nil {
			return t, fmt.Errorf("%w: line %d does not decode: %v", ErrCheckFailed, n, err)
		}
		buf.Reset()
		if err := NewLineWriter(&buf).Write(l); err != nil {
			return t, fmt.Errorf("%w: line %d: %v", ErrCheckFailed, n, err)
		}
		if !bytes.Equal(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), raw) {
			return t, fmt.Errorf("%w: line %d does not encode back to itself", ErrCheckFailed, n)
		}
		t.add(l)
		if err := fn(l); err != nil {
			return t, err
		}
	}
	// The decoder stops at the end of its last frame: what the buffer did not read yet still
	// belongs to the file's hash and size.
	if _, err := io.Copy(io.Discard, io.TeeReader(r, file)); err != nil {
		return t, fmt.Errorf("read segment: %w", err)
	}
	t.Bytes, t.SHA256, t.LinesSHA256 = file.n, file.sum(), lines.sum()
	return t, nil
}

// readLine returns the next line without its newline; a last line without one is an error (the
// writer ends every line with one, so it was cut short).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxLine {
			return nil, fmt.Errorf("longer than %d bytes", maxLine)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, errors.New("cut short: no newline at the end")
		default:
			return line, err
		}
	}
}

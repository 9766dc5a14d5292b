package archive

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// Line is one event as `ledger export` writes it and as an archived segment holds it: the one
// format an auditor reads, whether from an export or from the archive. `ledger export` encodes
// it through LineWriter too, so the two cannot drift.
type Line struct {
	Position      int64            `json:"position"`
	TransactionID string           `json:"transaction_id"`
	DeliveryID    string           `json:"delivery_id"`
	Tenant        string           `json:"tenant"`
	Version       int              `json:"version"`
	Type          domain.EventType `json:"type"`
	// State is the state the event leads to; absent for an event that keeps whatever state it
	// finds (a receipt).
	State          domain.State    `json:"state,omitempty"`
	RecordedAt     time.Time       `json:"recorded_at"`
	IdempotencyKey string          `json:"idempotency_key"`
	Data           json.RawMessage `json:"data"`
}

// LineOf renders a logged event as its line. It fails on an event type the projections cannot
// follow (one whose state after it is not known), as the export always has: such an event would
// be written without the state an auditor reads.
func LineOf(e projections.LoggedEvent) (Line, error) {
	var state domain.State
	if !domain.Preserving(e.Type) {
		s, err := projections.StateAfter(e.Type)
		if err != nil {
			return Line{}, fmt.Errorf("line of event %d: %w", e.Position, err)
		}
		state = s
	}
	return Line{Position: e.Position, TransactionID: fmt.Sprint(e.At.TransactionID),
		DeliveryID: e.DeliveryID, Tenant: e.Tenant, Version: e.Version, Type: e.Type, State: state,
		RecordedAt: e.RecordedAt, IdempotencyKey: e.Key, Data: e.Data}, nil
}

// LineWriter writes lines as JSON, one a line. Its encoding is deterministic (encoding/json
// with its defaults: compact data, HTML-escaped strings), which the archive's checks rely on: a
// line read back and encoded again must give the bytes that were written.
type LineWriter struct {
	enc *json.Encoder
}

// NewLineWriter writes lines to w; the caller buffers w.
func NewLineWriter(w io.Writer) *LineWriter {
	return &LineWriter{enc: json.NewEncoder(w)}
}

// Write encodes one line and its newline.
func (w *LineWriter) Write(l Line) error {
	if err := w.enc.Encode(l); err != nil {
		return fmt.Errorf("encode line of event %d: %w", l.Position, err)
	}
	return nil
}

package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/deliveryledger/ledger/projections"
	"github.com/deliveryledger/ledger/retention"
)

// ForRetention is a Store as the retention pass's archive.
type ForRetention struct{ Store Store }

var _ retention.Archive = ForRetention{}

// Keep puts the segment, or finds it put before: a manifest is only written once its file was
// read back and checked, so one that exists stands (the retention pass compares it with the
// rows before it drops anything).
func (r ForRetention) Keep(ctx context.Context, seg retention.Segment, events func(emit func(projections.LoggedEvent) error) error) (retention.Archived, error) {
	m, err := r.Store.Put(ctx, Segment{ID: seg.ID, Partition: seg.ID, From: seg.From, To: seg.To}, events)
	if errors.Is(err, ErrExists) {
		m, err = r.manifest(ctx, seg.ID)
	}
	if err != nil {
		return retention.Archived{}, err
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return retention.Archived{}, err
	}
	return retention.Archived{Events: m.Events, Deliveries: m.Deliveries, Bytes: m.Bytes, File: m.File, Manifest: raw}, nil
}

// Discard is Store.Discard.
func (r ForRetention) Discard(ctx context.Context, id string) error { return r.Store.Discard(ctx, id) }

// Compare is CompareRows.
func (r ForRetention) Compare(ctx context.Context, id string, events func(emit func(projections.LoggedEvent) error) error) error {
	return CompareRows(ctx, r.Store, id, events)
}

func (r ForRetention) manifest(ctx context.Context, id string) (Manifest, error) {
	all, err := r.Store.Manifests(ctx)
	for _, m := range all {
		if m.ID == id {
			return m, nil
		}
	}
	if err != nil {
		return Manifest{}, err
	}
	return Manifest{}, fmt.Errorf("segment %s: exists but has no manifest", id)
}

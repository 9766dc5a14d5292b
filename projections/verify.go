package projections

import (
	"context"
	"fmt"
)

// maxDifferencesKept bounds the differences a VerifyResult lists; the total is still counted.
const maxDifferencesKept = 1000

// VerifyResult is the outcome of Verify.
type VerifyResult struct {
	// Position is the checkpoint the view was compared at.
	Position LogPosition
	// Differences lists the first differences found (at most 1000).
	Differences []Difference
	// Total counts every difference.
	Total int
	// Behind is the number of events in the log after Position: the view is exact up to
	// Position, not up to the head.
	Behind int64
}

// Verify folds the log afresh and compares the result with a projection's live view: invariant
// 5 of docs/design.md, "rebuilding a projection from the events gives the same rows as the live one".
//
// It reads in one read-only snapshot in which the view's rows and checkpoint agree, and compares
// with the events up to that checkpoint only, so a projector that keeps running meanwhile does
// not cause false differences. The snapshot takes no transaction id, so it does not hold back the
// log followers (they read below the oldest running transaction).
func Verify(ctx context.Context, store Store, p Projection) (VerifyResult, error) {
	var res VerifyResult
	err := store.Snapshot(ctx, p.Table(), func(snap Snapshot) error {
		v, err := snap.Position(ctx, p.Name())
		if err != nil {
			return err
		}
		res.Position, res.Behind = v.Position, v.LagEvents
		return p.Verify(ctx, snap, p.Table(), v.Position, func(d Difference) {
			res.Total++
			if len(res.Differences) < maxDifferencesKept {
				res.Differences = append(res.Differences, d)
			}
		})
	})
	if err != nil {
		return res, fmt.Errorf("verify %s: %w", p.Name(), err)
	}
	return res, nil
}

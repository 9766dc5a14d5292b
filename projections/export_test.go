package projections

import "github.com/deliveryledger/ledger/domain"

// FoldStatus folds a whole stream into its status row, for the tests of the projections_test
// package.
func FoldStatus(events []domain.Event) (StatusRow, error) {
	var r StatusRow
	for _, e := range events {
		if err := r.apply(e); err != nil {
			return r, err
		}
	}
	return r, nil
}

// LeavesDLQ exposes leavesDLQ to the tests.
var LeavesDLQ = leavesDLQ

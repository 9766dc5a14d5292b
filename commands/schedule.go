package commands

import (
	"fmt"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// checkSendAt tells whether an accept at now with sendAt schedules its deliveries: a sendAt
// after now does, up to domain.MaxSendAhead; none, now or the past sends at once. Further ahead
// is refused, naming send_at.
func checkSendAt(sendAt *time.Time, now time.Time) (bool, error) {
	switch {
	case sendAt == nil || !sendAt.After(now):
		return false, nil
	case sendAt.Sub(now) > domain.MaxSendAhead:
		return false, &InvalidField{Field: "send_at", Reason: fmt.Sprintf("at most %d days ahead, got %s",
			int(domain.MaxSendAhead/(24*time.Hour)), sendAt.UTC().Format(time.RFC3339))}
	}
	return true, nil
}

package httpapi

import (
	"net/http"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// minuteCounts is one minute of GET /v1/stats/minutes.
type minuteCounts struct {
	// Minute is the minute's start.
	Minute    time.Time `json:"minute"`
	Accepted  int64     `json:"accepted"`
	Delivered int64     `json:"delivered"`
	Dead      int64     `json:"dead"`
}

// minutesAnswer is GET /v1/stats/minutes.
type minutesAnswer struct {
	// Minutes are the last hour's minutes, oldest first, the current (partial) one last; each
	// is present, with zeros when nothing happened in it.
	Minutes []minuteCounts `json:"minutes"`
	View    viewInfo       `json:"view"`
}

// statsMinutes is GET /v1/stats/minutes: the tenant's deliveries accepted, delivered and dead per
// minute over the last hour, counted by the database from the status view (the console's
// overview chart), so that the series is right whatever the rate.
func (s *server) statsMinutes(w http.ResponseWriter, r *http.Request, tenant string) error {
	m, err := s.deps.Views.Minutes(r.Context(), tenant)
	if err != nil {
		return err
	}
	out := minutesAnswer{Minutes: make([]minuteCounts, len(m.Minutes)), View: newViewInfo(m.View)}
	for i, row := range m.Minutes {
		out.Minutes[i] = minuteCounts{Minute: row.Minute, Accepted: row.Accepted, Delivered: row.Delivered, Dead: row.Dead}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// parseFailureClass reads the failure_class filter of GET /v1/dlq; empty when absent.
func parseFailureClass(v string) (domain.ErrorClass, error) {
	if v == "" {
		return "", nil
	}
	for _, c := range failureClasses {
		if string(c) == v {
			return c, nil
		}
	}
	return "", invalid("failure_class", "unknown class %q; one of: permanent, transient, unknown, panic", v)
}

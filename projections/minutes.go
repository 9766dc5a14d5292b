package projections

import "time"

// MinuteRow counts a tenant's deliveries in one minute: accepted in it, and become delivered or
// dead in it.
type MinuteRow struct {
	// Minute is the minute's start (UTC).
	Minute    time.Time
	Accepted  int64
	Delivered int64
	Dead      int64
}

// Minutes is a tenant's per-minute series, oldest minute first, every minute present.
type Minutes struct {
	Minutes []MinuteRow
	View    TenantView
}

// SeriesMinutes is how many minutes a series covers: the last hour, the current minute
// included.
const SeriesMinutes = 60

// NewMinutes returns the empty series of the hour up to the minute now is in, every minute
// present, and the range [start, end) it covers.
func NewMinutes(now time.Time) (m Minutes, start, end time.Time) {
	end = now.UTC().Truncate(time.Minute).Add(time.Minute)
	start = end.Add(-SeriesMinutes * time.Minute)
	m.Minutes = make([]MinuteRow, SeriesMinutes)
	for i := range m.Minutes {
		m.Minutes[i].Minute = start.Add(time.Duration(i) * time.Minute)
	}
	return m, start, end
}

// Set puts a minute's counts in its place in the series; a minute outside it is dropped.
func (m *Minutes) Set(row MinuteRow) {
	if len(m.Minutes) == 0 {
		return
	}
	start := m.Minutes[0].Minute
	if i := int(row.Minute.Sub(start) / time.Minute); i >= 0 && i < len(m.Minutes) {
		row.Minute = m.Minutes[i].Minute
		m.Minutes[i] = row
	}
}

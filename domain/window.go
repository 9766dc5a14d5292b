package domain

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DeferWindow is the reason of a deferral that waits for the delivery's window to open.
const DeferWindow = "window"

// Window is when a delivery may be attempted (quiet hours outside it): from Start to End, wall
// clock in Timezone, on Days. It is fixed on the delivery at acceptance (Accepted.Window) and
// travels in every work message, so a change of the caller's mind or of the configuration later
// does not move an attempt in flight.
//
// An End before Start spans midnight: 22:00-06:00 on "fri" is open from Friday 22:00 to Saturday
// 06:00, so Days name the days a window opens. An End of 24:00 is the end of the day. A wall
// time a daylight saving change skips (02:30 on the day clocks jump from 02:00 to 03:00) is the
// instant of the jump; one it repeats is its first occurrence.
type Window struct {
	// Timezone is an IANA zone name ("Europe/Berlin", "UTC").
	Timezone string `json:"timezone"`
	// Days are the days it opens, "mon" to "sun"; none means every day.
	Days []string `json:"days,omitempty"`
	// Start and End are "HH:MM", 00:00 to 23:59 (End up to 24:00), and differ.
	Start string `json:"start"`
	End   string `json:"end"`
}

// WindowError names the member of a window that is wrong ("timezone", "days[2]", "start").
type WindowError struct {
	Member string
	Reason string
}

// Error says which member and why.
func (e *WindowError) Error() string { return "window." + e.Member + ": " + e.Reason }

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// openHours is a parsed Window.
type openHours struct {
	loc        *time.Location
	days       [7]bool
	start, end int // minutes of the day; end may be 1440
}

// Validate reports the first member that is wrong, as a *WindowError.
func (w Window) Validate() error {
	_, err := w.parse()
	return err
}

// Opening is the first instant at or after t at which the window is open: t itself when it is
// open at t. The error is the window's own problem (a zone this process does not know).
func (w Window) Opening(t time.Time) (time.Time, error) {
	h, err := w.parse()
	if err != nil {
		return time.Time{}, err
	}
	return h.opening(t), nil
}

func (w Window) parse() (openHours, error) {
	var h openHours
	loc, err := location(w.Timezone)
	if err != nil {
		return h, &WindowError{"timezone", err.Error()}
	}
	h.loc = loc
	if len(w.Days) == 0 {
		h.days = [7]bool{true, true, true, true, true, true, true}
	}
	for i, name := range w.Days {
		day, ok := weekdays[name]
		if !ok {
			return h, &WindowError{fmt.Sprintf("days[%d]", i), fmt.Sprintf("%q is not one of mon, tue, wed, thu, fri, sat, sun", name)}
		}
		h.days[day] = true
	}
	if h.start, err = clock(w.Start, false); err != nil {
		return h, &WindowError{"start", err.Error()}
	}
	if h.end, err = clock(w.End, true); err != nil {
		return h, &WindowError{"end", err.Error()}
	}
	if h.start == h.end {
		return h, &WindowError{"end", "must differ from start"}
	}
	return h, nil
}

// locations caches the zones loaded: LoadLocation reads and parses a file each time, and every
// attempt of a delivery with a window asks for its zone.
var locations sync.Map

// location loads an IANA zone. "Local" and "" are refused: they mean the server's zone, which
// is not the caller's to know.
func location(name string) (*time.Location, error) {
	if name == "" {
		return nil, fmt.Errorf("is required (an IANA zone such as Europe/Berlin)")
	}
	if name == "Local" {
		return nil, fmt.Errorf("\"Local\" is the server's zone; name an IANA zone such as Europe/Berlin")
	}
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone", name)
	}
	locations.Store(name, loc)
	return loc, nil
}

// clock parses "HH:MM" into minutes of the day; endOfDay allows "24:00".
func clock(s string, endOfDay bool) (int, error) {
	hh, mm, ok := strings.Cut(s, ":")
	if !ok || len(hh) != 2 || len(mm) != 2 {
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	}
	h, herr := strconv.Atoi(hh)
	m, merr := strconv.Atoi(mm)
	switch {
	case herr != nil || merr != nil || h < 0 || m < 0 || m > 59:
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	case h == 24 && m == 0 && endOfDay:
		return 24 * 60, nil
	case h > 23:
		return 0, fmt.Errorf("%q is not a time of day HH:MM (00:00 to 23:59)", s)
	}
	return h*60 + m, nil
}

// opening walks the openings from the day before t's (a window that spans midnight may be open
// since yesterday) to a week after, earliest first.
func (h openHours) opening(t time.Time) time.Time {
	local := t.In(h.loc)
	y, m, d := local.Date()
	for i := -1; i <= 8; i++ {
		// Noon is never skipped by a daylight saving change: the date's weekday, safely.
		if !h.days[time.Date(y, m, d+i, 12, 0, 0, 0, h.loc).Weekday()] {
			continue
		}
		open := wall(h.loc, y, m, d+i, h.start)
		closeDay := d + i
		if h.end <= h.start {
			closeDay++
		}
		closes := wall(h.loc, y, m, closeDay, h.end)
		if t.Before(closes) {
			if t.Before(open) {
				return open
			}
			return t
		}
	}
	// Unreachable: a valid window opens on at least one day of every week.
	return t
}

// wall is the instant of minutes into the day y-m-d in loc. A wall time skipped by a clock
// change is the instant of the change (the first that reads later), which time.Date does not
// promise: it may answer in either of the zones around the change.
func wall(loc *time.Location, y int, m time.Month, d, minutes int) time.Time {
	t := time.Date(y, m, d, minutes/60, minutes%60, 0, 0, loc)
	got := t.Hour()*60 + t.Minute()
	start, end := t.ZoneBounds()
	if got == minutes%(24*60) {
		// A wall time the change repeats: time.Date may answer the second; the first is the
		// same reading an offset's difference earlier, before the change.
		if !start.IsZero() {
			_, before := start.Add(-time.Second).Zone()
			if _, after := t.Zone(); before > after {
				first := t.Add(-time.Duration(before-after) * time.Second)
				if first.Before(start) && first.Hour()*60+first.Minute() == got {
					return first
				}
			}
		}
		return t
	}
	if got > minutes {
		return start // read as the later zone: its start is the jump
	}
	return end // read as the earlier zone: its end is the jump
}

// Window is when the delivery may be attempted, fixed at acceptance; nil when always.
func (d *Delivery) Window() *Window { return d.window }

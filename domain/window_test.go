package domain

import (
	"errors"
	"testing"
	"time"
)

// TestWindowOpening: the first instant at or after t the window is open, across a daylight
// saving change both ways, a window that spans midnight, days filtering and a week that wraps.
// 2026-03-29 and 2026-10-25 are Sundays: Berlin's clocks jump 02:00→03:00 and 03:00→02:00.
func TestWindowOpening(t *testing.T) {
	t.Parallel()
	office := Window{Timezone: "Europe/Berlin", Days: []string{"mon", "tue", "wed", "thu", "fri"}, Start: "09:00", End: "18:00"}
	night := Window{Timezone: "Europe/Berlin", Start: "22:00", End: "06:00"}
	for _, c := range []struct {
		name string
		w    Window
		at   string
		want string
		utc  string // the instant in UTC, where the wall clock alone could hide an hour
	}{
		{"open now", office, "2026-12-02 10:00", "2026-12-02 10:00", ""},
		{"before the start", office, "2026-12-02 07:59", "2026-12-02 09:00", "2026-12-02 08:00"},
		{"at the end is closed", office, "2026-12-02 18:00", "2026-12-03 09:00", ""},
		{"friday evening waits for monday", office, "2026-12-04 18:30", "2026-12-07 09:00", ""},
		{"saturday waits for monday", office, "2026-12-05 12:00", "2026-12-07 09:00", ""},
		{"sunday before the spring change", office, "2026-03-29 12:00", "2026-03-30 09:00", "2026-03-30 07:00"},
		{"friday before the autumn change", office, "2026-10-23 19:00", "2026-10-26 09:00", "2026-10-26 08:00"},
		{"night: open after midnight", night, "2026-12-02 03:00", "2026-12-02 03:00", ""},
		{"night: closed in the day", night, "2026-12-02 12:00", "2026-12-02 22:00", ""},
		{"night: closes at six", night, "2026-12-02 06:00", "2026-12-02 22:00", ""},
		{"night: open over the spring change", night, "2026-03-29 02:30", "2026-03-29 03:30", ""},
		{"spring: a skipped opening is the jump", Window{Timezone: "Europe/Berlin", Start: "02:30", End: "05:00"},
			"2026-03-29 01:00", "2026-03-29 03:00", "2026-03-29 01:00"},
		{"autumn: a repeated opening is the first", Window{Timezone: "Europe/Berlin", Start: "02:30", End: "05:00"},
			"2026-10-25 01:00", "2026-10-25 02:30", "2026-10-25 00:30"},
		{"night on fridays only: friday night into saturday", Window{Timezone: "Europe/Berlin", Days: []string{"fri"}, Start: "22:00", End: "06:00"},
			"2026-12-05 05:00", "2026-12-05 05:00", ""},
		{"night on fridays only: saturday night waits a week", Window{Timezone: "Europe/Berlin", Days: []string{"fri"}, Start: "22:00", End: "06:00"},
			"2026-12-05 22:30", "2026-12-11 22:00", ""},
		{"last week's opening wraps to this week", Window{Timezone: "Europe/Berlin", Days: []string{"wed"}, Start: "09:00", End: "10:00"},
			"2026-12-02 10:00", "2026-12-09 09:00", ""},
		{"all day", Window{Timezone: "UTC", Start: "00:00", End: "24:00", Days: []string{"sun"}}, "2026-12-05 23:59", "2026-12-06 00:00", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			loc, err := time.LoadLocation(c.w.Timezone)
			if err != nil {
				t.Fatal(err)
			}
			at, _ := time.ParseInLocation("2006-01-02 15:04", c.at, loc)
			want, _ := time.ParseInLocation("2006-01-02 15:04", c.want, loc)
			if c.utc != "" {
				want, _ = time.ParseInLocation("2006-01-02 15:04", c.utc, time.UTC)
			}
			got, err := c.w.Opening(at)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(want) {
				t.Errorf("opening after %s = %s (%s UTC), want %s", c.at, got.In(want.Location()), got.UTC().Format("2006-01-02 15:04"), want)
			}
		})
	}
}

// TestWindowValidateNamesTheMember: a bad zone, day or time is refused naming its member.
func TestWindowValidateNamesTheMember(t *testing.T) {
	t.Parallel()
	ok := Window{Timezone: "Europe/Berlin", Start: "09:00", End: "18:00"}
	for _, c := range []struct {
		change func(*Window)
		member string
	}{
		{func(w *Window) { w.Timezone = "Europe/Atlantis" }, "timezone"},
		{func(w *Window) { w.Timezone = "" }, "timezone"},
		{func(w *Window) { w.Timezone = "Local" }, "timezone"},
		{func(w *Window) { w.Days = []string{"mon", "Tue"} }, "days[1]"},
		{func(w *Window) { w.Start = "9:00" }, "start"},
		{func(w *Window) { w.Start = "24:00" }, "start"},
		{func(w *Window) { w.End = "18:60" }, "end"},
		{func(w *Window) { w.End = "24:01" }, "end"},
		{func(w *Window) { w.End = "09:00" }, "end"},
	} {
		w := ok
		c.change(&w)
		var we *WindowError
		if err := w.Validate(); !errors.As(err, &we) || we.Member != c.member {
			t.Errorf("%+v: %v, want a problem of %s", w, err, c.member)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
}

package webhook

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"2", 2 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"86400", MaxRetryAfter},
		{"86401", MaxRetryAfter},
		{"99999999999", MaxRetryAfter},
		{"99999999999999999999999999999", MaxRetryAfter}, // overflows uint64
		{"-5", 0},
		{"+5", 0},
		{"1.5", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Format(http.TimeFormat), 0},
		{now.Add(30 * time.Second).Format(time.RFC850), 30 * time.Second},
		{now.Add(45 * time.Second).Format(time.ANSIC), 45 * time.Second},
		{"Fri, 31 Dec 9999 23:59:59 GMT", MaxRetryAfter},
		{"Mon, 01 Jan 0001 00:00:00 GMT", 0},
		{"Wed, 99 Foo 2030 25:61:61 GMT", 0},
	}
	for _, tt := range tests {
		if got := ParseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("ParseRetryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzParseRetryAfter checks that no header value, however odd, panics or asks for a wait
// outside [0, MaxRetryAfter].
func FuzzParseRetryAfter(f *testing.F) {
	for _, seed := range []string{"", "0", "2", "-1", "1e9", "18446744073709551616", " 7 ",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994", "\x00", "٣"} {
		f.Add(seed, int64(1893553445))
	}
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		d := ParseRetryAfter(v, time.Unix(nowUnix, 0))
		if d < 0 || d > MaxRetryAfter {
			t.Errorf("ParseRetryAfter(%q) = %s, want within [0, %s]", v, d, MaxRetryAfter)
		}
	})
}

// FuzzParseRetryAfterSeconds: delta-seconds parse to exactly that many seconds, with leading
// zeros, up to the cap.
func FuzzParseRetryAfterSeconds(f *testing.F) {
	for _, n := range []uint64{0, 1, 120, 86399, 86400, 86401, 1 << 63, 1<<64 - 1} {
		f.Add(n, uint8(0), int64(1893553445))
	}
	f.Fuzz(func(t *testing.T, secs uint64, zeros uint8, nowUnix int64) {
		v := strconv.FormatUint(secs, 10)
		for range zeros % 32 {
			v = "0" + v
		}
		want := MaxRetryAfter
		if secs < uint64(MaxRetryAfter/time.Second) {
			want = time.Duration(secs) * time.Second
		}
		if got := ParseRetryAfter(v, time.Unix(nowUnix, 0)); got != want {
			t.Fatalf("ParseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	})
}

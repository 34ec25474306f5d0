package window

import (
	"strings"
	"testing"
	"time"
)

func TestParseAndOpen(t *testing.T) {
	s, err := Parse([]string{"Mon-Fri 22:00-06:00", "Sat,Sun 10:00-12:30"}, "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	at := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, paris) }
	// 2026-11-23 is a Monday.
	cases := []struct {
		t    time.Time
		open bool
		next time.Time
	}{
		{at(2026, 11, 23, 21, 59), false, at(2026, 11, 23, 22, 0)},
		{at(2026, 11, 23, 22, 0), true, at(2026, 11, 23, 22, 0)},
		{at(2026, 11, 24, 5, 59), true, at(2026, 11, 24, 5, 59)},   // Monday's window runs into Tuesday
		{at(2026, 11, 24, 6, 0), false, at(2026, 11, 24, 22, 0)},   // end is exclusive
		{at(2026, 11, 28, 5, 0), true, at(2026, 11, 28, 5, 0)},     // Friday's window runs into Saturday
		{at(2026, 11, 28, 7, 0), false, at(2026, 11, 28, 10, 0)},   // Saturday morning
		{at(2026, 11, 29, 12, 30), false, at(2026, 11, 30, 22, 0)}, // Sunday after its window: Monday night
	}
	for _, tc := range cases {
		if got := s.Open(tc.t); got != tc.open {
			t.Errorf("Open(%v) = %v", tc.t, got)
		}
		if got := s.Next(tc.t.UTC()); !got.Equal(tc.next) {
			t.Errorf("Next(%v) = %v, want %v", tc.t, got, tc.next)
		}
	}
	var none *Schedule
	if !none.Open(time.Now()) {
		t.Error("no windows must mean always open")
	}
}

func TestWholeDayAndDST(t *testing.T) {
	s, err := Parse([]string{"Sun 00:00-24:00", "* 02:30-03:00"}, "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	if !s.Open(time.Date(2026, 11, 29, 23, 59, 59, 0, paris)) || s.Open(time.Date(2026, 11, 30, 0, 0, 0, 0, paris)) {
		t.Error("Sun 00:00-24:00 must cover all Sunday and end at midnight")
	}
	// 2026-03-29 02:30 does not exist in Paris (clocks go 02:00 → 03:00): the
	// window opens at 03:30 CEST, which is time.Date's normalisation, and has
	// a zero or negative length; the next day's opens normally.
	if n := s.Next(time.Date(2026, 3, 30, 1, 0, 0, 0, paris)); !n.Equal(time.Date(2026, 3, 30, 2, 30, 0, 0, paris)) {
		t.Errorf("next after DST: %v", n)
	}
}

func TestParseErrors(t *testing.T) {
	bad := map[string]string{
		"Mon-Fry 22:00-06:00": `"Fry" is not a day`,
		"Mon 22:00":           "not a time range",
		"Mon 25:00-26:00":     "not a time of day",
		"Mon 24:00-02:00":     "24:00 only ends",
		"Mon 10:00-10:00":     "same time",
		"22:00-06:00":         "write DAYS START-END",
		"Mon 9:00-10:00":      "not a time of day",
	}
	for in, want := range bad {
		if _, err := Parse([]string{in}, "UTC"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want %q", in, err, want)
		}
	}
	if _, err := Parse([]string{"* 01:00-02:00"}, "Mars/Olympus"); err == nil || !strings.Contains(err.Error(), "time zone") {
		t.Errorf("bad zone: %v", err)
	}
}

// FuzzParseWindow: any input parses or is refused, never panics; a parsed
// schedule always has a next opening within a week.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"Mon-Fri 22:00-06:00", "* 00:00-24:00", "Sat,Sun 10:00:30-12:00", "Sun-Mon 23:59-00:01", "x", "Mon 24:00-24:00"} {
		f.Add(s, int64(1795000000))
	}
	f.Fuzz(func(t *testing.T, spec string, unix int64) {
		s, err := Parse([]string{spec}, "Europe/Paris")
		if err != nil {
			return
		}
		now := time.Unix(unix%(1<<34), 0)
		next := s.Next(now)
		if next.IsZero() || next.Before(now) || next.Sub(now) > 8*24*time.Hour {
			t.Errorf("%q at %v: next %v", spec, now, next)
		}
	})
}

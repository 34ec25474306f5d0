// Package window reads weekly maintenance windows ("Mon-Fri 22:00-06:00")
// in a time zone and answers whether a time is inside one and when the next
// one opens. It is pure: the drain controller feeds it the time.
package window

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Window is one weekly window: on the given weekdays, from Start to End
// (offsets from midnight in the schedule's zone). End at or before Start
// means the window runs past midnight into the next day.
type Window struct {
	Days       [7]bool // indexed by time.Weekday
	Start, End time.Duration
	spec       string
}

func (w Window) String() string { return w.spec }

// Schedule is a set of windows (any of them) in one time zone.
type Schedule struct {
	Windows []Window
	Loc     *time.Location
}

var dayNames = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// Parse reads windows written "DAYS START-END": DAYS is * (every day) or a
// comma-separated list of days (Mon, Tue, ...) and ranges (Mon-Fri, Sat-Sun);
// START and END are HH:MM or HH:MM:SS, END may be 24:00. tz is an IANA time
// zone name (e.g. Europe/Paris), UTC or Local. No windows gives nil: drains
// may start at any time.
func Parse(specs []string, tz string) (*Schedule, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: %w; write an IANA name such as Europe/Paris, or UTC", tz, err)
	}
	s := &Schedule{Loc: loc}
	var errs []error
	for _, spec := range specs {
		w, err := ParseWindow(spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.Windows = append(s.Windows, w)
	}
	return s, errors.Join(errs...)
}

// ParseWindow reads one "DAYS START-END".
func ParseWindow(spec string) (Window, error) {
	w := Window{spec: strings.TrimSpace(spec)}
	fields := strings.Fields(spec)
	if len(fields) != 2 {
		return w, fmt.Errorf("window %q: write DAYS START-END, e.g. \"Mon-Fri 22:00-06:00\" or \"* 01:00-05:00\"", spec)
	}
	if err := parseDays(fields[0], &w.Days); err != nil {
		return w, fmt.Errorf("window %q: %w", spec, err)
	}
	from, to, ok := strings.Cut(fields[1], "-")
	if !ok {
		return w, fmt.Errorf("window %q: %q is not a time range START-END such as 22:00-06:00", spec, fields[1])
	}
	var err error
	if w.Start, err = parseClock(from, false); err != nil {
		return w, fmt.Errorf("window %q: %w", spec, err)
	}
	if w.End, err = parseClock(to, true); err != nil {
		return w, fmt.Errorf("window %q: %w", spec, err)
	}
	if w.Start == w.End {
		return w, fmt.Errorf("window %q: it starts and ends at the same time; write 00:00-24:00 for a whole day", spec)
	}
	return w, nil
}

func parseDays(s string, days *[7]bool) error {
	if s == "*" {
		for i := range days {
			days[i] = true
		}
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, ok := dayNames[strings.ToLower(from)]
		if !ok {
			return fmt.Errorf("%q is not a day; write Mon, Tue, Wed, Thu, Fri, Sat, Sun, a range such as Mon-Fri, or *", from)
		}
		b := a
		if isRange {
			if b, ok = dayNames[strings.ToLower(to)]; !ok {
				return fmt.Errorf("%q is not a day; write Mon, Tue, Wed, Thu, Fri, Sat, Sun, a range such as Mon-Fri, or *", to)
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

func parseClock(s string, end bool) (time.Duration, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, fmt.Errorf("%q is not a time of day HH:MM or HH:MM:SS", s)
	}
	var v [3]int
	limits := [3]int{24, 59, 59}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || len(p) != 2 || n < 0 || n > limits[i] {
			return 0, fmt.Errorf("%q is not a time of day HH:MM or HH:MM:SS", s)
		}
		v[i] = n
	}
	d := time.Duration(v[0])*time.Hour + time.Duration(v[1])*time.Minute + time.Duration(v[2])*time.Second
	if d > 24*time.Hour || (d == 24*time.Hour && !end) {
		return 0, fmt.Errorf("%q is not a time of day (24:00 only ends a window)", s)
	}
	return d, nil
}

// at is the wall-clock time d after midnight of day's date, in loc
// (time.Date normalises: 24:00 is the next midnight, a daylight-saving gap
// moves the time forward).
func at(day time.Time, d time.Duration, loc *time.Location) time.Time {
	y, m, dd := day.Date()
	return time.Date(y, m, dd, int(d/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second), 0, loc)
}

// span is the window's occurrence that starts on day's date.
func (w Window) span(day time.Time, loc *time.Location) (from, to time.Time) {
	from = at(day, w.Start, loc)
	if w.End > w.Start {
		return from, at(day, w.End, loc)
	}
	return from, at(day.AddDate(0, 0, 1), w.End, loc)
}

// Open says whether t is inside a window.
func (s *Schedule) Open(t time.Time) bool {
	if s == nil {
		return true
	}
	t = t.In(s.Loc)
	for _, w := range s.Windows {
		for _, back := range []int{-1, 0} { // a window of yesterday may run past midnight
			day := t.AddDate(0, 0, back)
			if !w.Days[day.Weekday()] {
				continue
			}
			if from, to := w.span(day, s.Loc); !t.Before(from) && t.Before(to) {
				return true
			}
		}
	}
	return false
}

// Next is t itself when t is inside a window, else the time the next window
// opens (zero when there is none, which Parse does not allow).
func (s *Schedule) Next(t time.Time) time.Time {
	if s.Open(t) {
		return t
	}
	t = t.In(s.Loc)
	var next time.Time
	for _, w := range s.Windows {
		for ahead := 0; ahead <= 7; ahead++ {
			day := t.AddDate(0, 0, ahead)
			if !w.Days[day.Weekday()] {
				continue
			}
			if from, _ := w.span(day, s.Loc); from.After(t) && (next.IsZero() || from.Before(next)) {
				next = from
			}
		}
	}
	return next
}

func (s *Schedule) String() string {
	if s == nil {
		return "always"
	}
	parts := make([]string, len(s.Windows))
	for i, w := range s.Windows {
		parts[i] = w.String()
	}
	return strings.Join(parts, ", ") + " " + s.Loc.String()
}

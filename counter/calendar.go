package counter

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Calendar windows. A FixedWindow limit with a Calendar counts in windows
// aligned on the civil calendar of a time zone (a day, an ISO week, a
// month, a year, each with an optional start offset such as billing day
// 15) instead of multiples of Window since the Unix epoch. Their length
// varies: a month is 28 to 31 days, a day 23 to 25 hours across daylight
// saving changes; Reset, RetryAfter, Next and Window of every Result are
// the true times to the next boundary and the true length of the current
// window, and each store key lives until its window ends (+1 s).
//
// A window begins at the first instant whose local date is its start date
// (midnight, or later on a day whose midnight a daylight saving change
// skips, as in America/Santiago; the first of two midnights when the clock
// goes back over it). Boundaries are computed from now alone: time is a
// parameter, no clock is read.

// CalendarUnit is the length of a calendar window.
type CalendarUnit int

const (
	// NoCalendar: the limit counts in windows of Limit.Window.
	NoCalendar CalendarUnit = iota
	// Day windows begin at local midnight.
	Day
	// Week windows begin at midnight of Calendar.StartWeekday (Monday by
	// default, as ISO 8601).
	Week
	// Month windows begin at midnight of Calendar.StartDay of each month.
	Month
	// Year windows begin at midnight of Calendar.StartDay of
	// Calendar.StartMonth.
	Year
)

var unitNames = [...]string{"", "day", "week", "month", "year"}

func (u CalendarUnit) String() string {
	if u >= 0 && int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("unit(%d)", int(u))
}

// Calendar aligns a FixedWindow limit on the calendar (see Day, Week,
// Month, Year). The zero value (Unit NoCalendar) is no calendar. The
// struct is comparable and prints its settings, so Limits stay
// comparable.
type Calendar struct {
	Unit CalendarUnit
	// TimeZone is the IANA name of the zone whose calendar is followed,
	// e.g. "Europe/Berlin"; "" means UTC. It is resolved with
	// time.LoadLocation (the host's zoneinfo, or time/tzdata if the binary
	// embeds it).
	TimeZone string
	// StartDay is the day of the month a Month window (or a Year window,
	// in StartMonth) begins: 1 to 31, 0 meaning 1. A day past the end of
	// a month is that month's last day (billing day 31 begins February's
	// window on the 28th or 29th). Only for Month and Year.
	StartDay int
	// StartMonth is the month a Year window begins, 1 to 12; 0 means
	// January. Only for Year.
	StartMonth int
	// StartWeekday is the day a Week window begins, ISO 8601 numbering:
	// 1 Monday … 7 Sunday; 0 means Monday. Only for Week.
	StartWeekday int
}

// errBadCalendar: a Calendar with an unknown unit, time zone or an out of
// range start.
var errBadCalendar = fmt.Errorf("%w: invalid calendar window", ErrBadLimit)

// location resolves the time zone.
func (c Calendar) location() (*time.Location, error) {
	if c.TimeZone == "" || c.TimeZone == "UTC" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(c.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("%w: unknown time zone %q", errBadCalendar, c.TimeZone)
	}
	return loc, nil
}

// validate checks c (Unit set); the error wraps errBadCalendar.
func (c Calendar) validate() error {
	switch {
	case c.Unit < Day || c.Unit > Year:
		return fmt.Errorf("%w: unknown unit %d", errBadCalendar, c.Unit)
	case c.StartDay < 0 || c.StartDay > 31:
		return fmt.Errorf("%w: start day %d not in [1, 31]", errBadCalendar, c.StartDay)
	case c.StartDay > 0 && c.Unit != Month && c.Unit != Year:
		return fmt.Errorf("%w: a start day is for month and year windows", errBadCalendar)
	case c.StartMonth < 0 || c.StartMonth > 12:
		return fmt.Errorf("%w: start month %d not in [1, 12]", errBadCalendar, c.StartMonth)
	case c.StartMonth > 0 && c.Unit != Year:
		return fmt.Errorf("%w: a start month is for year windows", errBadCalendar)
	case c.StartWeekday < 0 || c.StartWeekday > 7:
		return fmt.Errorf("%w: start weekday %d not in [1, 7]", errBadCalendar, c.StartWeekday)
	case c.StartWeekday > 0 && c.Unit != Week:
		return fmt.Errorf("%w: a start weekday is for week windows", errBadCalendar)
	}
	_, err := c.location()
	return err
}

// String describes c, e.g. "month(day 15) Europe/Berlin".
func (c Calendar) String() string {
	s := c.Unit.String()
	switch {
	case c.Unit == Week && c.StartWeekday > 1:
		s += fmt.Sprintf("(from %v)", time.Weekday(c.StartWeekday%7))
	case c.Unit == Year && (c.StartMonth > 1 || c.StartDay > 1):
		s += fmt.Sprintf("(from %v %d)", time.Month(max(c.StartMonth, 1)), max(c.StartDay, 1))
	case c.Unit == Month && c.StartDay > 1:
		s += fmt.Sprintf("(day %d)", c.StartDay)
	}
	if c.TimeZone != "" {
		s += " " + c.TimeZone
	}
	return s
}

// calendar is a validated Calendar ready to locate windows. It is safe for
// concurrent use: the last window located is cached, so a decision in the
// current window costs two comparisons.
type calendar struct {
	c    Calendar
	loc  *time.Location
	last atomic.Pointer[span]
}

// span is one window: [start, end) in unix ms.
type span struct{ start, end int64 }

func newCalendar(c Calendar) (*calendar, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	loc, err := c.location()
	if err != nil {
		return nil, err
	}
	return &calendar{c: c, loc: loc}, nil
}

// span returns the window holding the instant ms (unix ms).
func (c *calendar) span(ms int64) span {
	if s := c.last.Load(); s != nil && ms >= s.start && ms < s.end {
		return *s
	}
	s := c.locate(ms)
	c.last.Store(&s)
	return s
}

// locate computes the window holding ms.
func (c *calendar) locate(ms int64) span {
	t := time.UnixMilli(ms).In(c.loc)
	y, m, d := t.Date()
	var start, next func(k int) int64 // k-th window start relative to t's date
	switch c.c.Unit {
	case Day:
		start = func(k int) int64 { return c.dayStart(y, m, d+k) }
	case Week:
		iso := (int(t.Weekday())+6)%7 + 1
		back := (iso - max(c.c.StartWeekday, 1) + 7) % 7
		start = func(k int) int64 { return c.dayStart(y, m, d-back+7*k) }
	case Month:
		start = func(k int) int64 { return c.anchor(y, m+time.Month(k)) }
	default: // Year
		sm := time.Month(max(c.c.StartMonth, 1))
		start = func(k int) int64 { return c.anchor(y+k, sm) }
	}
	next = start
	// The window of t's date, stepped back or forward until it holds ms
	// (a start day later in the month than t is in the previous window).
	k := 0
	for start(k) > ms {
		k--
	}
	for next(k+1) <= ms {
		k++
	}
	return span{start(k), next(k + 1)}
}

// anchor is the start of the Month/Year window beginning in month m of
// year y (m may be out of range: normalised): StartDay clamped to the
// month's length.
func (c *calendar) anchor(y int, m time.Month) int64 {
	first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	y, m = first.Year(), first.Month()
	days := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
	return c.dayStart(y, m, min(max(c.c.StartDay, 1), days))
}

// dayStart is the first instant (unix ms) whose local date is y-m-d (the
// date normalised: d may be out of range). time.Date picks either side of
// a daylight saving change that skips or repeats midnight; this corrects
// it to the first instant of the date.
func (c *calendar) dayStart(y int, m time.Month, d int) int64 {
	n := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	y, m, d = n.Date()
	t := time.Date(y, m, d, 0, 0, 0, 0, c.loc)
	if ly, lm, ld := t.Date(); time.Date(ly, lm, ld, 0, 0, 0, 0, time.UTC).Before(n) {
		// Landed on the evening before a skipped midnight: the date
		// begins when the zone changes.
		_, end := t.ZoneBounds()
		if !end.IsZero() {
			t = end
		}
	}
	if zs, _ := t.ZoneBounds(); !zs.IsZero() && zs.Before(t) {
		// t is after a change: if the clock went back over midnight, the
		// same wall time occurred first in the previous zone.
		_, offT := t.Zone()
		_, offP := zs.Add(-time.Nanosecond).Zone()
		if offP > offT {
			if cand := t.Add(-time.Duration(offP-offT) * time.Second); cand.Before(zs) {
				if cy, cm, cd := cand.Date(); cy == y && cm == m && cd == d {
					t = cand
				}
			}
		}
		// A skipped midnight where t landed after the change: the date
		// begins at the change if the instant before it is the day before.
		if py, pm, pd := zs.Add(-time.Nanosecond).Date(); zs.Before(t) && !(py == y && pm == m && pd == d) {
			if sy, sm, sd := zs.Date(); sy == y && sm == m && sd == d {
				t = zs
			}
		}
	}
	return t.UnixMilli()
}

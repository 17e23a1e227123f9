package policy

// Calendar windows in the policy file: `window: day|week|month|year`,
// `time_zone:`, `start_day:`, `start_month:`, `start_weekday:`
// (counter.Calendar).

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poplimit/poplimit/counter"
)

// calendarFields are the limit keys of calendar windows beside window.
var calendarFields = []string{"time_zone", "start_day", "start_month", "start_weekday"}

var calendarUnits = map[string]counter.CalendarUnit{
	"day": counter.Day, "week": counter.Week, "month": counter.Month, "year": counter.Year,
}

// calendarField parses the window key when it names a calendar unit, and
// the calendar keys; it reports false for any other key (and a window that
// is a duration), which the caller parses.
func (p *parser) calendarField(k string, v *yaml.Node, fp string, ls *LimitSpec) bool {
	c := &ls.Limit.Calendar
	switch k {
	case "window":
		u, ok := calendarUnits[v.Value]
		if v.Kind != yaml.ScalarNode || !ok {
			return false
		}
		c.Unit = u
	case "time_zone":
		c.TimeZone = p.str(v, fp)
		if c.TimeZone == "" || c.TimeZone == "Local" {
			p.errf(v, fp, "must be an IANA time zone name such as Europe/Berlin or UTC")
		} else if _, err := time.LoadLocation(c.TimeZone); err != nil {
			p.errf(v, fp, "unknown time zone %q (an IANA name such as Europe/Berlin or UTC)", c.TimeZone)
		}
	case "start_day":
		c.StartDay = int(p.int(v, fp, 1))
		if c.StartDay > 31 {
			p.errf(v, fp, "must be a day of the month, 1 to 31 (a day past a month's end is its last day); got %d", c.StartDay)
		}
	case "start_month":
		c.StartMonth = int(p.int(v, fp, 1))
		if c.StartMonth > 12 {
			p.errf(v, fp, "must be a month, 1 to 12; got %d", c.StartMonth)
		}
	case "start_weekday":
		c.StartWeekday = oneOf(p, v, fp, "monday, tuesday, wednesday, thursday, friday, saturday or sunday",
			choice[int]{"monday", 1}, choice[int]{"tuesday", 2}, choice[int]{"wednesday", 3}, choice[int]{"thursday", 4},
			choice[int]{"friday", 5}, choice[int]{"saturday", 6}, choice[int]{"sunday", 7})
	default:
		return false
	}
	return true
}

// checkCalendar checks a limit's calendar keys once the limit is parsed:
// they need a calendar window and a unit they apply to; a calendar window
// counts fixed windows (the default algorithm then) in this PoP only.
func (p *parser) checkCalendar(e *yaml.Node, lp string, ls *LimitSpec, seen map[string]bool) {
	c := ls.Limit.Calendar
	needs := map[string]bool{
		"start_day":     c.Unit == counter.Month || c.Unit == counter.Year,
		"start_month":   c.Unit == counter.Year,
		"start_weekday": c.Unit == counter.Week,
		"time_zone":     c.Unit != counter.NoCalendar,
	}
	for _, k := range calendarFields {
		if !seen[k] || needs[k] {
			continue
		}
		if c.Unit == counter.NoCalendar {
			p.errf(mappingValue(e, k), join(lp, k), "only a calendar window (window: day, week, month or year) has %s", k)
		} else {
			p.errf(mappingValue(e, k), join(lp, k), "a %v window has no %s", c.Unit, k)
		}
	}
	if c.Unit == counter.NoCalendar {
		return
	}
	switch {
	case !seen["algorithm"]:
		ls.Limit.Algorithm = counter.FixedWindow
	case ls.Limit.Algorithm != counter.FixedWindow:
		p.errf(mappingValue(e, "algorithm"), join(lp, "algorithm"), "a calendar window (window: %v) counts fixed windows: use fixed_window or leave algorithm out", c.Unit)
		ls.Limit.Algorithm = counter.FixedWindow
	}
	if ls.Global {
		p.errf(mappingValue(e, "scope"), join(lp, "scope"), "a global limit counts epoch-aligned windows, not calendar ones")
	}
	for _, k := range []string{"burst", "precision"} {
		if seen[k] {
			p.errf(mappingValue(e, k), join(lp, k), "a calendar window has no %s", k)
		}
	}
	l := ls.Limit
	l.Burst, l.Precision = 0, 0
	_, zerr := time.LoadLocation(c.TimeZone)
	if l.Quantity > 0 && zerr == nil && c.StartDay <= 31 && c.StartMonth <= 12 { // else reported at the field
		if err := l.Validate(); err != nil {
			p.errf(e, lp, "%v", err)
		}
	}
}

package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/counter"
)

// calendarPolicy is minimalPolicy with its limit replaced by lim (the
// limit's mapping keys start on line 5).
func calendarPolicy(lim string) string {
	return strings.Replace(minimalPolicy, "      - {name: s, algorithm: fixed_window, quantity: 10, window: 1s}",
		"      - name: s\n"+lim, 1)
}

func TestParseCalendar(t *testing.T) {
	f, err := Parse("f.yml", []byte(calendarPolicy(
		"        quantity: 10\n        window: month\n        time_zone: Europe/Berlin\n        start_day: 15\n")))
	if err != nil {
		t.Fatal(err)
	}
	l := f.Tiers["free"].Limits[0].Limit
	want := counter.Limit{Name: "s", Algorithm: counter.FixedWindow, Quantity: 10,
		Calendar: counter.Calendar{Unit: counter.Month, TimeZone: "Europe/Berlin", StartDay: 15}}
	if l != want {
		t.Errorf("limit %+v, want %+v", l, want)
	}
	f, err = Parse("f.yml", []byte(calendarPolicy("        quantity: 10\n        window: week\n        start_weekday: sunday\n")))
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Tiers["free"].Limits[0].Limit.Calendar; c.Unit != counter.Week || c.StartWeekday != 7 || c.TimeZone != "" {
		t.Errorf("week: %+v", c)
	}
}

// TestParseCalendarErrors: every bad calendar setting is a policy error
// naming the file, the line and the field.
func TestParseCalendarErrors(t *testing.T) {
	tests := []struct {
		name, lim string
		line      int
		field     string
		msg       string
	}{
		{"unknown time zone", "        quantity: 1\n        window: day\n        time_zone: Europe/Atlantis\n", 8, "tiers.free.limits[0].time_zone", "unknown time zone"},
		{"Local is not a zone", "        quantity: 1\n        window: day\n        time_zone: Local\n", 8, "tiers.free.limits[0].time_zone", "IANA"},
		{"start day 0", "        quantity: 1\n        window: month\n        start_day: 0\n", 8, "tiers.free.limits[0].start_day", "≥ 1"},
		{"start day 32", "        quantity: 1\n        window: month\n        start_day: 32\n", 8, "tiers.free.limits[0].start_day", "1 to 31"},
		{"start day not a number", "        quantity: 1\n        window: month\n        start_day: fifteenth\n", 8, "tiers.free.limits[0].start_day", "integer"},
		{"start month 13", "        quantity: 1\n        window: year\n        start_month: 13\n", 8, "tiers.free.limits[0].start_month", "1 to 12"},
		{"start weekday unknown", "        quantity: 1\n        window: week\n        start_weekday: funday\n", 8, "tiers.free.limits[0].start_weekday", "monday"},
		{"start day on a week", "        quantity: 1\n        window: week\n        start_day: 3\n", 8, "tiers.free.limits[0].start_day", "a week window has no start_day"},
		{"time zone without a calendar", "        quantity: 1\n        window: 1h\n        time_zone: UTC\n", 8, "tiers.free.limits[0].time_zone", "only a calendar window"},
		{"sliding calendar", "        quantity: 1\n        window: day\n        algorithm: sliding_window\n", 8, "tiers.free.limits[0].algorithm", "fixed windows"},
		{"global calendar", "        quantity: 1\n        window: day\n        scope: global\n", 8, "tiers.free.limits[0].scope", "calendar"},
		{"burst on a calendar", "        quantity: 1\n        window: day\n        burst: 3\n", 8, "tiers.free.limits[0].burst", "no burst"},
		{"unknown unit", "        quantity: 1\n        window: fortnight\n", 7, "tiers.free.limits[0].window", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yml", []byte(calendarPolicy(tc.lim)))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("%v does not wrap ErrInvalidPolicy", err)
			}
			// Any of the errors reported (errors.Join) may be the one.
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			found := false
			for _, e := range errs {
				var ve *ValidationError
				if errors.As(e, &ve) && ve.File == "f.yml" && ve.Line == tc.line && ve.Field == tc.field && strings.Contains(ve.Msg, tc.msg) {
					found = true
				}
			}
			if !found {
				t.Errorf("got %q, want line %d field %q msg ~%q", err, tc.line, tc.field, tc.msg)
			}
		})
	}
}

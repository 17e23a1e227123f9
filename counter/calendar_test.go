package counter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// utc is a fixed instant written in UTC, so expectations never go through
// the code under test.
func utc(y int, m time.Month, d, h, min, s int) time.Time {
	return time.Date(y, m, d, h, min, s, 0, time.UTC)
}

// calStep is one decision at a fixed instant. window and next are the
// Result's Window and Next (the true length of the window and the time to
// its end); retry is checked when the request is rejected.
type calStep struct {
	at        time.Time
	n         int64
	allowed   bool
	remaining int64
	window    time.Duration
	next      time.Duration
}

const (
	hour = time.Hour
	day  = 24 * time.Hour
)

func refund(l counter.Limit) counter.Limit {
	l.OnReject = counter.Refund
	return l
}

func calLimit(q int64, c counter.Calendar) counter.Limit {
	return counter.Limit{Name: "cal", Algorithm: counter.FixedWindow, Quantity: q, Calendar: c}
}

// TestCalendarSteps: calendar windows at month end, the leap day, both
// daylight saving changes in Europe/Berlin and America/New_York, a billing
// day offset (and one past the end of February), ISO weeks, a fiscal year,
// and zones whose midnight a change skips (America/Santiago) or repeats
// (America/Havana). Every table runs on every backend, real memcached
// included: a count made early in a month must still be there weeks later
// (a month's TTL is over memcached's 30-day relative limit).
func TestCalendarSteps(t *testing.T) {
	berlin := counter.Calendar{Unit: counter.Day, TimeZone: "Europe/Berlin"}
	newYork := counter.Calendar{Unit: counter.Day, TimeZone: "America/New_York"}
	tables := []struct {
		name  string
		limit counter.Limit
		steps []calStep
	}{
		{"month end UTC", calLimit(3, counter.Calendar{Unit: counter.Month}), []calStep{
			{utc(2026, 1, 3, 12, 0, 0), 1, true, 2, 31 * day, 28*day + 12*hour},
			{utc(2026, 1, 31, 23, 59, 59), 2, true, 0, 31 * day, time.Second},
			{utc(2026, 1, 31, 23, 59, 59), 1, false, 0, 31 * day, time.Second},
			{utc(2026, 2, 1, 0, 0, 0), 1, true, 2, 28 * day, 28 * day},
			{utc(2026, 2, 28, 23, 0, 0), 2, true, 0, 28 * day, hour},
			{utc(2026, 3, 1, 0, 0, 0), 3, true, 0, 31 * day, 31 * day},
		}},
		{"leap day", calLimit(2, counter.Calendar{Unit: counter.Day}), []calStep{
			{utc(2028, 2, 28, 23, 30, 0), 2, true, 0, day, 30 * time.Minute},
			{utc(2028, 2, 29, 0, 0, 0), 1, true, 1, day, day},
			{utc(2028, 2, 29, 23, 59, 59), 1, true, 0, day, time.Second},
			{utc(2028, 2, 29, 23, 59, 59), 1, false, 0, day, time.Second},
			{utc(2028, 3, 1, 0, 0, 0), 1, true, 1, day, day},
		}},
		{"leap February", calLimit(5, counter.Calendar{Unit: counter.Month}), []calStep{
			{utc(2028, 2, 29, 12, 0, 0), 5, true, 0, 29 * day, 12 * hour},
			{utc(2028, 3, 1, 0, 0, 0), 1, true, 4, 31 * day, 31 * day},
		}},
		{"Berlin spring forward: a 23h day", calLimit(2, berlin), []calStep{
			// 2026-03-29 00:00 CET = 03-28 23:00 UTC; ends 03-30 00:00 CEST = 03-29 22:00 UTC.
			{utc(2026, 3, 28, 22, 59, 59), 2, true, 0, day, time.Second},
			{utc(2026, 3, 28, 23, 0, 0), 2, true, 0, 23 * hour, 23 * hour},
			{utc(2026, 3, 29, 21, 59, 0), 1, false, 0, 23 * hour, time.Minute},
			{utc(2026, 3, 29, 22, 0, 0), 1, true, 1, day, day},
		}},
		{"Berlin fall back: a 25h day", calLimit(2, berlin), []calStep{
			// 2026-10-25 00:00 CEST = 10-24 22:00 UTC; ends 10-26 00:00 CET = 10-25 23:00 UTC.
			{utc(2026, 10, 24, 22, 0, 0), 2, true, 0, 25 * hour, 25 * hour},
			{utc(2026, 10, 25, 22, 0, 0), 1, false, 0, 25 * hour, hour},
			{utc(2026, 10, 25, 23, 0, 0), 1, true, 1, day, day},
		}},
		{"New York spring forward: a 23h day", calLimit(1, newYork), []calStep{
			// 2026-03-08 00:00 EST = 05:00 UTC; ends 03-09 00:00 EDT = 04:00 UTC.
			{utc(2026, 3, 8, 4, 59, 59), 1, true, 0, day, time.Second},
			{utc(2026, 3, 8, 5, 0, 0), 1, true, 0, 23 * hour, 23 * hour},
			{utc(2026, 3, 9, 3, 0, 0), 1, false, 0, 23 * hour, hour},
			{utc(2026, 3, 9, 4, 0, 0), 1, true, 0, day, day},
		}},
		{"New York fall back: a 25h day", calLimit(1, newYork), []calStep{
			// 2026-11-01 00:00 EDT = 04:00 UTC; ends 11-02 00:00 EST = 05:00 UTC.
			{utc(2026, 11, 1, 4, 0, 0), 1, true, 0, 25 * hour, 25 * hour},
			{utc(2026, 11, 2, 4, 30, 0), 1, false, 0, 25 * hour, 30 * time.Minute},
			{utc(2026, 11, 2, 5, 0, 0), 1, true, 0, day, day},
		}},
		{"New York month across fall back", calLimit(10, counter.Calendar{Unit: counter.Month, TimeZone: "America/New_York"}), []calStep{
			// November 2026: 11-01 04:00 UTC to 12-01 05:00 UTC.
			{utc(2026, 11, 1, 3, 59, 59), 10, true, 0, 31 * day, time.Second},
			{utc(2026, 11, 1, 4, 0, 0), 4, true, 6, 30*day + hour, 30*day + hour},
			{utc(2026, 11, 30, 12, 0, 0), 6, true, 0, 30*day + hour, 17 * hour},
			{utc(2026, 12, 1, 4, 59, 59), 1, false, 0, 30*day + hour, time.Second},
			{utc(2026, 12, 1, 5, 0, 0), 1, true, 9, 31 * day, 31 * day},
		}},
		{"billing day 15 in Berlin, refund", refund(calLimit(100, counter.Calendar{Unit: counter.Month, TimeZone: "Europe/Berlin", StartDay: 15})), []calStep{
			// Feb 15 00:00 CET (02-14 23:00 UTC) to Mar 15 00:00 CET (03-14 23:00 UTC): 28 days.
			{utc(2026, 3, 1, 0, 0, 0), 60, true, 40, 28 * day, 13*day + 23*hour},
			{utc(2026, 3, 14, 22, 59, 59), 41, false, 40, 28 * day, time.Second},
			// Mar 15 00:00 CET to Apr 15 00:00 CEST (04-14 22:00 UTC): 31 days less the lost hour.
			{utc(2026, 3, 14, 23, 0, 0), 41, true, 59, 31*day - hour, 31*day - hour},
			{utc(2026, 4, 14, 21, 0, 0), 60, false, 59, 31*day - hour, hour},
			{utc(2026, 4, 14, 22, 0, 0), 100, true, 0, 30 * day, 30 * day},
		}},
		{"billing day 31 clamps to February's end", calLimit(1, counter.Calendar{Unit: counter.Month, StartDay: 31}), []calStep{
			// Jan 31 to Feb 28 (2026), Feb 28 to Mar 31.
			{utc(2026, 2, 27, 0, 0, 0), 1, true, 0, 28 * day, day},
			{utc(2026, 2, 28, 0, 0, 0), 1, true, 0, 31 * day, 31 * day},
			{utc(2026, 3, 30, 12, 0, 0), 1, false, 0, 31 * day, 12 * hour},
		}},
		{"ISO week", calLimit(1, counter.Calendar{Unit: counter.Week}), []calStep{
			// 2026-01-05 is a Monday.
			{utc(2026, 1, 4, 23, 59, 59), 1, true, 0, 7 * day, time.Second},
			{utc(2026, 1, 5, 0, 0, 0), 1, true, 0, 7 * day, 7 * day},
			{utc(2026, 1, 11, 12, 0, 0), 1, false, 0, 7 * day, 12 * hour},
		}},
		{"week from Sunday in New York across spring forward", calLimit(1, counter.Calendar{Unit: counter.Week, TimeZone: "America/New_York", StartWeekday: 7}), []calStep{
			// Sunday 2026-03-08 00:00 EST (05:00 UTC) to Sunday 03-15 00:00 EDT (04:00 UTC).
			{utc(2026, 3, 10, 0, 0, 0), 1, true, 0, 7*day - hour, 5*day + 4*hour},
		}},
		{"fiscal year from April in New York", calLimit(1, counter.Calendar{Unit: counter.Year, TimeZone: "America/New_York", StartMonth: 4}), []calStep{
			// 2026-04-01 00:00 EDT = 04:00 UTC; 2027-04-01 00:00 EDT = 04:00 UTC.
			{utc(2026, 4, 1, 3, 0, 0), 1, true, 0, 365 * day, hour},
			{utc(2026, 4, 1, 4, 0, 0), 1, true, 0, 365 * day, 365 * day},
			{utc(2027, 3, 31, 12, 0, 0), 1, false, 0, 365 * day, 16 * hour},
		}},
		{"Santiago: a skipped midnight", calLimit(1, counter.Calendar{Unit: counter.Day, TimeZone: "America/Santiago"}), []calStep{
			// 2026-09-06 begins at 01:00 -03 (04:00 UTC) and ends 09-07 00:00 -03 (03:00 UTC).
			{utc(2026, 9, 6, 3, 59, 59), 1, true, 0, day, time.Second},
			{utc(2026, 9, 6, 4, 0, 0), 1, true, 0, 23 * hour, 23 * hour},
		}},
		{"Havana: a repeated midnight", calLimit(1, counter.Calendar{Unit: counter.Day, TimeZone: "America/Havana"}), []calStep{
			// 2026-11-01 begins at the first 00:00 (CDT, 04:00 UTC) and ends 11-02 00:00 CST (05:00 UTC).
			{utc(2026, 11, 1, 3, 59, 59), 1, true, 0, day, time.Second},
			{utc(2026, 11, 1, 4, 0, 0), 1, true, 0, 25 * hour, 25 * hour},
			{utc(2026, 11, 1, 4, 30, 0), 1, false, 0, 25 * hour, 24*hour + 30*time.Minute},
		}},
	}
	for _, b := range backends(t) {
		if b.allow != nil {
			// A store running the algorithm itself (counter/redis) derives
			// window ids from a fixed length: NewRemote refuses calendar
			// windows (TestCalendarValidate).
			continue
		}
		for _, tb := range tables {
			t.Run(b.name+"/"+tb.name, func(t *testing.T) {
				a := b.allower(t, tb.limit)
				key := uniqueKey(t)
				for i, s := range tb.steps {
					r, err := a.AllowN(ctx, key, s.at, s.n)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					wantRetry := time.Duration(0)
					if !s.allowed {
						wantRetry = s.next
					}
					if r.Allowed != s.allowed || r.Remaining != s.remaining || r.Window != s.window ||
						r.Next != s.next || r.RetryAfter != wantRetry || r.Reset != s.next {
						t.Errorf("step %d at %v n=%d: got %+v, want allowed=%v remaining=%d window=%v next=reset=%v retry=%v",
							i, s.at, s.n, r, s.allowed, s.remaining, s.window, s.next, wantRetry)
					}
				}
			})
		}
	}
}

// ttlStore records the TTL of every item created.
type ttlStore struct {
	counter.Store
	mu   sync.Mutex
	ttls map[string]time.Duration
}

func (s *ttlStore) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	s.mu.Lock()
	s.ttls[key] = ttl
	s.mu.Unlock()
	return s.Store.Add(ctx, key, value, ttl)
}

// TestCalendarKeysAndTTLs: each calendar window has its own key, named by
// its first instant, and lives until its end plus a second, across a
// month end and a daylight saving change; Undo and Peek find the same key.
func TestCalendarKeysAndTTLs(t *testing.T) {
	st := &ttlStore{Store: noBatch{frozenMemoryStore()}, ttls: map[string]time.Duration{}}
	lim, err := counter.New(st, calLimit(5, counter.Calendar{Unit: counter.Month, TimeZone: "Europe/Berlin"}))
	if err != nil {
		t.Fatal(err)
	}
	key := counter.Key("ttl")
	steps := []struct {
		at      time.Time
		wantKey string
		wantTTL time.Duration
	}{
		// March 2026 in Berlin: 02-28 23:00 UTC to 03-31 22:00 UTC.
		{utc(2026, 3, 10, 23, 0, 0), key + "cm." + base36(utc(2026, 2, 28, 23, 0, 0).Unix()), 20*day + 23*hour + time.Second},
		{utc(2026, 3, 31, 21, 59, 59), "", 0},
		// April: 03-31 22:00 UTC to 04-30 22:00 UTC.
		{utc(2026, 3, 31, 22, 0, 0), key + "cm." + base36(utc(2026, 3, 31, 22, 0, 0).Unix()), 30*day + time.Second},
	}
	for i, s := range steps {
		if _, err := lim.AllowN(ctx, key, s.at, 1); err != nil {
			t.Fatal(err)
		}
		if s.wantKey == "" {
			continue
		}
		if got, ok := st.ttls[s.wantKey]; !ok || got != s.wantTTL {
			t.Errorf("step %d: ttl of %s = %v (created %v), want %v; created: %v", i, s.wantKey, got, ok, s.wantTTL, st.ttls)
		}
	}
	if len(st.ttls) != 2 {
		t.Errorf("%d keys created, want 2: %v", len(st.ttls), st.ttls)
	}
	at := utc(2026, 4, 2, 0, 0, 0)
	if err := lim.Undo(ctx, key, at, 1); err != nil {
		t.Fatal(err)
	}
	r, err := lim.Peek(ctx, key, at)
	if err != nil {
		t.Fatal(err)
	}
	if r.Remaining != 5 || r.Next != 28*day+22*hour {
		t.Errorf("after Undo: %+v, want remaining 5, next 28d22h", r)
	}
}

func base36(v int64) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 36 {
		b = append([]byte{digits[v%36]}, b...)
	}
	return string(b)
}

// TestCalendarValidate: bad calendars are configuration errors.
func TestCalendarValidate(t *testing.T) {
	bad := []struct {
		name string
		l    counter.Limit
	}{
		{"unknown zone", calLimit(1, counter.Calendar{Unit: counter.Day, TimeZone: "Mars/Olympus"})},
		{"start day 32", calLimit(1, counter.Calendar{Unit: counter.Month, StartDay: 32})},
		{"start day on a day window", calLimit(1, counter.Calendar{Unit: counter.Day, StartDay: 2})},
		{"start month 13", calLimit(1, counter.Calendar{Unit: counter.Year, StartMonth: 13})},
		{"start month on a month window", calLimit(1, counter.Calendar{Unit: counter.Month, StartMonth: 2})},
		{"start weekday 8", calLimit(1, counter.Calendar{Unit: counter.Week, StartWeekday: 8})},
		{"unknown unit", calLimit(1, counter.Calendar{Unit: 9})},
		{"sliding", counter.Limit{Quantity: 1, Calendar: counter.Calendar{Unit: counter.Day}}},
		{"window set too", counter.Limit{Algorithm: counter.FixedWindow, Quantity: 1, Window: time.Hour, Calendar: counter.Calendar{Unit: counter.Day}}},
		{"zero quantity", calLimit(0, counter.Calendar{Unit: counter.Day})},
	}
	for _, tc := range bad {
		if err := tc.l.Validate(); !errors.Is(err, counter.ErrBadLimit) {
			t.Errorf("%s: Validate = %v, want ErrBadLimit", tc.name, err)
		}
		if _, err := counter.NewLocal(tc.l); err == nil {
			t.Errorf("%s: NewLocal accepted it", tc.name)
		}
	}
	fiscal := calLimit(1, counter.Calendar{Unit: counter.Year, TimeZone: "Asia/Tokyo", StartMonth: 4, StartDay: 1})
	if err := fiscal.Validate(); err != nil {
		t.Errorf("fiscal year: %v", err)
	}
	if _, err := counter.NewRemote(fiscal); !errors.Is(err, counter.ErrBadLimit) {
		t.Errorf("NewRemote of a calendar window: %v, want ErrBadLimit", err)
	}
}

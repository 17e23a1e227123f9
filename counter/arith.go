package counter

import (
	"math/bits"
	"time"
)

// This file holds the pure arithmetic of the algorithms, shared by the
// store-backed and in-process limiters so both decide identically. Window
// algorithms work in whole milliseconds; the token bucket in nanoseconds.

// maxTau bounds a token bucket's tolerance (burst × emission interval) so
// that theoretical arrival times stay far from int64 overflow.
const maxTau = int64(1) << 60

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// unixMs is now in whole milliseconds, rounded down.
func unixMs(now time.Time) int64 { return floorDiv(now.UnixNano(), 1e6) }

// untilMs is the duration from now (unix ns) to the instant t (unix ms).
func untilMs(t int64, now int64) time.Duration {
	return time.Duration(t*1e6 - now)
}

// window is the geometry of a (sub-)windowed limit: counts[0..n] are the
// sub-windows id−n … id, counts[n] the current one; counts[0] is the oldest,
// only partly inside the window. A fixed window is n = 0. A calendar
// window (cal set) is a fixed window whose id is its start in unix
// seconds and whose length varies (sub is then 1: slack is in units).
type window struct {
	sub int64 // sub-window length in ms
	n   int   // sub-windows per window (0 for a fixed window)
	q   int64 // Quantity
	cal *calendar
}

// windowOf returns the window arithmetic of a validated window limit: N
// sub-windows for a sliding window, one window for a fixed window.
func windowOf(l Limit) (window, error) {
	if l.Calendar.Unit != NoCalendar {
		cal, err := newCalendar(l.Calendar)
		if err != nil {
			return window{}, err
		}
		return window{sub: 1, q: l.Quantity, cal: cal}, nil
	}
	if l.Algorithm == FixedWindow {
		return window{sub: l.Window.Milliseconds(), q: l.Quantity}, nil
	}
	n := l.precision()
	return window{sub: l.Window.Milliseconds() / int64(n), n: n, q: l.Quantity}, nil
}

// locate returns the id of the (sub-)window holding the instant ms (unix
// ms) and its first ms.
func (w window) locate(ms int64) (id, start int64) {
	if w.cal != nil {
		s := w.cal.span(ms)
		return floorDiv(s.start, 1000), s.start
	}
	id = floorDiv(ms, w.sub)
	return id, id * w.sub
}

// id is locate's id alone.
func (w window) id(ms int64) int64 {
	id, _ := w.locate(ms)
	return id
}

// calSpan is the calendar window of id (cal set).
func (w window) calSpan(id int64) span { return w.cal.span(id * 1000) }

// satSum returns the sum of c saturated at q+1 (anything above q is over).
func satSum(c []int64, q int64) int64 {
	s := int64(0)
	for _, v := range c {
		if v > q || s+v > q {
			return q + 1
		}
		s += v
	}
	return s
}

// slack returns q × sub minus the weighted estimate (in units × ms) and
// true when the estimate is at most q; 0 and false otherwise.
func (w window) slack(counts []int64, e int64) (int64, bool) {
	if w.n == 0 {
		s := satSum(counts, w.q)
		if s > w.q {
			return 0, false
		}
		return (w.q - s) * w.sub, true
	}
	full := satSum(counts[1:], w.q)
	if full > w.q {
		return 0, false
	}
	budget := (w.q - full) * w.sub
	hi, lo := bits.Mul64(uint64(counts[0]), uint64(w.sub-e))
	if hi != 0 || lo > uint64(budget) {
		return 0, false
	}
	return budget - int64(lo), true
}

// charged reports whether a rejected request of n units, included in
// counts[w.n], stays counted in CountFirst mode: always for a fixed window,
// for a sliding window only if the estimate without it was not over q.
func (w window) charged(counts []int64, e, n int64) bool {
	if w.n == 0 {
		return true
	}
	counts[w.n] -= n
	_, under := w.slack(counts, e)
	counts[w.n] += n
	return under
}

// remaining is how many whole units fit under q now.
func (w window) remaining(counts []int64, e int64) int64 {
	if w.n == 0 {
		return max(0, w.q-satSum(counts, w.q))
	}
	sl, ok := w.slack(counts, e)
	if !ok {
		return 0
	}
	return sl / w.sub
}

// result builds the answer at now (unix ns; in sub-window id at elapsed e
// ms) from the counts after the decision.
//
// sl is w.slack(counts, e) when the caller has it (0 when over), or −1.
func (w window) result(counts []int64, id, e int64, now int64, n int64, allowed bool, sl int64) Result {
	r := Result{Allowed: allowed, Limit: w.q}
	if w.n == 0 {
		r.Count = counts[0]
	}
	if sl >= 0 {
		r.Remaining = sl / w.sub
	} else {
		r.Remaining = w.remaining(counts, e)
	}
	if w.cal != nil {
		s := w.calSpan(id)
		r.Window = time.Duration(s.end-s.start) * time.Millisecond
		r.Next = max(0, untilMs(s.end, now))
		if counts[0] > 0 {
			r.Reset = r.Next
		}
		if !allowed {
			r.RetryAfter = r.Next
			if n > w.q {
				r.RetryAfter = Never
			}
		}
		return r
	}
	r.Window = time.Duration(w.sub*int64(max(w.n, 1))) * time.Millisecond
	// Reset: the newest non-zero sub-window j has slid out entirely at the
	// start of sub-window id−n+j+n+1.
	for j := len(counts) - 1; j >= 0; j-- {
		if counts[j] > 0 {
			r.Reset = max(0, untilMs((id+int64(j)+1)*w.sub, now))
			break
		}
	}
	if !allowed {
		r.RetryAfter = w.retryAfter(counts, id, e, now, n)
	}
	r.Next = w.next(counts, id, e, now, r)
	return r
}

// maxExactNext bounds the sub-windows for which next searches the exact
// instant (retryAfter costs O(n²) in the worst case); above, Next is the
// Reset capped at the window: later than the truth, the safe side.
const maxExactNext = 64

// next is Result.Next of r: the time until Remaining+1 units would pass,
// at most the window.
func (w window) next(counts []int64, id, e int64, now int64, r Result) time.Duration {
	switch {
	case w.n == 0:
		return max(0, untilMs((id+1)*w.sub, now))
	case r.Remaining >= w.q:
		return r.Window
	case w.n > maxExactNext:
		return min(r.Reset, r.Window)
	}
	return min(w.retryAfter(counts, id, e, now, r.Remaining+1), r.Window)
}

// retryAfter is the time until a lone client's request of n units is
// admitted, the counts staying as they are: the first instant the
// estimate plus n falls to q or below.
func (w window) retryAfter(counts []int64, id, e int64, now int64, n int64) time.Duration {
	if n > w.q {
		return Never
	}
	if w.n == 0 {
		return untilMs((id+1)*w.sub, now)
	}
	var shifted [2]int64
	for k := 0; k <= w.n+1; k++ {
		// In sub-window id+k the window holds counts[k..n] then zeros.
		var c []int64
		if k <= w.n {
			c = counts[k:]
		} else {
			c = shifted[:1]
		}
		old := c[0]
		full := satSum(c[1:], w.q)
		e0 := int64(0)
		if k == 0 {
			e0 = e
		}
		if full+n > w.q {
			continue
		}
		emin := e0
		if old > 0 {
			budget := (w.q - n - full) * w.sub
			emin = max(e0, w.sub-budget/old)
		}
		if emin < w.sub {
			d := untilMs((id+int64(k))*w.sub+emin, now)
			return max(d, time.Nanosecond)
		}
	}
	// Unreachable: once every count has slid out the estimate is 0.
	return untilMs((id+int64(w.n)+2)*w.sub, now)
}

// emission is the token bucket's emission interval: Window / Quantity
// rounded up, so the bucket never refills faster than configured.
func emission(l Limit) int64 {
	w, q := int64(l.Window), l.Quantity
	return (w + q - 1) / q
}

// gcra is the token bucket as the generic cell rate algorithm over the
// theoretical arrival time tat (unix ns): interval t per unit, tolerance
// tau = burst × t.
type gcra struct {
	t, tau, burst int64
	count         bool // OnReject == Count or CountFirst
	first         bool // OnReject == CountFirst
}

// decide returns the new tat and whether n units pass at now (unix ns).
// Rejected requests leave tat unchanged in Refund mode; in Count mode they
// consume their units too, the debt bounded to one burst (tat ≤ now + 2τ);
// in CountFirst mode only while the bucket is not in debt already
// (tat − now ≤ τ).
func (g gcra) decide(tat, now, n int64) (int64, bool) {
	if n > g.burst {
		return tat, false
	}
	base := max(tat, now)
	next := base + n*g.t
	if next-now <= g.tau {
		return next, true
	}
	if g.count && (!g.first || tat-now <= g.tau) {
		return max(tat, min(next, now+2*g.tau)), false
	}
	return tat, false
}

// result is the answer at now (unix ns) with the new tat.
func (g gcra) result(tat, now, n int64, allowed bool) Result {
	r := Result{Allowed: allowed, Limit: g.burst, Window: time.Duration(g.tau)}
	used := max(tat, now) - now
	r.Remaining = max(0, (g.tau-used)/g.t)
	r.Reset = time.Duration(used)
	// The next token: when used falls to tau − (Remaining+1)·t.
	r.Next = time.Duration(g.tau)
	if r.Remaining < g.burst {
		r.Next = min(time.Duration(used-(g.tau-(r.Remaining+1)*g.t)), r.Next)
	}
	if !allowed {
		if n > g.burst {
			r.RetryAfter = Never
		} else {
			r.RetryAfter = time.Duration(max(tat, now) + n*g.t - g.tau - now)
		}
	}
	return r
}

func newGCRA(l Limit) gcra {
	t := emission(l)
	return gcra{t: t, tau: t * l.burst(), burst: l.burst(), count: l.OnReject != Refund, first: l.OnReject == CountFirst}
}

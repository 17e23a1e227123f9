package accuracy

import "time"

// SlidingLog is the exact reference: a request of n units at t is allowed
// when the units counted in the window (t−Window, t] plus n do not exceed
// Quantity. With CountAll every request counts (rejected ones too, like
// Cloudflare's counter and counter.Count); otherwise only allowed ones do.
//
// Calls must come in non-decreasing time order per key. Not safe for
// concurrent use. Memory is bounded by the requests inside one window per
// key; Forget drops keys.
type slidingLog struct {
	Quantity int64
	Window   time.Duration
	CountAll bool
	logs     map[string]*ring
}

type stamp struct {
	at time.Duration
	n  int64
}

// ring is a FIFO of stamps with their running sum.
type ring struct {
	buf        []stamp
	head, size int
	sum        int64
}

func (r *ring) push(s stamp) {
	if r.size == len(r.buf) {
		nb := make([]stamp, max(8, 2*len(r.buf)))
		for i := 0; i < r.size; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = s
	r.size++
	r.sum += s.n
}

func (r *ring) expire(before time.Duration) {
	for r.size > 0 && r.buf[r.head].at <= before {
		r.sum -= r.buf[r.head].n
		r.head = (r.head + 1) % len(r.buf)
		r.size--
	}
}

// NewSlidingLog returns an exact sliding log for one limit.
func newSlidingLog(quantity int64, window time.Duration, countAll bool) *slidingLog {
	return &slidingLog{Quantity: quantity, Window: window, CountAll: countAll, logs: map[string]*ring{}}
}

// Allow decides n units for key at offset t and records them.
func (s *slidingLog) allow(key string, t time.Duration, n int64) bool {
	r := s.logs[key]
	if r == nil {
		r = &ring{}
		s.logs[key] = r
	}
	r.expire(t - s.Window)
	ok := r.sum+n <= s.Quantity
	if ok || s.CountAll {
		r.push(stamp{t, n})
	}
	return ok
}

// Count returns the units counted for key in (t−Window, t].
func (s *slidingLog) count(key string, t time.Duration) int64 {
	r := s.logs[key]
	if r == nil {
		return 0
	}
	r.expire(t - s.Window)
	return r.sum
}

// Forget drops key's log.
func (s *slidingLog) forget(key string) { delete(s.logs, key) }

// FixedWindowExcess returns how many admitted units exceed quantity in their
// fixed window: windows are [k·window, (k+1)·window) of the offsets given.
// admitted must hold the offsets of admitted single-unit requests of one
// key, in any order. Zero means no over-admission.
func fixedWindowExcess(admitted []time.Duration, quantity int64, window time.Duration) int64 {
	per := map[int64]int64{}
	for _, at := range admitted {
		per[int64(at/window)]++
	}
	var excess int64
	for _, n := range per {
		if n > quantity {
			excess += n - quantity
		}
	}
	return excess
}

// TokenBucketExcess replays admitted single-unit requests of one key (sorted
// by time) through an exact token bucket that starts full with burst tokens
// and refills quantity per window, and returns how many found no token.
// slack is the uncertainty of each timestamp (between when a request was
// timed and when the limiter decided it): any interval may then hold
// 2·slack more refill, so the bucket's capacity grows by that much.
func tokenBucketExcess(admitted []time.Duration, quantity, burst int64, window, slack time.Duration) int64 {
	if burst <= 0 {
		burst = quantity
	}
	// Work in token·nanoseconds to stay exact: one token = window ns.
	per := int64(window) / quantity // ns per token (rounded down: in the requests' favour)
	if per <= 0 {
		per = 1
	}
	capacity := burst*per + 2*int64(slack)
	level := capacity // tokens in units of per-ns
	var last time.Duration
	var excess int64
	for i, at := range admitted {
		if i > 0 {
			if gain := int64(at - last); gain > 0 {
				level = min(capacity, level+gain)
			}
		}
		last = at
		if level >= per {
			level -= per
		} else {
			excess++
		}
	}
	return excess
}

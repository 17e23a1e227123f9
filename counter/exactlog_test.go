package counter_test

import (
	"time"

	"github.com/poplimit/poplimit/counter"
)

// ExactLog is the exact sliding log (test support; bench has its own
// SlidingLog): the reference the sliding window
// counter is measured against (tests, `popbench accuracy`). For each key it
// keeps every counted request of the last window, so a request of n units
// at now passes iff the units counted in (now − Window, now] plus n are at
// most Quantity. Count mode logs rejected requests too, Refund mode only
// admitted ones. Time is in whole milliseconds like the sliding window.
//
// Not safe for concurrent use; memory grows with the requests in a window.
// Calls for one key must come in non-decreasing order of now.
type ExactLog struct {
	l    counter.Limit
	logs map[string]*exactLog
}

type exactLog struct {
	at, n []int64 // ms and units, ascending; head is the first live entry
	head  int
	sum   int64 // units of at[head:]
}

// NewExactLog returns an empty log for l (Quantity, Window, OnReject are
// used; the algorithm is ignored).
func NewExactLog(l counter.Limit) *ExactLog {
	return &ExactLog{l: l, logs: make(map[string]*exactLog)}
}

// Count returns the units counted for key in (now − Window, now].
func (x *ExactLog) Count(key string, now time.Time) int64 {
	lg := x.logs[key]
	if lg == nil {
		return 0
	}
	x.expire(lg, now.UnixMilli())
	return lg.sum
}

func (x *ExactLog) expire(lg *exactLog, ms int64) {
	w := x.l.Window.Milliseconds()
	for lg.head < len(lg.at) && lg.at[lg.head] <= ms-w {
		lg.sum -= lg.n[lg.head]
		lg.head++
	}
	if lg.head > 1024 && lg.head*2 > len(lg.at) {
		lg.at = append(lg.at[:0], lg.at[lg.head:]...)
		lg.n = append(lg.n[:0], lg.n[lg.head:]...)
		lg.head = 0
	}
}

// AllowN decides and logs a request of n units for key at now.
func (x *ExactLog) AllowN(key string, now time.Time, n int64) bool {
	lg := x.logs[key]
	if lg == nil {
		lg = &exactLog{}
		x.logs[key] = lg
	}
	ms := now.UnixMilli()
	x.expire(lg, ms)
	ok := lg.sum+n <= x.l.Quantity
	if ok || x.l.OnReject == counter.Count {
		lg.at = append(lg.at, ms)
		lg.n = append(lg.n, n)
		lg.sum += n
	}
	return ok
}

package pop

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// DeadlineConfig configures the store deadline. Zero means default.
//
// The deadline of one decision's store calls adapts to the store's
// observed latency: Multiple × the 99th percentile of the decisions of the
// last ~2 s (deadlineGens × deadlineGen), clamped to [Floor, Ceiling]. It
// starts at Ceiling (nothing observed yet: a cold start under a burst must
// not look like a dead store) and moves once 32 calls have been seen. A
// call that ran out of time is observed as taking the deadline, so a store
// that slows down as a whole raises it (up to Ceiling) instead of having
// every call time out.
type DeadlineConfig struct {
	// Fixed, if positive, disables adaptation: every decision gets Fixed
	// (Config.StoreDeadline sets it).
	Fixed time.Duration
	// Floor is the shortest deadline; default 250ms. A loopback round
	// trip through mcproxy is far shorter, but a host whose cores are
	// saturated schedules the worker hundreds of milliseconds late, and a
	// timeout on a store that did answer costs exactness (the local budget
	// decides that request); a dead store is not waited on anyway
	// (refused connections fail at once, the breaker opens).
	Floor time.Duration
	// Ceiling is the longest deadline; default 1s: the most a request
	// waits on a store that stopped answering, until the breaker opens
	// (BreakerConfig.Window of no success).
	Ceiling time.Duration
	// Multiple of the recent p99 latency; default 4.
	Multiple float64
}

func (c DeadlineConfig) floor() time.Duration {
	if c.Floor > 0 {
		return c.Floor
	}
	return 250 * time.Millisecond
}

func (c DeadlineConfig) ceiling() time.Duration {
	if c.Ceiling > 0 {
		return max(c.Ceiling, c.floor())
	}
	return max(time.Second, c.floor())
}

// SocketTimeout is the socket timeout of the store this deadline bounds
// (counter/store.Config.Timeout): the longest deadline a decision can get,
// Fixed if set, else the Ceiling (defaults applied, never below the
// Floor). A client that does not stop when its
// context ends (gomemcache) then never cuts a call the deadline still
// allows, nor outlives the longest one.
func (c DeadlineConfig) SocketTimeout() time.Duration {
	if c.Fixed > 0 {
		return c.Fixed
	}
	return c.ceiling()
}

func (c DeadlineConfig) multiple() float64 {
	if c.Multiple > 0 {
		return c.Multiple
	}
	return 4
}

// Latency histogram: 4 buckets per power of two of microseconds.
const (
	latBuckets   = 4 * 32
	deadlineGens = 4
	deadlineGen  = 500 * time.Millisecond
	minSamples   = 32
)

// deadline tracks recent store latency and derives the store deadline.
// Safe for concurrent use; Current is one atomic load, Observe two atomic
// adds (and, once per deadlineGen, a recomputation).
type deadline struct {
	cfg      DeadlineConfig
	onChange func(time.Duration) // called by rotate when the deadline moves
	current  atomic.Int64        // ns
	next     atomic.Int64        // unix ns of the next generation switch
	gen      atomic.Int64        // index of the generation being written
	hist     [deadlineGens][latBuckets]atomic.Int64
}

func newDeadline(cfg DeadlineConfig, onChange func(time.Duration)) *deadline {
	d := &deadline{cfg: cfg, onChange: onChange}
	if cfg.Fixed > 0 {
		d.current.Store(int64(cfg.Fixed))
	} else {
		d.current.Store(int64(cfg.ceiling()))
	}
	return d
}

// Current is the deadline to give the next decision's store calls.
func (d *deadline) Current() time.Duration { return time.Duration(d.current.Load()) }

// latBucket maps a latency to its histogram bucket.
func latBucket(lat time.Duration) int {
	us := uint64(max(lat/time.Microsecond, 1))
	e := bits.Len64(us) - 1 // 2^e ≤ us
	sub := 0
	if e >= 2 {
		sub = int(us>>(e-2)) & 3
	}
	return min(e*4+sub, latBuckets-1)
}

// bucketUpper is the upper bound of bucket i.
func bucketUpper(i int) time.Duration {
	e, sub := i/4, i%4
	us := uint64(1) << e
	if e >= 2 {
		us += uint64(sub+1) << (e - 2)
	} else {
		us <<= 1
	}
	return time.Duration(us) * time.Microsecond
}

// Observe records one decision's store time at now.
func (d *deadline) Observe(now time.Time, lat time.Duration) {
	if d.cfg.Fixed > 0 {
		return
	}
	t := now.UnixNano()
	next := d.next.Load()
	if t >= next && d.next.CompareAndSwap(next, t+int64(deadlineGen)) {
		d.rotate()
	}
	g := d.gen.Load() % deadlineGens
	d.hist[g][latBucket(lat)].Add(1)
}

// rotate recomputes the deadline from every generation and clears the
// oldest, which becomes the one written. Run by one caller at a time (the
// winner of the switch).
func (d *deadline) rotate() {
	var sum [latBuckets]int64
	total := int64(0)
	for g := range d.hist {
		for i := range d.hist[g] {
			v := d.hist[g][i].Load()
			sum[i] += v
			total += v
		}
	}
	if total >= minSamples {
		rank := total - total/100 // the 99th percentile
		acc := int64(0)
		for i, v := range sum {
			acc += v
			if acc >= rank {
				want := time.Duration(float64(bucketUpper(i)) * d.cfg.multiple())
				nd := min(max(want, d.cfg.floor()), d.cfg.ceiling())
				if old := d.current.Swap(int64(nd)); old != int64(nd) && d.onChange != nil {
					d.onChange(nd)
				}
				break
			}
		}
	}
	g := (d.gen.Load() + 1) % deadlineGens
	for i := range d.hist[g] {
		d.hist[g][i].Store(0)
	}
	d.gen.Store(g)
}

package counter_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"pgregory.net/rapid"
)

// burstCase is one drawn scenario: a limit, a burst of up to 5× its
// allowance at one key from a random instant of a window, and the cost
// of the request that follows it.
type burstCase struct {
	l      counter.Limit
	start  time.Time       // the burst's first request
	gaps   []time.Duration // each request's delay after the previous one
	costs  []int64
	probeN int64
}

func drawBurst(t *rapid.T) burstCase {
	alg := counter.Algorithm(rapid.IntRange(0, 2).Draw(t, "algorithm"))
	mode := counter.OnReject(rapid.IntRange(0, 2).Draw(t, "onReject"))
	q := rapid.Int64Range(1, 60).Draw(t, "quantity")
	l := counter.Limit{Algorithm: alg, Quantity: q, OnReject: mode}
	switch alg {
	case counter.SlidingWindow:
		p := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "precision")
		l.Precision = p
		l.Window = time.Duration(int64(p)*rapid.Int64Range(5, 2500).Draw(t, "subMs")) * ms
	case counter.FixedWindow:
		l.Window = time.Duration(rapid.Int64Range(10, 10000).Draw(t, "windowMs")) * ms
	default:
		l.Window = time.Duration(rapid.Int64Range(10, 10000).Draw(t, "windowMs")) * ms
		l.Burst = rapid.Int64Range(0, 2*q).Draw(t, "burst")
	}
	c := burstCase{l: l, probeN: rapid.Int64Range(1, min(3, q)).Draw(t, "probeN")}
	// A random instant of a window (windows are aligned on the epoch, and
	// t0 on a day).
	c.start = t0.Add(time.Duration(rapid.Int64Range(0, l.Window.Milliseconds()-1).Draw(t, "offsetMs")) * ms)
	size := rapid.IntRange(0, int(5*q)).Draw(t, "burstSize")
	spread := l.Window.Milliseconds() / 10
	for i := 0; i < size; i++ {
		c.gaps = append(c.gaps, time.Duration(rapid.Int64Range(0, max(1, spread/int64(max(size, 1)))).Draw(t, "gapMs"))*ms)
		c.costs = append(c.costs, rapid.Int64Range(1, 3).Draw(t, "n"))
	}
	return c
}

// refusedAfter plays c's burst on a at key, then asks for c.probeN at the
// burst's last instant until refused (at most allowance+1 times), and
// returns that instant and the refusal.
func (c burstCase) refusedAfter(t *rapid.T, a counter.Allower, key string) (time.Time, counter.Result, bool) {
	now := c.start
	for i, gap := range c.gaps {
		now = now.Add(gap)
		if _, err := a.AllowN(ctx, key, now, c.costs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := int64(0); i <= c.l.Quantity+c.l.Burst+1; i++ {
		r, err := a.AllowN(ctx, key, now, c.probeN)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			return now, r, true
		}
	}
	return now, counter.Result{}, false
}

// TestRetryAfterAdmitsAfterAnyBurst: after a random burst (up to 5× the
// allowance, every algorithm and on_reject mode, costs 1 to 3, from any
// instant of a window), a lone client that waits exactly the RetryAfter
// of its next refused request is admitted, and one step of the
// algorithm's granularity earlier (1 ms for windows, 1 ns for the bucket)
// it is still refused: RetryAfter is neither early nor late. Every
// backend: in-process, the memory store, real memcached (gomemcache and
// pipelined) and Redis. rapid prints the seed of a failure
// (-rapid.seed reproduces it).
func TestRetryAfterAdmitsAfterAnyBurst(t *testing.T) {
	var run atomic.Int64
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				c := drawBurst(rt)
				key := func() string { return uniqueKey(t, strconv.FormatInt(run.Add(1), 10)) }
				at, r, ok := c.refusedAfter(rt, b.allower(t, c.l), key())
				if !ok || r.RetryAfter == counter.Never {
					return
				}
				if r.RetryAfter <= 0 {
					rt.Fatalf("%v: refused with RetryAfter %v", c.l, r.RetryAfter)
				}
				// On time: admitted.
				a := b.allower(t, c.l)
				k := key()
				at2, r2, _ := c.refusedAfter(rt, a, k)
				if !at2.Equal(at) || r2 != r {
					rt.Fatalf("%v: the same burst answered %+v, then %+v", c.l, r, r2)
				}
				got, err := a.AllowN(ctx, k, at.Add(r.RetryAfter), c.probeN)
				if err != nil {
					rt.Fatal(err)
				}
				if !got.Allowed {
					rt.Fatalf("%v: refused %+v; waited its RetryAfter %v and refused again: %+v", c.l, r, r.RetryAfter, got)
				}
				// One step early: refused.
				step := ms
				if c.l.Algorithm == counter.TokenBucket {
					step = time.Nanosecond
				}
				if r.RetryAfter < step {
					return
				}
				a = b.allower(t, c.l)
				k = key()
				c.refusedAfter(rt, a, k)
				early, err := a.AllowN(ctx, k, at.Add(r.RetryAfter-step), c.probeN)
				if err != nil {
					rt.Fatal(err)
				}
				if early.Allowed {
					rt.Fatalf("%v: refused %+v; admitted %v before its RetryAfter %v", c.l, r, step, r.RetryAfter)
				}
			})
		})
	}
}

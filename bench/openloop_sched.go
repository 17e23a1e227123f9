package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// openOp is one request of an open-loop path: key is the Zipf identity
// index, worker the sending goroutine (a path may keep state per worker).
// An error counts the request as failed; its latency is still recorded.
type openOp func(ctx context.Context, worker int, key uint64) error

// openSchedule is one open-loop run: Rate requests per second for
// Duration, request i intended at start + i/Rate, sent by whichever of the
// Workers sending goroutines is free first (each claims the next unclaimed
// request when its previous one is answered, sleeps until its intended
// time, and sends it), each worker with its own Zipf stream of Keys
// identities. A slow request delays only its own worker: the requests
// intended meanwhile go to the others, as an edge serves each user's
// request on its own goroutine.
type openSchedule struct {
	Rate     float64
	Duration time.Duration
	Workers  int
	Keys     uint64
	ZipfS    float64
	Seed     uint64
	// Grace is how long after Duration the run may go on sending late
	// requests; what is still unsent then is counted in Unsent (its
	// latency unknown, not recorded). Default Duration.
	Grace time.Duration
}

// openCounts is what one open-loop run measured.
type openCounts struct {
	// Latency is from each request's intended send time to its answer
	// (no coordinated omission: a request that found every worker busy
	// carries its wait); Service from its actual start; Lateness is the
	// generator's own error, the delay between the intended time and the
	// wake-up of the worker that was idle (asleep) waiting for it.
	Latency, Service, Lateness *Latency
	// Sent, Errors: requests made, and those that failed. Queued counts
	// requests that started late because every worker was busy at their
	// intended time (their latency says by how much). Unsent is what the
	// grace period cut.
	Sent, Errors, Queued, Unsent int64
	Seconds                      float64
}

func newOpenCounts() *openCounts {
	return &openCounts{Latency: NewLatency(), Service: NewLatency(), Lateness: NewLatency()}
}

func (c *openCounts) merge(o *openCounts) {
	c.Latency.Merge(o.Latency)
	c.Service.Merge(o.Service)
	c.Lateness.Merge(o.Lateness)
	c.Sent += o.Sent
	c.Errors += o.Errors
	c.Queued += o.Queued
	c.Unsent += o.Unsent
	c.Seconds += o.Seconds
}

// total returns the number of requests the schedule intends.
func (s openSchedule) total() int64 { return int64(s.Duration.Seconds() * s.Rate) }

// intended returns request i's offset from the start.
func (s openSchedule) intended(i int64) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / s.Rate)
}

// runOpen runs the schedule against op and returns its counts (see
// runOpenInto).
func runOpen(ctx context.Context, s openSchedule, op openOp) (*openCounts, error) {
	per := newWorkerCounts(max(1, s.Workers))
	err := runOpenInto(ctx, s, op, per)
	return mergeCounts(per), err
}

// newWorkerCounts returns one openCounts per worker, for runOpenInto.
func newWorkerCounts(workers int) []*openCounts {
	per := make([]*openCounts, workers)
	for i := range per {
		per[i] = newOpenCounts()
	}
	return per
}

// mergeCounts merges per-worker counts into one.
func mergeCounts(per []*openCounts) *openCounts {
	out := newOpenCounts()
	for _, c := range per {
		out.merge(c)
	}
	return out
}

// runOpenInto runs the schedule against op, worker w adding what it
// measured to per[w] (len(per) workers; s.Workers is ignored), so that
// successive runs of one path accumulate into the same histograms without
// allocating new ones; the run's wall time is added to per[0].Seconds. It
// returns when every intended request was sent and answered, when the
// grace period ends, or when ctx ends (then with ctx's error).
func runOpenInto(ctx context.Context, s openSchedule, op openOp, per []*openCounts) error {
	if s.Grace <= 0 {
		s.Grace = s.Duration
	}
	n := s.total()
	start := time.Now().Add(time.Millisecond) // every worker is asleep at t0
	stop := start.Add(s.Duration + s.Grace)
	var next, sent atomic.Int64
	var wg sync.WaitGroup
	for w := range per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent.Add(openWorker(ctx, s, op, w, per[w], &next, n, start, stop))
		}()
	}
	wg.Wait()
	per[0].Unsent += n - sent.Load()
	per[0].Seconds += time.Since(start).Seconds()
	return ctx.Err()
}

// openWorker sends requests of s into c until none is left (n in all,
// claimed through next) or stop or ctx ends; it returns how many it sent.
func openWorker(ctx context.Context, s openSchedule, op openOp, w int, c *openCounts, next *atomic.Int64, n int64, start, stop time.Time) int64 {
	z, err := NewZipf(s.Seed*1000+uint64(w), s.ZipfS, s.Keys)
	if err != nil {
		z = nil // a bad ZipfS: key 0 only (RunOpenLoop checks it first)
	}
	sl := newSleeper()
	defer sl.close()
	var sent int64
	for {
		i := next.Add(1) - 1
		if i >= n {
			return sent
		}
		t := start.Add(s.intended(i))
		if t.After(stop) || time.Now().After(stop) || ctx.Err() != nil {
			return sent
		}
		slept := false
		if wait := time.Until(t); wait > 0 {
			sl.sleep(wait, ctx.Done())
			if ctx.Err() != nil {
				return sent
			}
			slept = true
		}
		var key uint64
		if z != nil {
			key = z.Next()
		}
		t0 := time.Now()
		err := op(ctx, w, key)
		t1 := time.Now()
		sent++
		c.Sent++
		if err != nil {
			c.Errors++
		}
		c.Latency.Record(t1.Sub(t))
		c.Service.Record(t1.Sub(t0))
		if slept {
			c.Lateness.Record(t0.Sub(t))
		} else {
			c.Queued++
		}
	}
}

// runClosed runs op for d with conns goroutines in a closed loop (each
// sends its next request when the previous is answered) and returns the
// requests answered per second: the capacity the open-loop rates are
// fractions of.
func runClosed(ctx context.Context, d time.Duration, conns int, keys uint64, zipfS float64, op openOp) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	var total int64
	var wg sync.WaitGroup
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			z, err := NewZipf(uint64(900+w), zipfS, keys)
			if err != nil {
				return
			}
			var k int64
			for ctx.Err() == nil {
				if op(ctx, w, z.Next()) == nil && ctx.Err() == nil {
					k++
				}
			}
			mu.Lock()
			total += k
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total == 0 {
		return 0, ErrOpenLoop
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

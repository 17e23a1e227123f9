package openloop

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/bench"
)

// openOp is one request of an open-loop path: key is the Zipf identity
// index, worker the sending goroutine (a path may keep state per worker).
// An error counts the request as failed; its latency is still recorded.
type openOp func(ctx context.Context, worker int, key uint64) error

// openSchedule is one open-loop run: Rate requests per second for
// Duration, request i intended at start + i/Rate, sent by whichever
// sending goroutine is free first (each claims the next unclaimed request
// when its previous one is answered, sleeps until its intended time, and
// sends it), each sender with its own Zipf stream of Keys identities.
// The run starts Workers senders and starts one more whenever a sender
// is about to send while no other is free to wait for the next request,
// up to MaxWorkers: so, as in an edge that serves every request on its
// own goroutine, a request never waits for the generator while the
// path's answers are slow (only a path that keeps more than MaxWorkers
// requests in flight queues them), and a slow request delays no other.
type openSchedule struct {
	Rate     float64
	Duration time.Duration
	// Workers is the senders started with the run; MaxWorkers the most
	// it may grow to (default, or below Workers: Workers, a fixed pool).
	Workers, MaxWorkers int
	Keys                uint64
	ZipfS               float64
	Seed                uint64
	// Grace is how long after Duration the run may go on sending late
	// requests; what is still unsent then is counted in Unsent (its
	// latency unknown, not recorded). Default Duration.
	Grace time.Duration
}

// openCounts is what one open-loop run measured.
type openCounts struct {
	// Latency is from each request's intended send time to its answer
	// (no coordinated omission: a request that found every sender busy
	// carries its wait); Service from its actual start; Lateness is the
	// generator's own error, the delay between the intended time and the
	// wake-up of the sender that was idle (asleep) waiting for it.
	Latency, Service, Lateness *bench.Latency
	// Sent, Errors: requests made, and those that failed. Queued counts
	// requests that started late because every sender was busy at their
	// intended time (their latency says by how much; with room to grow
	// the pool, none should). Unsent is what the grace period cut.
	Sent, Errors, Queued, Unsent int64
	// Senders is the most senders one run (slice) of these counts had
	// going at once; merged, the largest.
	Senders int
	Seconds float64
}

func newOpenCounts() *openCounts {
	return &openCounts{Latency: bench.NewLatency(), Service: bench.NewLatency(), Lateness: bench.NewLatency()}
}

func (c *openCounts) merge(o *openCounts) {
	c.Latency.Merge(o.Latency)
	c.Service.Merge(o.Service)
	c.Lateness.Merge(o.Lateness)
	c.Sent += o.Sent
	c.Errors += o.Errors
	c.Queued += o.Queued
	c.Unsent += o.Unsent
	c.Senders = max(c.Senders, o.Senders)
	c.Seconds += o.Seconds
}

// total returns the number of requests the schedule intends.
func (s openSchedule) total() int64 { return int64(s.Duration.Seconds() * s.Rate) }

// intended returns request i's offset from the start.
func (s openSchedule) intended(i int64) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / s.Rate)
}

// workerCounts holds one openCounts per sender, so that senders record
// without locking and successive runs of one path accumulate into the
// same histograms; a sender started as the pool grows gets its counts on
// first use (allocated once, reused by later runs).
type workerCounts struct {
	mu  sync.Mutex
	per []*openCounts
}

// newWorkerCounts returns counts for n senders (more are added on use).
func newWorkerCounts(n int) *workerCounts {
	wc := &workerCounts{}
	for range n {
		wc.per = append(wc.per, newOpenCounts())
	}
	return wc
}

// of returns sender w's counts, allocating them on first use.
func (wc *workerCounts) of(w int) *openCounts {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	for len(wc.per) <= w {
		wc.per = append(wc.per, newOpenCounts())
	}
	return wc.per[w]
}

// merged returns every sender's counts merged into one.
func (wc *workerCounts) merged() *openCounts {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	out := newOpenCounts()
	for _, c := range wc.per {
		out.merge(c)
	}
	return out
}

// runOpen runs the schedule against op and returns its counts (see
// runOpenInto).
func runOpen(ctx context.Context, s openSchedule, op openOp) (*openCounts, error) {
	wc := newWorkerCounts(max(1, s.Workers))
	err := runOpenInto(ctx, s, op, wc)
	return wc.merged(), err
}

// openRun is the state the senders of one run share.
type openRun struct {
	ctx         context.Context
	s           openSchedule
	op          openOp
	wc          *workerCounts
	n           int64
	start, stop time.Time
	wg          sync.WaitGroup
	// next is the next unclaimed request; sent counts those made. free
	// counts the senders not in a request (asleep or claiming), started
	// the senders started so far, peak the most in requests at once.
	next, sent          atomic.Int64
	free, started, busy atomic.Int64
	peak                atomic.Int64
}

// runOpenInto runs the schedule against op, sender w adding what it
// measured to wc's counts of w, the run's wall time, unsent requests and
// peak senders to wc's counts of sender 0. It returns when every
// intended request was sent and answered, when the grace period ends, or
// when ctx ends (then with ctx's error).
func runOpenInto(ctx context.Context, s openSchedule, op openOp, wc *workerCounts) error {
	if s.Grace <= 0 {
		s.Grace = s.Duration
	}
	s.Workers = max(1, s.Workers)
	s.MaxWorkers = max(s.Workers, s.MaxWorkers)
	r := &openRun{ctx: ctx, s: s, op: op, wc: wc, n: s.total()}
	r.start = time.Now().Add(time.Millisecond) // every sender is asleep at t0
	r.stop = r.start.Add(s.Duration + s.Grace)
	r.free.Store(int64(s.Workers))
	r.started.Store(int64(s.Workers))
	for w := range s.Workers {
		r.launch(w)
	}
	r.wg.Wait()
	c0 := wc.of(0)
	c0.Unsent += r.n - r.sent.Load()
	c0.Seconds += time.Since(r.start).Seconds()
	c0.Senders = max(c0.Senders, int(r.peak.Load()))
	return ctx.Err()
}

// launch starts sender w.
func (r *openRun) launch(w int) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.sent.Add(r.worker(w))
	}()
}

// grow starts one more sender, if the pool may grow; the caller is about
// to send and was the last free one. The new sender counts as free from
// now, so that two callers never both see the pool empty and start one
// each for the same need.
func (r *openRun) grow() {
	w := r.started.Add(1) - 1
	if w >= int64(r.s.MaxWorkers) {
		r.started.Add(-1)
		return
	}
	r.free.Add(1)
	r.launch(int(w))
}

// worker is sender w: it sends requests until none is left (n in all,
// claimed through next) or stop or ctx ends, and returns how many it
// sent.
func (r *openRun) worker(w int) int64 {
	s, ctx := r.s, r.ctx
	c := r.wc.of(w)
	z, err := bench.NewZipf(s.Seed*1000+uint64(w), s.ZipfS, s.Keys)
	if err != nil {
		z = nil // a bad ZipfS: key 0 only (RunOpenLoop checks it first)
	}
	sl := newSleeper()
	defer sl.close()
	defer r.free.Add(-1) // a sender that returns waits for nothing more
	var sent int64
	for {
		i := r.next.Add(1) - 1
		if i >= r.n {
			return sent
		}
		t := r.start.Add(s.intended(i))
		if t.After(r.stop) || time.Now().After(r.stop) || ctx.Err() != nil {
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
		if r.free.Add(-1) == 0 {
			r.grow() // no one else waits for the next request
		}
		for b, p := r.busy.Add(1), r.peak.Load(); b > p && !r.peak.CompareAndSwap(p, b); p = r.peak.Load() {
		}
		var key uint64
		if z != nil {
			key = z.Next()
		}
		t0 := time.Now()
		err := r.op(ctx, w, key)
		t1 := time.Now()
		r.busy.Add(-1)
		r.free.Add(1)
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
			z, err := bench.NewZipf(uint64(900+w), zipfS, keys)
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
		return 0, errOpenLoop
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

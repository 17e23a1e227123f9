package counter

import (
	"context"
	"time"
)

// Coalescing. Concurrent decisions for one key in one Limiter share one
// store operation: while a call for key K is in flight, later callers for K
// queue into one pending batch; when the in-flight call returns, the batch
// goes as one operation (a window: one create-or-increment of the batch's
// total cost; a token bucket: one gets and one cas applying every waiter in
// order), and each waiter takes its own position in the result. A caller
// with nothing to merge with goes at once (no added latency); under a burst
// on one key the store sees at most one call per key per process at a time,
// so processes, not goroutines, contend.
//
// Exactness: the decisions of a batch are those of the same requests made
// one by one in the batch's order (arrival order), so every guarantee of the
// uncoalesced algorithm holds (fixed window and token bucket never admit
// more than the allowance).
//
// Cancellation: a waiter whose context ends before its batch starts leaves
// it and is not counted. Once its batch has started, its share is counted
// whatever it does (it may return at once with ctx's error: the request is
// then counted but not served, the strict side). A batch of more than one
// waiter runs on a context that keeps the latest of their deadlines and the
// values of the first, but not its cancellation: one client going away does
// not fail the others.
//
// Bounds: a batch holds the decisions waiting for one key in one process,
// so at most the caller's concurrency (pop bounds it per worker).

// waiter is one decision in a batch.
type waiter struct {
	ctx  context.Context
	now  time.Time
	n    int64
	res  Result
	err  error
	done chan struct{} // closed once res and err are set; nil for a lone leader
}

func (w *waiter) finish(res Result, err error) {
	w.res, w.err = res, err
	if w.done != nil {
		close(w.done)
	}
}

// pendingBatch is the batch of one key waiting for its in-flight call.
type pendingBatch struct {
	id      int64 // sub-window id of the batch (windows)
	ws      []*waiter
	ready   chan struct{} // closed when the batch starts (runner chosen)
	started bool          // set under the shard lock with runner
	runner  *waiter
}

// coalesce decides a request of n units (sub-window id for windows) as part
// of a batch, running it at once when no call for key is in flight.
func (lim *Limiter) coalesce(ctx context.Context, key string, now time.Time, n int64, id int64) (Result, error) {
	s := lim.shard(key)
	s.mu.Lock()
	b, inFlight := s.fl[key]
	if !inFlight {
		s.fl[key] = nil // in flight, nothing pending
		s.mu.Unlock()
		w := waiter{ctx: ctx, now: now, n: n}
		lim.runBatch(ctx, key, []*waiter{&w})
		lim.land(s, key)
		return w.res, w.err
	}
	if b != nil && b.id != id {
		// The pending batch counts in another sub-window (clocks or a
		// window boundary): go alone rather than wait for two calls.
		s.mu.Unlock()
		w := waiter{ctx: ctx, now: now, n: n}
		lim.runBatch(ctx, key, []*waiter{&w})
		return w.res, w.err
	}
	if b == nil {
		b = &pendingBatch{id: id, ready: make(chan struct{})}
		s.fl[key] = b
	}
	w := &waiter{ctx: ctx, now: now, n: n, done: make(chan struct{})}
	b.ws = append(b.ws, w)
	s.mu.Unlock()
	lim.coalesced.Add(1)
	return lim.await(ctx, s, key, b, w)
}

// await waits for w's batch: runs it if w is chosen, leaves it if ctx ends
// first.
func (lim *Limiter) await(ctx context.Context, s *cacheShard, key string, b *pendingBatch, w *waiter) (Result, error) {
	select {
	case <-b.ready:
	case <-ctx.Done():
		s.mu.Lock()
		if !b.started {
			for i, x := range b.ws {
				if x == w {
					b.ws = append(b.ws[:i], b.ws[i+1:]...)
					break
				}
			}
			s.mu.Unlock()
			return Result{}, ctx.Err()
		}
		s.mu.Unlock()
		if b.runner != w {
			return Result{}, ctx.Err() // counted by the runner
		}
	}
	if b.runner != w {
		select {
		case <-w.done:
			return w.res, w.err
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	rctx, cancel := ctx, context.CancelFunc(nil)
	if len(b.ws) > 1 {
		rctx, cancel = batchContext(b.ws)
	}
	lim.runBatch(rctx, key, b.ws)
	if cancel != nil {
		cancel()
	}
	lim.land(s, key)
	return w.res, w.err
}

// land ends the call in flight for key: the pending batch, if any waiter
// is left in it, starts (its first waiter runs it); else key has nothing in
// flight any more.
func (lim *Limiter) land(s *cacheShard, key string) {
	s.mu.Lock()
	b := s.fl[key]
	if b == nil || len(b.ws) == 0 {
		delete(s.fl, key)
		s.mu.Unlock()
		return
	}
	s.fl[key] = nil // b's call is the one in flight now
	b.started, b.runner = true, b.ws[0]
	s.mu.Unlock()
	close(b.ready)
}

// runBatch runs the store operation of ws and sets every waiter's result.
func (lim *Limiter) runBatch(ctx context.Context, key string, ws []*waiter) {
	if lim.l.Algorithm == TokenBucket {
		lim.bucketBatch(ctx, key, ws)
		return
	}
	lim.windowBatch(ctx, key, ws)
}

// batchContext is the context of a batch run for several waiters: the
// first waiter's values and the latest deadline of them all (none if one
// has none), and no cancellation: one waiter leaving must not fail the
// others.
func batchContext(ws []*waiter) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(ws[0].ctx)
	var latest time.Time
	for _, w := range ws {
		d, ok := w.ctx.Deadline()
		if !ok {
			return base, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(base, latest)
}

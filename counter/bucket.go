package counter

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// allowBucket runs GCRA over gets/cas: read the theoretical arrival time,
// decide, write it back only if it is unchanged since the read. A lost race
// is retried up to Config.CASRetries times, then ErrContention (nothing
// counted). With undo, it gives n units back instead of taking them.
//
// Exact under any concurrency: every admitted unit moved tat forward by a
// successful cas from the value the decision was made on, so the admitted
// units are exactly those a single sequential GCRA would admit in the cas
// order. In Count mode a rejected request charges its debt with at most
// one cas: if that loses a race and the fresh state still rejects, the
// rejection is returned uncharged (under contention Count mode is best
// effort; it never admits more).
func (lim *Limiter) allowBucket(ctx context.Context, key string, now time.Time, n int64, undo bool) (Result, error) {
	g := lim.g
	k := key + lim.suffix
	t := now.UnixNano()
	lim.casOps.Add(1)
	var buf [24]byte
	retries := lim.cfg.casRetries()
	lostReject := false
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			lim.casRetries.Add(1)
		}
		val, tok, err := lim.store.Gets(ctx, k)
		found := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Result{}, err
		}
		tat := t // a missing bucket is full
		if found {
			v, perr := parseCount(val)
			if perr != nil {
				return Result{}, perr
			}
			tat = v
		}
		var next int64
		allowed := true
		if undo {
			next = max(tat-n*g.t, t)
			if tat <= t {
				next = tat
			}
		} else {
			next, allowed = g.decide(tat, t, n)
		}
		if next == tat || (!allowed && lostReject) {
			// Nothing to write; or a rejection already lost one race: it
			// is returned without charging its debt (Count mode), so
			// attack traffic, which is mostly rejected, does not keep
			// retrying. Admissions are always retried: they are exact.
			return g.result(tat, t, n, allowed), nil
		}
		b := strconv.AppendInt(buf[:0], next, 10)
		ttl := time.Duration(next-t) + time.Second
		if found {
			err = lim.store.CompareAndSwap(ctx, k, b, tok, ttl)
		} else {
			err = lim.store.Add(ctx, k, b, ttl)
		}
		switch {
		case err == nil:
			return g.result(next, t, n, allowed), nil
		case errors.Is(err, ErrCASConflict), errors.Is(err, ErrNotFound), errors.Is(err, ErrNotStored):
			lostReject = lostReject || !allowed
			continue
		default:
			return Result{}, err
		}
	}
	lim.casFailures.Add(1)
	return Result{}, ErrContention
}

// bucketBatch is allowBucket for the waiters of one batch: one gets, GCRA
// applied to each waiter in order on the running theoretical arrival time
// (each admitted waiter moves it forward, a rejected one leaves it, or in
// Count mode charges its debt), one cas of the final value. A lost race
// retries the whole batch from a fresh read, as allowBucket does; after
// one, rejections are returned uncharged. Every admitted unit moved tat
// forward by the successful cas, so the batch admits exactly what
// sequential GCRA would in that order.
func (lim *Limiter) bucketBatch(ctx context.Context, key string, ws []*waiter) {
	g := lim.g
	k := key + lim.suffix
	lim.casOps.Add(int64(len(ws)))
	tMin := ws[0].now.UnixNano()
	for _, w := range ws[1:] {
		tMin = min(tMin, w.now.UnixNano())
	}
	var buf [24]byte
	retries := lim.cfg.casRetries()
	lost := false
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			lim.casRetries.Add(1)
		}
		val, tok, err := lim.store.Gets(ctx, k)
		found := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			finishAll(ws, err)
			return
		}
		tat0 := tMin // a missing bucket is full
		if found {
			v, perr := parseCount(val)
			if perr != nil {
				finishAll(ws, perr)
				return
			}
			tat0 = v
		}
		tat, rejected := tat0, false
		for _, w := range ws {
			t := w.now.UnixNano()
			next, allowed := g.decide(tat, t, w.n)
			if !allowed && lost {
				// A rejection after a lost race is not charged (Count
				// mode), so mostly rejected attack traffic does not keep
				// retrying. Admissions are always retried: they are exact.
				next = tat
			}
			rejected = rejected || !allowed
			w.res = g.result(next, t, w.n, allowed)
			tat = next
		}
		if tat == tat0 {
			finishAll(ws, nil) // nothing to write
			return
		}
		b := strconv.AppendInt(buf[:0], tat, 10)
		ttl := time.Duration(tat-tMin) + time.Second
		if found {
			err = lim.store.CompareAndSwap(ctx, k, b, tok, ttl)
		} else {
			err = lim.store.Add(ctx, k, b, ttl)
		}
		switch {
		case err == nil:
			finishAll(ws, nil)
			return
		case errors.Is(err, ErrCASConflict), errors.Is(err, ErrNotFound), errors.Is(err, ErrNotStored):
			lost = lost || rejected
			continue
		default:
			finishAll(ws, err)
			return
		}
	}
	lim.casFailures.Add(int64(len(ws)))
	finishAll(ws, ErrContention)
}

// finishAll ends every waiter: with its provisional result when err is
// nil, else with err.
func finishAll(ws []*waiter, err error) {
	for _, w := range ws {
		if err != nil {
			w.res = Result{}
		}
		w.finish(w.res, err)
	}
}

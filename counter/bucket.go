package counter

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"time"
)

// readTAT reads the theoretical arrival time under k, and the latest now
// a decision on it was made at (0 when the item has none): tat is t (a
// full bucket) when absent.
func (lim *Limiter) readTAT(ctx context.Context, k string, t int64) (tat, last int64, tok CASToken, found bool, err error) {
	val, tok, err := lim.store.Gets(ctx, k)
	if errors.Is(err, ErrNotFound) {
		return t, 0, tok, false, nil
	}
	if err != nil {
		return 0, 0, tok, false, err
	}
	tat, last, err = parseTAT(val)
	return tat, last, tok, true, err
}

// parseTAT parses a bucket item, "tat last" (unix ns each), or "tat"
// alone as written before the item carried its clock.
func parseTAT(b []byte) (tat, last int64, err error) {
	b = bytes.TrimSpace(b)
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		if last, err = parseCount(b[i+1:]); err != nil {
			return 0, 0, err
		}
		b = b[:i]
	}
	tat, err = parseCount(b)
	return tat, last, err
}

// writeTAT writes next and the clock it was decided at under k if it is
// unchanged since readTAT (cas, or add when it was absent), with a TTL
// until next (from t) + 1 s: the item is useless once tat ≤ now. lost
// reports a lost race.
func (lim *Limiter) writeTAT(ctx context.Context, k string, next, clock, t int64, tok CASToken, found bool) (lost bool, err error) {
	var buf [48]byte
	b := strconv.AppendInt(buf[:0], next, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, clock, 10)
	ttl := time.Duration(next-t) + time.Second
	if found {
		err = lim.store.CompareAndSwap(ctx, k, b, tok, ttl)
	} else {
		err = lim.store.Add(ctx, k, b, ttl)
	}
	if errors.Is(err, ErrCASConflict) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotStored) {
		return true, nil
	}
	return false, err
}

// undoBucket gives n units back to the bucket of key at now (never past
// full), retrying a lost race up to Config.CASRetries times, then
// ErrContention.
func (lim *Limiter) undoBucket(ctx context.Context, key string, now time.Time, n int64) error {
	k, t := key+lim.suffix, now.UnixNano()
	lim.casOps.Add(1)
	for attempt := 0; attempt <= lim.cfg.casRetries(); attempt++ {
		if attempt > 0 {
			lim.casRetries.Add(1)
		}
		tat, last, tok, found, err := lim.readTAT(ctx, k, t)
		if err != nil {
			return err
		}
		clock := max(t, last)
		if tat <= clock {
			return nil // full: nothing to give back
		}
		lost, err := lim.writeTAT(ctx, k, max(tat-n*lim.g.t, clock), clock, t, tok, found)
		if err != nil || !lost {
			return err
		}
	}
	lim.casFailures.Add(1)
	return ErrContention
}

// bucketBatch runs GCRA over gets/cas for the waiters of one batch (one
// alone when nothing was merged). Exact under any concurrency: every
// admitted unit moved tat forward by a successful cas from the value the
// decision was made on, so the admitted units are exactly those a single
// sequential GCRA would admit in the cas order. A lost race is retried up
// to Config.CASRetries times, then ErrContention (nothing counted). In
// Count mode a rejected request charges its debt with at most one cas: if
// that loses a race and the fresh state still rejects, the rejection is
// returned uncharged (under contention Count mode is best effort; it never
// admits more).
//
// The batch: one gets, GCRA
// applied to each waiter in order on the running theoretical arrival time
// (each admitted waiter moves it forward, a rejected one leaves it, or in
// Count mode charges its debt), one cas of the final value. A lost race
// retries the whole batch from a fresh read; after
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
	retries := lim.cfg.casRetries()
	lost := false
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			lim.casRetries.Add(1)
		}
		tat0, last, tok, found, err := lim.readTAT(ctx, k, tMin)
		if err != nil {
			finishAll(ws, err)
			return
		}
		tat, clock, rejected := tat0, last, false
		for _, w := range ws {
			t := w.now.UnixNano()
			// A now older than one tat was already decided at is decided
			// at that later clock: workers' requests reach the store out
			// of their nows' order, and GCRA at an earlier now refuses
			// the last token a moment too full.
			clock = max(clock, t)
			next, allowed := g.decide(tat, clock, w.n)
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
		raced, err := lim.writeTAT(ctx, k, tat, clock, tMin, tok, found)
		if err != nil || !raced {
			finishAll(ws, err)
			return
		}
		lost = lost || rejected
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

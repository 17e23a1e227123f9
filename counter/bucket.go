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

package counter

import (
	"context"
	"time"
)

// Peeker is implemented by allowers that can answer a request of zero
// units: whether key is within its limit at now, counting nothing.
type Peeker interface {
	// Peek reports key's state at now without counting: Allowed when the
	// count (a sliding window's estimate) does not exceed the quantity,
	// Remaining and Reset as AllowN's. Envoy's per-descriptor hits_addend
	// 0 ("check, do not count") is answered this way.
	Peek(ctx context.Context, key string, now time.Time) (Result, error)
}

// Peek implements Peeker. A window limit reads its counts (an incr of 0 on
// the current sub-window) and writes nothing. A token bucket has no
// read-only path in the store: it takes one unit and gives it back, so a
// concurrent request may see one unit fewer for that instant, and Allowed
// means one unit was available.
func (lim *Limiter) Peek(ctx context.Context, key string, now time.Time) (Result, error) {
	if err := checkIdentity(key); err != nil {
		return Result{}, err
	}
	if lim.l.Algorithm == TokenBucket {
		res, err := lim.AllowN(ctx, key, now, 1)
		if err != nil {
			return Result{}, err
		}
		// A refused Count request went into debt: give it back too. A
		// refused CountFirst one may not have (the bucket was in debt
		// already): it keeps the unit it may have charged, the strict side.
		if res.Allowed || lim.l.OnReject == Count {
			// A refused Count request went into debt: give it back too.
			if err := lim.Undo(ctx, key, now, 1); err != nil {
				return Result{}, err
			}
		}
		if res.Allowed {
			res.Remaining++
		}
		return res, nil
	}
	var buf [8]int64
	counts, id, e, err := lim.peekCounts(ctx, key, now, &buf)
	if err != nil {
		return Result{}, err
	}
	_, within := lim.win.slack(counts, e)
	return lim.win.result(counts, id, e, now.UnixNano(), 0, within, -1), nil
}

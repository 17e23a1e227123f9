package counter

import (
	"context"
	"errors"
	"time"
)

// Check is one limit of a compound rule applied to one identity key.
type Check struct {
	Allower Allower
	Key     string
}

// AllowAll applies a compound rule: the request of n units passes only if
// every check admits it. It returns the result closest to exhaustion (when
// rejected, the rejecting one with the longest RetryAfter; when admitted,
// the one with the least Remaining/Limit), and each check's result in
// order.
//
// Every check is evaluated, even after a rejection, so a Count-mode limit
// counts every request whatever the order of the checks (Count means
// rejected requests consume quota). When the request is rejected, each
// Refund-mode limit that admitted it is undone, so Refund limits never keep
// phantom counts; Count-mode limits keep theirs. On an error, the
// Refund-mode admissions made so far are undone (best effort) and the
// error is returned with the results gathered.
func AllowAll(ctx context.Context, now time.Time, n int64, checks ...Check) (Result, []Result, error) {
	results := make([]Result, len(checks))
	var err error
	done := 0
	for i, c := range checks {
		results[i], err = c.Allower.AllowN(ctx, c.Key, now, n)
		if err != nil {
			break
		}
		done++
	}
	allowed := err == nil
	for i := 0; i < done && allowed; i++ {
		allowed = results[i].Allowed
	}
	if !allowed {
		for i := 0; i < done; i++ {
			c := checks[i]
			if results[i].Allowed && c.Allower.Limit().OnReject == Refund {
				if uerr := c.Allower.Undo(ctx, c.Key, now, n); uerr != nil {
					err = errors.Join(err, uerr)
				}
			}
		}
	}
	if err != nil {
		return Result{}, results, err
	}
	return closest(results), results, nil
}

// closest picks the result closest to exhaustion.
func closest(rs []Result) Result {
	best := -1
	for i, r := range rs {
		if best < 0 {
			best = i
			continue
		}
		b := rs[best]
		switch {
		case !r.Allowed && b.Allowed:
			best = i
		case !r.Allowed && !b.Allowed:
			if r.RetryAfter > b.RetryAfter {
				best = i
			}
		case r.Allowed && b.Allowed:
			// r.Remaining/r.Limit < b.Remaining/b.Limit, exactly.
			if lessFrac(r.Remaining, r.Limit, b.Remaining, b.Limit) {
				best = i
			}
		}
	}
	if best < 0 {
		return Result{Allowed: true}
	}
	return rs[best]
}

func lessFrac(a, b, c, d int64) bool {
	if b <= 0 || d <= 0 {
		return b > 0
	}
	return float64(a)*float64(d) < float64(c)*float64(b)
}

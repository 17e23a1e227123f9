package counter

import (
	"context"
	"errors"
	"math/bits"
	"time"
)

// Check is one limit of a compound rule applied to one identity key.
type Check struct {
	Allower Allower
	Key     string
	// Cost is the units one request unit consumes in this limit: AllowAll
	// asks for (and undoes) Cost × n units. Zero means 1.
	Cost int64
}

// units is what c charges for n request units.
func (c Check) units(n int64) int64 {
	if c.Cost == 0 {
		return n
	}
	return n * c.Cost
}

// AllowAll applies a compound rule: the request of n units passes only if
// every check admits its Cost × n units. It returns the result closest to
// exhaustion (Closest: when rejected, the rejecting one with the longest
// RetryAfter; when admitted, the one with the least Remaining/Limit), and
// each check's result in order.
//
// Every check is evaluated, even after a rejection, so a Count-mode limit
// counts every request whatever the order of the checks (Count means
// rejected requests consume quota). When the request is rejected, each
// Refund-mode limit that admitted it is undone (Cost × n units), so Refund
// limits never keep phantom counts; Count-mode limits keep theirs. On an
// error, the Refund-mode admissions made so far are undone (best effort)
// and the error is returned with the results gathered.
func AllowAll(ctx context.Context, now time.Time, n int64, checks ...Check) (Result, []Result, error) {
	results := make([]Result, len(checks))
	var err error
	done := 0
	for i, c := range checks {
		results[i], err = c.Allower.AllowN(ctx, c.Key, now, c.units(n))
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
				if uerr := c.Allower.Undo(ctx, c.Key, now, c.units(n)); uerr != nil {
					err = errors.Join(err, uerr)
				}
			}
		}
	}
	if err != nil {
		return Result{}, results, err
	}
	if b := Closest(results); b >= 0 {
		return results[b], results, nil
	}
	return Result{Allowed: true}, results, nil
}

// Closest is the index of the binding result of a compound rule, the one
// closest to exhaustion: a rejection if any (the longest RetryAfter among
// them), else the admission with the least Remaining/Limit, compared
// exactly (a Limit ≤ 0 counts as nothing used: Remaining/Limit = 1). Ties
// go to the earlier result. -1 when rs is empty. Pass only the results of
// the limits that were consulted.
func Closest(rs []Result) int {
	best := -1
	for i, r := range rs {
		if best < 0 || closer(r, rs[best]) {
			best = i
		}
	}
	return best
}

// closer reports whether r is strictly closer to exhaustion than b.
func closer(r, b Result) bool {
	switch {
	case r.Allowed != b.Allowed:
		return !r.Allowed
	case !r.Allowed:
		return r.RetryAfter > b.RetryAfter
	}
	return lessShare(r, b)
}

// lessShare reports r.Remaining/r.Limit < b.Remaining/b.Limit, exactly
// (128-bit cross products), with a Limit ≤ 0 read as a share of 1.
func lessShare(r, b Result) bool {
	rn, rd := share(r)
	bn, bd := share(b)
	// rn/rd < bn/bd ⇔ rn×bd < bn×rd (denominators positive).
	hi1, lo1 := bits.Mul64(rn, bd)
	hi2, lo2 := bits.Mul64(bn, rd)
	return hi1 < hi2 || (hi1 == hi2 && lo1 < lo2)
}

// share is r's Remaining/Limit as a non-negative fraction.
func share(r Result) (num, den uint64) {
	if r.Limit <= 0 {
		return 1, 1
	}
	return uint64(max(r.Remaining, 0)), uint64(r.Limit)
}

package pop

import (
	"context"
	"net/http"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// Reasons of decisions taken by the local budget while the store is alive.
const (
	// ReasonStoreSlow: the store answered other calls within the breaker
	// window but this decision ran out of its deadline (a burst made the
	// store slow, it is not dead). Decided by the conservative local
	// budget (limit ÷ WorkersPerPoP per worker), whatever the fail mode:
	// never a fail-open, never a 503.
	ReasonStoreSlow Reason = "store_slow"
	// ReasonStoreBusy: MaxInFlight decisions were already waiting on the
	// store and no slot freed within InFlightWait. Decided by the local
	// budget like ReasonStoreSlow.
	ReasonStoreBusy Reason = "store_busy"
)

// acquire takes an in-flight slot, waiting at most InFlightWait (default
// the current store deadline) or until ctx ends.
func (l *Limiter) acquire(ctx context.Context) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	wait := l.cfg.InFlightWait
	if wait <= 0 {
		wait = l.dl.Current()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// local decides with the in-process budget of each limit (limit ÷
// WorkersPerPoP, and ÷ PoPs for a global limit): the local fail mode, and every decision the store could
// not answer in time while alive. The mitigation cache was consulted
// before: an identity known to be over its limit never gets here.
func (l *Limiter) local(ctx context.Context, rs *rules, keys []string, now time.Time, reason Reason) Decision {
	checks := make([]counter.Check, 0, len(rs.limits))
	var lims []counter.Limit
	for i, r := range rs.limits {
		if r.shadow || r.after {
			continue // a dry run never rejects; response counting needs the store
		}
		checks = append(checks, counter.Check{Allower: r.local, Key: keys[i], Cost: r.cost})
		lims = append(lims, r.local.Limit())
	}
	if len(checks) == 0 {
		return Decision{Allowed: true, Reason: reason}
	}
	_, results, err := counter.AllowAll(ctx, now, 1, checks...)
	if err != nil {
		// A local limiter cannot be unreachable: only a bad key gets here.
		if reason == ReasonFailLocal {
			return Decision{Allowed: true, Reason: reason}
		}
		return Decision{Reason: reason, Status: http.StatusTooManyRequests}
	}
	all := make([]LimitResult, len(results))
	for i, res := range results {
		all[i] = LimitResult{Limit: lims[i], Result: res}
	}
	return verdict(all, len(all), reason)
}

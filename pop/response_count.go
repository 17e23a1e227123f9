package pop

// The end of an admitted request: its concurrency slots are released and
// the limits that count by response (count_if, cost_header) are charged.
// Such a limit is checked before the request goes upstream only through
// the identity's shared flag: once a charge leaves it exhausted (or
// refuses), the identity is flagged until the limit frees a unit (and for
// its mitigation_timeout when longer), so every worker rejects the next
// request before forwarding it. Requests already in flight when that
// happens still get through: a limit counted by response admits at most
// the requests in flight at exhaustion beyond its allowance.

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// completion is what Finish owes an admitted request.
type completion struct {
	p      *compiledPolicy
	rs     *rules
	keys   []string // per rs.limits, as counted at admission
	mitKey string
	slots  []concSlot
	done   atomic.Bool
}

// admitted takes the concurrency slots of an admitted d and arms its
// completion; a refused slot turns d into the rejection.
func (l *Limiter) admitted(ctx context.Context, p *compiledPolicy, rs *rules, parts, keys []string, d *Decision, now time.Time) {
	var slots []concSlot
	if len(rs.conc) > 0 {
		var rej *Decision
		if slots, rej = l.acquireConc(ctx, p, rs, parts, now); rej != nil {
			*d = *rej
			return
		}
	}
	after := false
	for _, r := range rs.limits {
		after = after || r.after
	}
	if len(slots) == 0 && !after {
		return
	}
	c := &completion{p: p, rs: rs, mitKey: counter.Key(parts...), slots: slots}
	if after {
		c.keys = append([]string(nil), keys...) // keys may live on decide's stack
	}
	d.done = c
}

// Finish ends the request d admitted, once its response is known: status
// is the response status (499 when the client went away first, 502/504 on
// upstream failure), h its headers (a limit's cost header is read there).
// It releases d's concurrency slots and charges the limits counted by
// response, at now; store calls are bounded by the store deadline and
// outlive ctx's cancellation (a client gone still frees its slot). Call it
// once per admitted Decision (Middleware does); further calls, and calls
// for a Decision with nothing pending, do nothing.
func (l *Limiter) Finish(ctx context.Context, d Decision, now time.Time, status int, h http.Header) {
	c := d.done
	if c == nil || !c.done.CompareAndSwap(false, true) {
		return
	}
	l.releaseAll(ctx, c.p.spec.Name, c.slots)
	if c.keys == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.dl.Current())
	defer cancel()
	for i, r := range c.rs.limits {
		if !r.after || !r.spec.Response.Matches(status) {
			continue
		}
		cost := r.responseCost(l.cfg.Metrics, c.p.spec.Name, h)
		if cost == 0 {
			continue
		}
		res, err := r.shared.AllowN(rctx, c.keys[i], now, cost)
		if err != nil {
			l.cfg.Metrics.responseCostInvalid(c.p.spec.Name, "store_error")
			continue
		}
		l.cfg.Metrics.responseCounted(c.p.spec.Name, r.spec.Limit.Name)
		if res.Allowed && res.Remaining > 0 {
			continue
		}
		// Exhausted: reject the identity's next requests until a unit is
		// free again.
		res.Allowed, res.Remaining = false, 0
		res.RetryAfter = max(res.RetryAfter, exhaustedFor(r.spec.Limit, res))
		suffix := ""
		if r.shadow {
			suffix = flagShadow
		}
		dd := Decision{Binding: LimitResult{Limit: r.spec.Limit, Result: res}}
		l.remember(rctx, c.p, c.rs, c.mitKey, suffix, dd, now)
		if r.spec.MitigationTimeout <= 0 {
			// remember shares only mitigation timeouts: share the
			// exhaustion too, it is what admission checks.
			if suffix == "" {
				suffix = flagEnforce
			}
			l.raiseFlag(rctx, c.p, c.mitKey+suffix, r.spec.Limit.Name, now, now.Add(res.RetryAfter))
		}
	}
}

// exhaustedFor is how long a limit left with nothing remaining stays so
// when its count did not say (an admitted charge): a fixed window until
// its end, otherwise one unit's interval (a shorter block only lets one
// more charge through, whose refusal then says exactly how long).
func exhaustedFor(lim counter.Limit, res counter.Result) time.Duration {
	if lim.Algorithm == counter.FixedWindow && res.Reset > 0 {
		return res.Reset
	}
	return max(lim.Window/time.Duration(max(lim.Quantity, 1)), time.Millisecond)
}

// responseCost is what r charges for a response with headers h: the
// cost header's value, bounded to [0, MaxCost] (a missing, negative or
// non-integer value is charged DefaultCost, a larger one MaxCost; both
// counted in poplimit_response_cost_invalid_total), or r.cost without a
// cost header.
func (r *rule) responseCost(m *Metrics, policy string, h http.Header) int64 {
	rc := r.spec.Response
	if rc.CostHeader == "" {
		return r.cost
	}
	vs := h[rc.CostHeader]
	if len(vs) == 0 {
		m.responseCostInvalid(policy, "missing")
		return rc.DefaultCost
	}
	v, err := strconv.ParseInt(strings.TrimSpace(vs[0]), 10, 64)
	switch {
	case err != nil && strings.TrimLeft(strings.TrimSpace(vs[0]), "0123456789") == "" && strings.TrimSpace(vs[0]) != "":
		// All digits but out of int64's range: huge.
		m.responseCostInvalid(policy, "too_large")
		return rc.MaxCost
	case err != nil || v < 0:
		m.responseCostInvalid(policy, "invalid")
		return rc.DefaultCost
	case v > rc.MaxCost:
		m.responseCostInvalid(policy, "too_large")
		return rc.MaxCost
	}
	return v
}

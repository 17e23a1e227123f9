package pop

// What a decision leaves open until the response is known
// (Limiter.Finish): concurrency slots, released at the end, and the limits
// that count by response (count_if, cost_header), charged then.
//
// Concurrency limits: at most N requests of one identity in flight across
// the PoP, counted in the shared store with memcached's primitives only
// (add, incr, decr, get with TTLs).
//
// Design: time is cut into epochs of E = max_request_time/concEpochs. A
// request admitted at t increments the counter of its epoch e = ⌊t/E⌋
// (created with a TTL that outlives every read of it), and its release
// decrements that same counter. The number in flight at t is the sum of
// the counters of epochs ⌊t/E⌋-concEpochs … ⌊t/E⌋+1 (the last one for a
// worker whose clock runs ahead). So:
//
//   - a request is counted for at least max_request_time after its
//     admission (its epoch stays in the summed range that long);
//   - a slot whose release never comes (the worker crashed, the store was
//     unreachable at release time) stops counting at most
//     (concEpochs+1)·E = 1.25 × max_request_time after its admission: no
//     slot leaks forever, whatever happens to the worker;
//   - a request still running after max_request_time may stop counting
//     (between 1× and 1.25× max_request_time): set it at or above the
//     upstream timeout.
//
// Admission increments first and reads the sum after, then gives the
// increment back (decr) when the sum exceeds N: of requests racing for the
// last slots, at most the ones that fit are admitted (each sees every
// increment made before its own), possibly fewer (a refused attempt looks
// again and retries while there is room, concTries attempts at most). memcached's decr stops
// at 0, so a count is never negative, even for a release whose epoch
// counter was evicted and re-created.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// errBreakerOpen stands for the store error of a call not made.
var errBreakerOpen = errors.New("pop: store circuit breaker open")

// concEpochs is the number of epochs in one max_request_time.
const concEpochs = 4

// concRule is one compiled concurrency limit.
type concRule struct {
	spec  policy.LimitSpec
	epoch time.Duration // max_request_time / concEpochs, at least 1ms
	ttl   time.Duration // of an epoch counter: outlives its last read
}

func newConcRule(ls policy.LimitSpec) *concRule {
	e := max(ls.Concurrency.MaxRequestTime/concEpochs, time.Millisecond)
	// Created at the earliest at its epoch's start, read until the end of
	// epoch e+concEpochs: (concEpochs+1)·E, plus a second for memcached's
	// whole-second TTLs.
	return &concRule{spec: ls, epoch: e, ttl: time.Duration(concEpochs+2)*e + time.Second}
}

// concSlot is one held slot: the epoch counter to decrement.
type concSlot struct {
	rule *concRule
	key  string
}

// epochKey is the store key of identity key id's counter for epoch n:
// id + "c<epoch ms base 36>.<n base 36>" (inside counter.Key's suffix
// budget; the hash tag keeps every epoch on id's shard).
func (c *concRule) epochKey(id string, n int64) string {
	var b strings.Builder
	b.Grow(len(id) + 24)
	b.WriteString(id)
	b.WriteByte('c')
	b.WriteString(strconv.FormatInt(c.epoch.Milliseconds(), 36))
	b.WriteByte('.')
	b.WriteString(strconv.FormatInt(n, 36))
	return b.String()
}

// concTries bounds the attempts of one acquire: requests racing for the
// last slots all increment, most see too many and give theirs back; an
// attempt refused looks again and tries anew while the sum has room.
const concTries = 3

// acquire takes a slot of c for identity key id at now. It returns the
// slot (admitted), or the number in flight it saw (refused), or an error
// from the store.
func (c *concRule) acquire(ctx context.Context, st counter.Store, id string, now time.Time) (slot concSlot, inFlight int64, ok bool, err error) {
	cur := now.UnixNano() / int64(c.epoch)
	key := c.epochKey(id, cur)
	var keys [concEpochs + 2]string // the other epochs, then key
	for i := range concEpochs {
		keys[i] = c.epochKey(id, cur-int64(concEpochs-i))
	}
	keys[concEpochs], keys[concEpochs+1] = c.epochKey(id, cur+1), key
	others := keys[:concEpochs+1]
	for try := 1; ; try++ {
		if inFlight, err = c.incrAndSum(ctx, st, key, others); err != nil {
			return concSlot{}, 0, false, err
		}
		if inFlight <= c.spec.Limit.Quantity {
			return concSlot{rule: c, key: key}, inFlight, true, nil
		}
		// Give the increment back (under ctx's deadline); a failure only
		// holds the slot until its epoch leaves the summed range.
		_, _ = st.Decr(ctx, key, 1)
		if try == concTries {
			return concSlot{}, inFlight - 1, false, nil
		}
		vals, err := st.GetMulti(ctx, keys[:])
		if err != nil {
			return concSlot{}, inFlight - 1, false, nil
		}
		if inFlight = sumCounts(vals); inFlight >= c.spec.Limit.Quantity {
			return concSlot{}, inFlight, false, nil
		}
	}
}

// incrAndSum adds 1 to key (creating it with c's TTL) and returns its new
// value plus the counters of others: one round trip with a
// counter.Batcher store.
func (c *concRule) incrAndSum(ctx context.Context, st counter.Store, key string, others []string) (int64, error) {
	var vals map[string][]byte
	var mine uint64
	var err error
	b, isB := st.(counter.Batcher)
	if isB {
		vals, mine, err = b.GetMultiIncr(ctx, others, key, 1, c.ttl)
	}
	if !isB || errors.Is(err, counter.ErrNotSupported) {
		if mine, err = incrOrCreate(ctx, st, key, c.ttl); err == nil {
			vals, err = st.GetMulti(ctx, others)
		}
	}
	if err != nil {
		return 0, err
	}
	return int64(mine) + sumCounts(vals), nil
}

// sumCounts adds counter values up.
func sumCounts(vals map[string][]byte) int64 {
	var n int64
	for _, v := range vals {
		n += parseStoreCount(v)
	}
	return n
}

// release gives s back. A counter already expired or evicted is not an
// error (the slot stopped counting with it).
func (s concSlot) release(ctx context.Context, st counter.Store) error {
	_, err := st.Decr(ctx, s.key, 1)
	if errors.Is(err, counter.ErrNotFound) {
		return nil
	}
	return err
}

// incrOrCreate adds 1 to key, creating it at 1 with ttl when absent.
func incrOrCreate(ctx context.Context, st counter.Store, key string, ttl time.Duration) (uint64, error) {
	for range 4 {
		v, err := st.Incr(ctx, key, 1)
		if !errors.Is(err, counter.ErrNotFound) {
			return v, err
		}
		err = st.Add(ctx, key, []byte("1"), ttl)
		if !errors.Is(err, counter.ErrNotStored) {
			return 1, err
		}
	}
	return 0, counter.ErrContention
}

// parseStoreCount reads a counter value (memcached pads one that shrank
// on decr with spaces); anything unreadable or negative counts 0.
func parseStoreCount(b []byte) int64 {
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// acquireConc takes a slot of every concurrency limit of rs for the
// identity parts, in order; when one refuses, the slots taken are given
// back and the request is rejected (429, Retry-After the limit's
// retry_after). On store failure the policy's fail mode applies: closed
// answers 503, open and local admit without a slot.
func (l *Limiter) acquireConc(ctx context.Context, p *compiledPolicy, rs *rules, parts []string, now time.Time) ([]concSlot, *Decision) {
	slots := make([]concSlot, 0, len(rs.conc))
	for _, c := range rs.conc {
		id := counter.Key(append(parts[:len(parts):len(parts)], "l", c.spec.Limit.Name)...)
		var slot concSlot
		ok, err := false, errBreakerOpen
		if l.breaker.State() != BreakerOpen { // an open breaker: the store is down, do not wait on it
			sctx := newStoreCtx(ctx, time.Now().Add(l.dl.Current()))
			slot, _, ok, err = c.acquire(sctx, l.store, id, now)
			sctx.release()
		}
		if err != nil {
			l.cfg.Metrics.concurrency(p.spec.Name, "store_error")
			if p.spec.FailMode == policy.FailClosed {
				l.releaseAll(ctx, p.spec.Name, slots)
				return nil, &Decision{Reason: ReasonFailClosed, Status: http.StatusServiceUnavailable,
					Binding: LimitResult{Result: counter.Result{RetryAfter: l.cfg.Breaker.openFor()}}}
			}
			continue
		}
		if !ok {
			l.releaseAll(ctx, p.spec.Name, slots)
			l.cfg.Metrics.concurrency(p.spec.Name, "rejected")
			ra := c.spec.Concurrency.RetryAfter
			lim := c.spec.Limit
			return nil, &Decision{Reason: ReasonConcurrency, Status: http.StatusTooManyRequests,
				Binding: LimitResult{Limit: lim, Result: counter.Result{Limit: lim.Quantity, Remaining: 0, Reset: ra, RetryAfter: ra}}}
		}
		l.cfg.Metrics.concurrency(p.spec.Name, "acquired")
		slots = append(slots, slot)
	}
	return slots, nil
}

// releaseAll gives slots back, bounded by the longest store deadline,
// whatever became of ctx (a canceled client still frees its slot).
func (l *Limiter) releaseAll(ctx context.Context, policy string, slots []concSlot) {
	if len(slots) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.dl.Current())
	defer cancel()
	for _, s := range slots {
		if err := s.release(rctx, l.store); err != nil {
			l.cfg.Metrics.concurrency(policy, "release_error")
			continue
		}
		l.cfg.Metrics.concurrency(policy, "released")
	}
}

// The end of an admitted request: its concurrency slots are released and
// the limits that count by response (count_if, cost_header) are charged.
// Such a limit is checked before the request goes upstream only through
// the identity's shared flag: once a charge leaves it exhausted (or
// refuses), the identity is flagged until the limit frees a unit (and for
// its mitigation_timeout when longer), so every worker rejects the next
// request before forwarding it. Requests already in flight when that
// happens still get through: a limit counted by response admits at most
// the requests in flight at exhaustion beyond its allowance.

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

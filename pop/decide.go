package pop

// The decision pipeline, top-down (Limiter.Decide): identify
// (identity.go), the policy (snapshot.go, route.go), the mitigation cache
// (mitigation.go), then step 4, the count: breaker, in-flight slot,
// leases, the shared count and its dry-run limits. A dead, slow or busy
// store hands over to breaker.go; the answer is written by middleware.go.

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// Decide decides r at now. It never returns an error: store trouble is
// handled by the policy's fail mode and reported in Decision.Reason.
//
// now is the decision instant and everything the decision computes
// derives from it: the windows and buckets counted, the mitigation cache,
// the breaker, the leases, the Retry-After and the rejection event's Time.
// The store calls alone are bounded and timed in real time, on the
// process's monotonic clock (time.Now, read once before and once after
// them): their deadline (the adaptive store deadline from that first
// reading) is a socket and context deadline, and their latency feeds the
// deadline, so neither may follow a now the caller chose (a replayed or
// fixed instant).
func (l *Limiter) Decide(ctx context.Context, r *http.Request, now time.Time) Decision {
	s := l.snap.Load()
	if s == nil {
		return Decision{Allowed: true, Reason: ReasonNoPolicy}
	}
	ip := ClientIP(r, s.file.TrustedProxies, s.file.MaxHops())
	// Per-IP counts key on the client's network (ip_prefix: an IPv6 /64
	// by default), so rotating addresses within it shares one count.
	cnet := s.file.ClientNet(ip)
	if s.prefilter != nil && cnet.IsValid() {
		res, err := s.prefilter.AllowN(ctx, cnet.String(), now, 1)
		if err == nil && !res.Allowed {
			d := Decision{Status: http.StatusTooManyRequests, Policy: "prefilter", Reason: ReasonPrefilter, Binding: LimitResult{s.prefilter.Limit(), res}}
			l.finish(&d, now, ip, Identity{})
			return d
		}
	}
	pattern := s.route(r).pattern
	p := s.routes[pattern]
	if p == nil {
		if p = s.unmatched; p == nil {
			return Decision{Allowed: true, Reason: ReasonNoPolicy}
		}
		pattern = unmatchedRoute
	}
	id := Identity{IP: cnet, Route: pattern}
	tier := p.spec.DefaultTier
	if p.needKey {
		id.APIKey = APIKey(r, s.file.APIKey)
		if id.APIKey != "" {
			rec, keyID, known := s.file.LookupKey(id.APIKey)
			switch {
			case known && rec.Inactive, !known && s.file.RejectUnknownKeys:
				// A revoked key (403) or, per policy, an unknown one
				// (401): not a quota answer, nothing counted.
				d := Decision{Status: http.StatusForbidden, Policy: p.spec.Name, Reason: ReasonKeyInactive}
				if !known {
					d.Status, d.Reason = http.StatusUnauthorized, ReasonKeyUnknown
				}
				l.finish(&d, now, ip, Identity{IP: cnet, Route: pattern, KeyID: keyID})
				return d
			case known:
				id.KeyID = keyID
				id.Tenant = rec.Tenant
				if p.spec.TierSource == "api_key" && rec.Tier != "" {
					tier = rec.Tier
				}
			case len(s.file.Keys) == 0:
				// No key records: keys are taken as they come.
				id.KeyID = policy.KeyID(id.APIKey)
			default:
				// Unknown key while records exist: anonymous, so rotating
				// made-up keys cannot mint fresh identities.
			}
		}
	}
	if p.spec.TierSource != "api_key" {
		tier = p.spec.TierSource
	}
	if s.file.UserHeader != "" {
		id.User = headerGet(r.Header, s.file.UserHeader)
	}
	rs := p.tiers[tier]
	var buf [12]string
	d := l.decide(ctx, p, rs, identityParts(buf[:0], p.spec, id), now)
	d.Policy, d.Tier = p.spec.Name, tier
	if d.Reason != ReasonFailLocal && d.Reason != ReasonStoreSlow && d.Reason != ReasonStoreBusy {
		d.policyField = rs.policyField
	}
	l.finish(&d, now, ip, id)
	return d
}

// identityParts appends the key parts of id for spec to dst: the policy
// name, then a (label, value) pair per identity part. A missing part is
// replaced by the client IP (label "anon"), so anonymous traffic is still
// counted per client.
func identityParts(dst []string, spec policy.PolicySpec, id Identity) []string {
	dst = append(dst, spec.Name)
	ip := ""
	for _, pt := range spec.Identity {
		var label, v string
		switch pt {
		case policy.PartIP:
			label = "ip"
		case policy.PartAPIKey:
			label, v = "k", id.KeyID
		case policy.PartUser:
			label, v = "u", id.User
		case policy.PartTenant:
			label, v = "t", id.Tenant
		case policy.PartRoute:
			label, v = "r", id.Route
		}
		if v == "" {
			if ip == "" {
				ip = id.IP.String()
			}
			if pt != policy.PartIP {
				label = "anon"
			}
			v = ip
		}
		dst = append(dst, label, v)
	}
	return dst
}

func (l *Limiter) finish(d *Decision, now time.Time, ip netip.Addr, id Identity) {
	if !d.Allowed && d.Status == 0 {
		d.Status = rejectStatus(d.Reason)
	}
	l.cfg.Metrics.decision(d)
	if d.Shadow != "" {
		l.cfg.Metrics.shadowReject(d.Policy, d.Shadow)
	}
	if (!d.Allowed && d.Reason != ReasonCanceled || d.Shadow != "") && l.cfg.Events != nil {
		ev := Event{
			Time: now, Policy: d.Policy, Tier: d.Tier, Reason: d.Reason, Status: d.Status,
			Limit: d.Binding.Limit.Name, IP: ip.String(), KeyID: id.KeyID, Tenant: id.Tenant, Route: id.Route,
			RetryAfter: d.RetryAfter().Seconds(),
		}
		if d.Allowed { // a dry run's would-be rejection
			ev.Shadow, ev.Limit, ev.Status, ev.RetryAfter = true, d.Shadow, http.StatusTooManyRequests, 0
		}
		l.cfg.Events.Emit(ev)
	}
}

// decide runs mitigation cache → breaker → leases → shared count → fail
// mode for one identity.
func (l *Limiter) decide(ctx context.Context, p *compiledPolicy, rs *rules, parts []string, now time.Time) Decision {
	mitKey := counter.Key(parts...)
	var kbuf [4]string // most rules have few limits: no allocation
	var keys []string
	if len(rs.limits) <= len(kbuf) {
		keys = kbuf[:len(rs.limits)]
	} else {
		keys = make([]string, len(rs.limits))
	}
	for i, r := range rs.limits {
		if r.distinct {
			keys[i] = counter.Key(append(parts[:len(parts):len(parts)], "l", r.spec.Limit.Name)...)
		} else {
			keys[i] = mitKey
		}
	}
	if e, ok := p.mit.get(mitKey, now); ok && e.tier == rs.tier {
		return e.replay(now)
	}
	var fl flags
	if rs.flagged {
		// Mitigation timeouts and exhausted response-counted limits are
		// shared: a worker that never saw the identity blocks it too.
		if fl = l.readFlags(ctx, p, rs, mitKey, now); fl.block != nil {
			return *fl.block
		}
	}
	d := l.decideCount(ctx, p, rs, keys, mitKey, fl, now)
	if d.Allowed {
		l.admitted(ctx, p, rs, parts, keys, &d, now)
	}
	return d
}

// decideCount runs breaker → leases → shared count → fail mode, the dry
// run beside, and remembers a rejection (mitigation cache and flags).
func (l *Limiter) decideCount(ctx context.Context, p *compiledPolicy, rs *rules, keys []string, mitKey string, fl flags, now time.Time) Decision {
	if !rs.countsAtAdmission() {
		return Decision{Allowed: true, Reason: ReasonStore}
	}
	if !l.breaker.Allow(now) {
		return l.fallback(ctx, p, rs, keys, now)
	}
	if !l.acquire(ctx) {
		l.breaker.Release()
		if ctx.Err() != nil {
			return Decision{Reason: ReasonCanceled}
		}
		return l.local(ctx, rs, keys, now, ReasonStoreBusy)
	}
	start := time.Now() // real time: see Decide
	sctx := newStoreCtx(ctx, start.Add(l.dl.Current()))
	d, err := l.count(sctx, rs, keys, now, false)
	if err == nil && rs.shadow {
		l.shadowPass(sctx, p, rs, keys, mitKey, fl, &d, now)
	}
	sctx.release()
	<-l.slots
	lat := time.Since(start)
	l.dl.Observe(start, lat)
	contention := errors.Is(err, counter.ErrContention)
	l.cfg.Metrics.store(lat, err, contention)
	if err != nil && ctx.Err() != nil {
		// The client went away: not the store's fault, and not a
		// reason to admit (nor to count a fail-open).
		l.breaker.Release()
		return Decision{Reason: ReasonCanceled}
	}
	if contention {
		// A hot key, not a sick store: failing open here would let
		// whoever hammers one key open the breaker for every key.
		l.breaker.Observe(now, nil)
		return contended(rs)
	}
	l.breaker.Observe(now, err)
	if err != nil {
		if IsTimeout(err) && l.breaker.State() == BreakerClosed && l.breaker.Live(now) {
			// A live store that was slow this once (a burst): not a
			// reason to fail open, nor to answer 503.
			return l.local(ctx, rs, keys, now, ReasonStoreSlow)
		}
		return l.fallback(ctx, p, rs, keys, now)
	}
	if !d.Allowed && d.Binding.Result.RetryAfter > 0 {
		d = l.remember(ctx, p, rs, mitKey, "", d, now)
	}
	return d
}

// contended is the rejection of a request whose count could not be
// updated (counter.ErrContention): bound to the first token bucket of the
// rule (the limit that races), retry after one token's interval.
func contended(rs *rules) Decision {
	lim := rs.limits[0].spec.Limit
	for _, r := range rs.limits {
		if r.spec.Limit.Algorithm == counter.TokenBucket {
			lim = r.spec.Limit
			break
		}
	}
	retry := max(lim.Window/time.Duration(max(lim.Quantity, 1)), time.Millisecond)
	return Decision{
		Status: http.StatusTooManyRequests, Reason: ReasonContention,
		Binding: LimitResult{Limit: lim, Result: counter.Result{Limit: lim.Quantity, Reset: retry, RetryAfter: retry}},
	}
}

// count asks the shared count (and the leases) about every limit counted
// at admission that is a dry run (shadow) or not (!shadow). The
// Decision's All holds those limits only, in policy order.
func (l *Limiter) count(ctx context.Context, rs *rules, keys []string, now time.Time, shadow bool) (Decision, error) {
	n := 0
	for _, r := range rs.limits {
		if r.shadow == shadow && !r.after {
			n++
		}
	}
	all := make([]LimitResult, 0, n)
	// Stack buffers: most rules have few limits.
	var cbuf [4]counter.Check
	var ibuf, lbuf [4]int
	checks, idx, leased := cbuf[:0], ibuf[:0], lbuf[:0]
	leasedAll := true
	for i, r := range rs.limits {
		if r.shadow != shadow || r.after {
			continue
		}
		j := len(all) // r's index in all
		all = append(all, LimitResult{Limit: r.spec.Limit})
		if r.lease == nil {
			leasedAll = false
			checks = append(checks, r.check(keys[i]))
			idx = append(idx, j)
			continue
		}
		res, served, err := r.lease.take(ctx, keys[i], now, 1)
		if err != nil {
			l.giveBack(rs, keys, leased, now)
			return Decision{}, err
		}
		all[j].Result = res
		if !served {
			leasedAll = false
		}
		if !res.Allowed {
			l.giveBack(rs, keys, leased, now)
			return verdict(all, j+1, ReasonStore), nil // the limits after j were not consulted
		}
		leased = append(leased, i)
	}
	switch len(checks) {
	case 0:
	case 1:
		// AllowAll of one check is that check (nothing to undo when it
		// refuses): skip its result slice.
		c := checks[0]
		res, err := c.Allower.AllowN(ctx, c.Key, now, c.Cost) // one request: Cost units (r.cost ≥ 1)
		if err != nil {
			l.giveBack(rs, keys, leased, now)
			return Decision{}, err
		}
		all[idx[0]].Result = res
		if !res.Allowed {
			l.giveBack(rs, keys, leased, now)
		}
	default:
		_, results, err := counter.AllowAll(ctx, now, 1, checks...)
		if err != nil {
			l.giveBack(rs, keys, leased, now)
			return Decision{}, err
		}
		refused := false
		for j, res := range results {
			all[idx[j]].Result = res
			refused = refused || !res.Allowed
		}
		if refused {
			l.giveBack(rs, keys, leased, now)
		}
	}
	reason := ReasonStore
	if leasedAll && len(all) > 0 {
		reason = ReasonLease
	}
	return verdict(all, len(all), reason), nil
}

func (l *Limiter) giveBack(rs *rules, keys []string, leased []int, now time.Time) {
	for _, i := range leased {
		rs.limits[i].lease.giveBack(keys[i], now, 1)
	}
}

// verdict is the decision over the first consulted limits of all (a lease
// that refused leaves the later ones unasked): the binding limit is
// counter.Closest's, the request is admitted when that one admitted it
// (or when none was consulted).
func verdict(all []LimitResult, consulted int, reason Reason) Decision {
	var buf [4]counter.Result // most rules have few limits: no allocation
	rs := buf[:0]
	for _, lr := range all[:consulted] {
		rs = append(rs, lr.Result)
	}
	d := Decision{Allowed: true, Reason: reason, All: all}
	if b := counter.Closest(rs); b >= 0 {
		d.Binding = all[b]
		d.Allowed = all[b].Result.Allowed
	}
	return d
}

// Dry run (shadow mode): a limit, a policy or the whole Limiter
// (Config.Shadow, edge --shadow) counts and decides as usual, but a
// request only dry-run limits would reject is admitted. The dry-run
// limits of a rule are counted together (counter.AllowAll, as if they were
// the rule), apart from the enforcing ones, with the same mitigation cache
// logic under their own entries: a dry run's would-be rejections are the
// rejections the same limits would make enforcing, on the same traffic.
// They are reported by Decision.Shadow, the poplimit_shadow_rejections_total
// metric, a rejection event with "shadow": true, and, with the policy
// file's shadow_header, an X-RateLimit-Shadow response header. Dry-run
// limits write no RateLimit-* headers and never reject in a fail mode.
// Promoting a limit to enforcing is a reload: its counts live in the store
// under the same keys (they derive from the identity, algorithm and
// window, not from shadow), so it enforces from the count the dry run
// reached.

// ShadowHeader is the response header naming the dry-run limit that would
// have rejected the request (policy file: shadow_header: true).
const ShadowHeader = "X-RateLimit-Shadow"

// shadowPass counts the dry-run limits of rs for an admitted or rejected
// d and records in d.Shadow the one that would have rejected an admitted
// request. A store error leaves d alone: a dry run never changes a
// decision.
func (l *Limiter) shadowPass(ctx context.Context, p *compiledPolicy, rs *rules, keys []string, mitKey string, fl flags, d *Decision, now time.Time) {
	if e, ok := p.mit.get(mitKey+flagShadow, now); ok && e.tier == rs.tier {
		if d.Allowed {
			d.Shadow = e.binding.Limit.Name
		}
		return
	}
	if fl.shadowUntil.After(now) {
		if d.Allowed {
			d.Shadow = fl.shadowLimit
		}
		return
	}
	sd, err := l.count(ctx, rs, keys, now, true)
	if err != nil {
		l.cfg.Metrics.shadowError(p.spec.Name)
		return
	}
	d.ShadowBinding = sd.Binding
	if sd.Allowed {
		return
	}
	if sd.Binding.Result.RetryAfter > 0 {
		l.remember(ctx, p, rs, mitKey, flagShadow, sd, now)
	}
	if d.Allowed {
		d.Shadow = sd.Binding.Limit.Name
	}
}

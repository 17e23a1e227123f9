package pop

// Step 2, the policy snapshot: a policy.File compiled into immutable
// rules and published atomically; lookups never lock.

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// snapshot is an immutable compiled policy file. Lookups never lock.
type snapshot struct {
	file      *policy.File
	mux       *http.ServeMux
	rc        routeCache                 // memoised mux lookups
	routes    map[string]*compiledPolicy // by ServeMux pattern
	policies  map[string]*compiledPolicy // by name
	prefilter counter.Allower            // nil when the file has none
	unmatched *compiledPolicy            // the default policy, nil when none
	loadedAt  time.Time
}

// compiledPolicy is one compiled policy. It is reused as a whole by the next
// snapshot when its fingerprint (definition and every tier it can pick) is
// unchanged, keeping its mitigation cache and leases; otherwise it is
// rebuilt and its cache starts empty.
type compiledPolicy struct {
	spec        policy.PolicySpec
	fingerprint uint64
	tiers       map[string]*rules
	mit         *mitigationCache
	needKey     bool // the API key must be extracted
}

// rules is the compound rule of one tier within one policy.
type rules struct {
	tier   string
	limits []*rule
	// policyField is the draft-11 RateLimit-Policy value of the shared
	// limits, built once.
	policyField string
	// conc are the concurrency limits (finish.go), taken after the
	// rate limits admitted.
	conc []*concRule
	// shadow: some limit is a dry run; flagged: some limit has a
	// mitigation timeout or counts by response, so a decision first reads
	// the identity's shared flags (mitigation.go).
	shadow, flagged bool
}

// rule is one limit, with the allowers that enforce it.
type rule struct {
	spec policy.LimitSpec
	// distinct: another limit of the rule has the same algorithm and
	// window, so this one's key carries its name (counter derives store
	// keys from identity + algorithm + window).
	distinct bool
	shared   counter.Allower // the PoP-wide count
	local    counter.Allower // local budget: FailLocal, store_slow, store_busy
	lease    *leaser         // nil unless the policy leases
	// cost is the units one request takes from shared, local and lease
	// (LimitSpec.Cost, at least 1): counter.Check.Cost.
	cost int64
	// shadow: a dry run (the limit's, its policy's or Config.Shadow);
	// after: counted once the response is known (finish.go).
	shadow, after bool
}

// check is the counter.Check of r's shared count for key.
func (r *rule) check(key string) counter.Check {
	return counter.Check{Allower: r.shared, Key: key, Cost: r.cost}
}

func newRouteMux() *http.ServeMux { return http.NewServeMux() }

var nopHandler = func(http.ResponseWriter, *http.Request) {}

// localLimit divides l for one of workers workers, rounding down but never
// to zero.
func localLimit(l counter.Limit, workers int) counter.Limit {
	if workers <= 1 {
		return l
	}
	w := int64(workers)
	l.Quantity = max(1, l.Quantity/w)
	if l.Burst > 0 {
		l.Burst = max(1, l.Burst/w)
	}
	return l
}

// compile builds a snapshot from f, reusing unchanged policies of old.
func (l *Limiter) compile(f *policy.File, old *snapshot, now time.Time) (s *snapshot, err error) {
	s = &snapshot{file: f, mux: newRouteMux(), routes: map[string]*compiledPolicy{}, policies: map[string]*compiledPolicy{}, loadedAt: now}
	defer func() {
		if r := recover(); r != nil { // conflicting ServeMux patterns
			err = &policy.ValidationError{File: f.Name, Field: "policies.routes", Msg: fmt.Sprint(r)}
		}
	}()
	if f.Prefilter != nil {
		pl := counter.Limit{Name: "prefilter", Algorithm: counter.TokenBucket, Quantity: f.Prefilter.Quantity, Window: f.Prefilter.Window, Burst: f.Prefilter.Burst, OnReject: counter.Refund}
		if old != nil && old.prefilter != nil && old.prefilter.Limit() == pl {
			s.prefilter = old.prefilter
		} else if s.prefilter, err = l.cfg.NewLocal(pl); err != nil {
			return nil, fmt.Errorf("pop: prefilter: %w", err)
		}
	}
	for _, ps := range f.Policies {
		fp := fingerprint(ps, f)
		var p *compiledPolicy
		if old != nil {
			if op := old.policies[ps.Name]; op != nil && op.fingerprint == fp {
				p = op
			}
		}
		if p == nil {
			if p, err = l.compilePolicy(ps, f, fp); err != nil {
				return nil, err
			}
		}
		s.policies[ps.Name] = p
		if ps.Name == f.DefaultPolicy {
			s.unmatched = p
		}
		for _, pat := range ps.Routes {
			s.mux.HandleFunc(pat, nopHandler)
			s.routes[pat] = p
		}
	}
	if s.unmatched == nil {
		l.cfg.logger().Warn("requests that match no route are not limited (set default_policy to limit them)",
			"file", f.Name, "explicit", f.UnmatchedUnlimited)
	}
	return s, nil
}

func (l *Limiter) compilePolicy(ps policy.PolicySpec, f *policy.File, fp uint64) (*compiledPolicy, error) {
	p := &compiledPolicy{spec: ps, fingerprint: fp, tiers: map[string]*rules{}, mit: newMitigationCache(l.cfg.mitigationEntries())}
	p.needKey = ps.TierSource == "api_key"
	for _, part := range ps.Identity {
		if part == policy.PartAPIKey || part == policy.PartTenant {
			p.needKey = true
		}
	}
	for name, t := range f.Tiers {
		specs := t.Limits
		if o, ok := ps.Overrides[name]; ok {
			specs = o
		}
		rs := &rules{tier: name}
		for _, ls := range specs {
			if ls.Concurrency.MaxRequestTime > 0 {
				rs.conc = append(rs.conc, newConcRule(ls))
				continue
			}
			r := &rule{spec: ls, cost: max(1, ls.Cost), shadow: ls.Shadow || ps.Shadow || l.cfg.Shadow, after: ls.Response.Set()}
			rs.shadow = rs.shadow || r.shadow
			rs.flagged = rs.flagged || r.after || ls.MitigationTimeout > 0
			for _, o := range specs {
				if o.Limit.Name != ls.Limit.Name && o.Limit.Algorithm == ls.Limit.Algorithm && o.Limit.Window == ls.Limit.Window {
					r.distinct = true
				}
			}
			a, err := l.sharedAllower(ls, ps.FailMode)
			if err != nil {
				return nil, fmt.Errorf("pop: policy %s tier %s limit %s: %w", ps.Name, name, ls.Limit.Name, err)
			}
			r.shared = a
			// Every policy has a local budget: the local fail mode, and
			// decisions a live but slow store did not answer in time
			// (ReasonStoreSlow, ReasonStoreBusy).
			la, err := l.cfg.NewLocal(localLimit(ls.Limit, l.cfg.localShares(ls)))
			if err != nil {
				return nil, fmt.Errorf("pop: policy %s tier %s limit %s local: %w", ps.Name, name, ls.Limit.Name, err)
			}
			r.local = la
			if ps.Lease.Enabled && !r.after {
				mb := ps.Lease.MaxBatch
				if mb <= 0 {
					// Default: a quarter of each worker's share of the
					// allowance (newLeaser caps it at allowance ÷ cost).
					mb = max(1, policy.Allowance(ls.Limit)/(4*int64(l.cfg.workers())))
				}
				h := ps.Lease.Horizon
				if h <= 0 {
					h = 100 * time.Millisecond
				}
				r.lease = newLeaser(r.shared, r.cost, mb, h, l.cfg.mitigationEntries())
				if ls.Limit.OnReject != counter.Refund {
					// Batches of a Count limit are fetched with Refund
					// semantics: a refused batch must not count (nor put
					// a bucket into debt); the request alone is then
					// judged, and counted, by r.shared.
					rl := sharedLimit(ls.Limit)
					rl.OnReject = counter.Refund
					ra, err := l.cfg.NewShared(rl)
					if err != nil {
						return nil, fmt.Errorf("pop: policy %s tier %s limit %s lease: %w", ps.Name, name, ls.Limit.Name, err)
					}
					r.lease.batchA = ra
				}
			}
			rs.limits = append(rs.limits, r)
		}
		// Dry-run limits stay out of the headers: clients see what is
		// enforced.
		var lrs []LimitResult
		for _, r := range rs.limits {
			if !r.shadow {
				lrs = append(lrs, LimitResult{Limit: r.spec.Limit})
			}
		}
		if !hasCalendar(lrs) { // a calendar window's length varies: per answer
			rs.policyField = string(appendPolicyField(nil, lrs))
		}
		p.tiers[name] = rs
	}
	return p, nil
}

// fingerprint hashes a policy's definition and every tier it may use.
func fingerprint(ps policy.PolicySpec, f *policy.File) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%#v\n", ps)
	var names []string
	for n := range f.Tiers {
		names = append(names, n)
	}
	// Map order must not change the fingerprint.
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s=%#v\n", n, f.Tiers[n])
	}
	return h.Sum64()
}

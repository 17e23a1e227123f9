package pop

// The limit engine without HTTP: named rules compiled from limit specs
// and decided in batches (cmd/rls decides Envoy's descriptors with it).

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// RuleSpec is one named rule of a RuleSet: a compound of limits (all must
// admit) with the fail mode and leasing of a policy.
type RuleSpec struct {
	// Name identifies the rule within its set and prefixes every key it
	// counts, so two rules never share a count. It must not be empty.
	Name string
	// Limits are enforced together; at least one. Limit names must be
	// unique within the rule.
	Limits []policy.LimitSpec
	// FailMode applies when the store cannot be consulted.
	FailMode policy.FailMode
	// Lease enables token leasing (requests of one unit only).
	Lease policy.LeaseSpec
}

// RuleSet is an immutable set of compiled rules. Build it with
// Limiter.CompileRules; look rules up with Rule.
type RuleSet struct {
	rules map[string]*Rule
}

// Rule is one compiled rule: the same limits, mitigation cache, fail mode
// and leases the HTTP path uses for a policy.
type Rule struct {
	p  *compiledPolicy
	rs *rules
	// variants holds the rule compiled for a cost of hits × LimitSpec.Cost
	// per request, by hits (hits ≥ 2), built on first use.
	variants sync.Map // int64 → *rules
}

// ruleTier is the tier name of every compiled rule.
const ruleTier = "rule"

// maxRuleVariants bounds the per-hits compilations kept by a rule; beyond
// it a variant is built for the one call.
const maxRuleVariants = 64

// Rule is the rule named name, nil when the set has none (or s is nil).
func (s *RuleSet) Rule(name string) *Rule {
	if s == nil {
		return nil
	}
	return s.rules[name]
}

// Len is the number of rules in s.
func (s *RuleSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// Spec is the definition r was compiled from.
func (r *Rule) Spec() RuleSpec {
	t := r.p.spec
	specs := make([]policy.LimitSpec, len(r.rs.limits))
	for i, l := range r.rs.limits {
		specs[i] = l.spec
	}
	return RuleSpec{Name: t.Name, Limits: specs, FailMode: t.FailMode, Lease: t.Lease}
}

// CompileRules compiles specs into a RuleSet. A rule of old whose
// definition is unchanged is reused as it is (its mitigation cache and
// leases survive the reload); every other rule starts afresh. On error
// nothing is returned and old stays valid.
func (l *Limiter) CompileRules(specs []RuleSpec, old *RuleSet) (*RuleSet, error) {
	s := &RuleSet{rules: make(map[string]*Rule, len(specs))}
	for _, spec := range specs {
		switch {
		case spec.Name == "":
			return nil, fmt.Errorf("%w: rule with an empty name", ErrConfig)
		case len(spec.Limits) == 0:
			return nil, fmt.Errorf("%w: rule %q has no limits", ErrConfig, spec.Name)
		case s.rules[spec.Name] != nil:
			return nil, fmt.Errorf("%w: rule %q defined twice", ErrConfig, spec.Name)
		}
		seen := map[string]bool{}
		for _, ls := range spec.Limits {
			if seen[ls.Limit.Name] {
				return nil, fmt.Errorf("%w: rule %q: limit name %q used twice", ErrConfig, spec.Name, ls.Limit.Name)
			}
			seen[ls.Limit.Name] = true
			if err := ls.Limit.Validate(); err != nil {
				return nil, fmt.Errorf("%w: rule %q limit %q: %w", ErrConfig, spec.Name, ls.Limit.Name, err)
			}
		}
		ps := policy.PolicySpec{Name: spec.Name, FailMode: spec.FailMode, Lease: spec.Lease}
		f := &policy.File{Tiers: map[string]policy.TierSpec{ruleTier: {Name: ruleTier, Limits: spec.Limits}}}
		fp := fingerprint(ps, f)
		if o := old.Rule(spec.Name); o != nil && o.p.fingerprint == fp {
			s.rules[spec.Name] = o
			continue
		}
		p, err := l.compilePolicy(ps, f, fp)
		if err != nil {
			return nil, err
		}
		s.rules[spec.Name] = &Rule{p: p, rs: p.tiers[ruleTier]}
	}
	return s, nil
}

// forHits is r's rules for requests of hits units (hits ≥ 1). Hits above
// one never lease. Each hits value counts under its own tier name, so the
// mitigation cache replays a rejection only to requests of the same size.
func (r *Rule) forHits(hits int64) *rules {
	if hits == 1 {
		return r.rs
	}
	if v, ok := r.variants.Load(hits); ok {
		return v.(*rules)
	}
	v := &rules{tier: fmt.Sprintf("%s×%d", ruleTier, hits), policyField: r.rs.policyField, limits: make([]*rule, len(r.rs.limits)),
		shadow: r.rs.shadow, flagged: r.rs.flagged}
	for i, l := range r.rs.limits {
		c := *l
		c.cost, c.lease = l.cost*hits, nil
		v.limits[i] = &c
	}
	n := 0
	r.variants.Range(func(any, any) bool { n++; return n < maxRuleVariants })
	if n < maxRuleVariants {
		r.variants.Store(hits, v)
	}
	return v
}

// Check is one question of a batch: may Hits units pass Rule for the
// identity Parts?
type Check struct {
	Rule *Rule
	// Parts are the identity's key parts (e.g. an Envoy descriptor's
	// domain, keys and values); the rule's name is put in front of them.
	Parts []string
	// Hits is the number of units the request takes, each costing the
	// limits' LimitSpec.Cost. 0 checks without counting: the answer is
	// whether the identity is within every limit now (counter.Peeker);
	// with the store unavailable it is admitted except under FailClosed.
	Hits int64
}

// DecideAll decides every check at now, into out (len(out) must be
// len(checks); out[i] answers checks[i]). Each check runs the same stages
// as Decide (mitigation cache, breaker, in-flight slot, leases, shared
// count, fail mode, metrics under the rule's name as the policy); the
// checks run concurrently, on long-lived workers (checkJob), so that
// their store calls meet in the store's pipeline (memcached.PipeStore with
// Multiplex writes them in one batch), except that checks of one identity
// (same Rule and Parts) run one after another in batch order: each answer
// sees the counts after the checks of that identity before it. A check with a nil Rule is admitted
// with ReasonNoPolicy; a negative Hits is refused (Status 400, Reason
// "bad_input").
func (l *Limiter) DecideAll(ctx context.Context, checks []Check, now time.Time, out []Decision) {
	if len(out) != len(checks) {
		panic("pop: DecideAll: len(out) != len(checks)")
	}
	if len(checks) == 1 {
		out[0] = l.decideCheck(ctx, checks[0], now)
		return
	}
	// Every check goes to a worker, the caller only waits: its goroutine
	// (one per gRPC call) then never grows its stack down the decision.
	b, _ := checkBatches.Get().(*checkBatch)
	if b == nil {
		b = &checkBatch{}
	}
	defer b.recycle()
	jobs := b.jobs[:0]
	if len(checks) > len(b.jobs) {
		jobs = make([]checkJob, 0, len(checks))
	}
	heads := 0
	var byIdentity map[string]*checkJob // large batches: the chain heads by identity
	if len(checks) > maxScanned {
		byIdentity = make(map[string]*checkJob, len(checks))
	}
	for i := range checks {
		if checks[i].Rule == nil {
			out[i] = Decision{Allowed: true, Reason: ReasonNoPolicy}
			continue
		}
		jobs = append(jobs, checkJob{l: l, ctx: ctx, c: &checks[i], now: now, out: &out[i], wg: &b.wg})
		// A check of the identity of an earlier one runs after it, on
		// its worker: each answer sees the counts of the checks before.
		j := &jobs[len(jobs)-1]
		var p *checkJob
		if byIdentity == nil {
			p = sameIdentity(jobs[:len(jobs)-1], j.c)
		} else {
			id := j.c.Rule.p.spec.Name + "\x00" + strings.Join(j.c.Parts, "\x00")
			if p = byIdentity[id]; p == nil {
				byIdentity[id] = j
			}
		}
		if p != nil {
			for p.then != nil {
				p = p.then
			}
			p.then, j.chained = j, true
			continue
		}
		heads++
	}
	b.wg.Add(heads)
	for i := range jobs {
		if !jobs[i].chained {
			goCheck(&jobs[i])
		}
	}
	b.wg.Wait()
}

// maxScanned is the largest batch whose same-identity checks are found
// by scanning (quadratic) rather than with a map.
const maxScanned = 16

// sameIdentity is the first of jobs whose check has c's rule and parts
// (so counts under c's keys), nil when none.
func sameIdentity(jobs []checkJob, c *Check) *checkJob {
	for i := range jobs {
		if j := &jobs[i]; j.c.Rule == c.Rule && !j.chained && slices.Equal(j.c.Parts, c.Parts) {
			return j
		}
	}
	return nil
}

// ReasonBadInput is the Reason of a check DecideAll refused as malformed.
const ReasonBadInput Reason = "bad_input"

func (l *Limiter) decideCheck(ctx context.Context, c Check, now time.Time) Decision {
	if c.Rule == nil {
		return Decision{Allowed: true, Reason: ReasonNoPolicy}
	}
	if c.Hits < 0 {
		return Decision{Status: http.StatusBadRequest, Reason: ReasonBadInput}
	}
	var buf [16]string
	parts := append(append(buf[:0], c.Rule.p.spec.Name), c.Parts...)
	var d Decision
	if c.Hits == 0 {
		d = l.peekRule(ctx, c.Rule, parts, now)
	} else {
		rs := c.Rule.forHits(c.Hits)
		d = l.decide(ctx, c.Rule.p, rs, parts, now)
		if d.Reason != ReasonFailLocal && d.Reason != ReasonStoreSlow && d.Reason != ReasonStoreBusy {
			d.policyField = rs.policyField
		}
	}
	d.Policy, d.Tier = c.Rule.p.spec.Name, ruleTier
	if !d.Allowed && d.Status == 0 {
		d.Status = rejectStatus(d.Reason)
	}
	l.cfg.Metrics.decision(&d)
	return d
}

// peekRule answers a check of zero hits: every limit is read (never
// counted) through the breaker and the store deadline; a store failure
// answers by the fail mode (FailLocal admits: there is nothing to count).
func (l *Limiter) peekRule(ctx context.Context, r *Rule, parts []string, now time.Time) Decision {
	rs := r.rs
	if !l.breaker.Allow(now) {
		return l.peekFallback(r)
	}
	start := time.Now() // real time: see Decide
	sctx := newStoreCtx(ctx, start.Add(l.dl.Current()))
	all := make([]LimitResult, len(rs.limits))
	var err error
	for i, lim := range rs.limits {
		key := counter.Key(parts...)
		if lim.distinct {
			key = counter.Key(append(parts[:len(parts):len(parts)], "l", lim.spec.Limit.Name)...)
		}
		all[i].Limit = lim.spec.Limit
		pk, ok := lim.shared.(counter.Peeker)
		if !ok {
			err = fmt.Errorf("%w: limit %q cannot be read without counting", ErrConfig, lim.spec.Limit.Name)
			break
		}
		if all[i].Result, err = pk.Peek(sctx, key, now); err != nil {
			break
		}
	}
	sctx.release()
	lat := time.Since(start)
	l.dl.Observe(start, lat)
	l.cfg.Metrics.store(lat, err, false)
	if err != nil && ctx.Err() != nil {
		l.breaker.Release()
		return Decision{Reason: ReasonCanceled}
	}
	l.breaker.Observe(now, err)
	if err != nil {
		return l.peekFallback(r)
	}
	// The dry-run limits answer beside the enforcing ones, as Decide's.
	var enforcing, shadow []LimitResult
	for i, lim := range rs.limits {
		if lim.shadow {
			shadow = append(shadow, all[i])
		} else {
			enforcing = append(enforcing, all[i])
		}
	}
	d := verdict(enforcing, len(enforcing), ReasonStore)
	if len(shadow) > 0 {
		sd := verdict(shadow, len(shadow), ReasonStore)
		d.ShadowBinding = sd.Binding
		if d.Allowed && !sd.Allowed {
			d.Shadow = sd.Binding.Limit.Name
		}
	}
	return d
}

func (l *Limiter) peekFallback(r *Rule) Decision {
	if r.p.spec.FailMode == policy.FailClosed {
		return Decision{Reason: ReasonFailClosed, Status: http.StatusServiceUnavailable,
			Binding: LimitResult{Result: counter.Result{RetryAfter: l.cfg.Breaker.openFor()}}}
	}
	reason := ReasonFailOpen
	if r.p.spec.FailMode == policy.FailLocal {
		reason = ReasonFailLocal
	}
	return Decision{Allowed: true, Reason: reason}
}

// The goroutines DecideAll runs its checks on. A check's decision goes
// deep (engine → counter's coalescing → the store client's call), so a
// goroutine started for it grows its stack two or three times before it
// waits on the store, and is gone after: under load that stack copying
// and the goroutine's start were ~8% of rls's CPU. These workers live on
// with their grown stacks, each waiting for the next check.

// checkJob is one check of a DecideAll call, run by a worker.
type checkJob struct {
	l   *Limiter
	ctx context.Context
	c   *Check
	now time.Time
	out *Decision
	wg  *sync.WaitGroup
	// then is the next check of the same identity, run after this one;
	// chained marks a job run by an earlier one's worker.
	then    *checkJob
	chained bool
}

func (j *checkJob) run() {
	wg := j.wg
	for k := j; k != nil; k = k.then {
		*k.out = k.l.decideCheck(k.ctx, *k.c, k.now)
	}
	wg.Done()
}

// maxCheckWorkers bounds the workers that stay parked, waiting for a
// check, in one process (all Limiters share them): a burst needing more
// runs the extra checks on goroutines that end with them.
const maxCheckWorkers = 512

// checkWorkers hands checks to parked workers. One set per process: a
// worker holds no Limiter between jobs, and per-Limiter sets would leave
// parked goroutines behind every Limiter a program drops.
var checkWorkers = struct {
	jobs chan *checkJob // unbuffered: a send succeeds only into a parked worker
	n    atomic.Int64   // workers alive
}{jobs: make(chan *checkJob)}

// goCheck runs j on a parked worker, else on a new goroutine that becomes
// a worker when there is room for one.
func goCheck(j *checkJob) {
	select {
	case checkWorkers.jobs <- j:
		return
	default:
	}
	if checkWorkers.n.Add(1) > maxCheckWorkers {
		checkWorkers.n.Add(-1)
		go j.run()
		return
	}
	go checkWorker(j)
}

// checkWorker runs j, then every check handed to it, forever (bounded by
// maxCheckWorkers).
func checkWorker(j *checkJob) {
	for {
		j.run()
		j = nil // hold nothing of the finished call while parked
		j = <-checkWorkers.jobs
	}
}

// checkBatch is the state of one DecideAll call: one allocation for
// batches of up to len(jobs) checks.
type checkBatch struct {
	wg   sync.WaitGroup
	jobs [4]checkJob
}

// checkBatches recycles the batches of finished DecideAll calls: once
// wg.Wait returns, no worker touches a batch's jobs.
var checkBatches sync.Pool

func (b *checkBatch) recycle() {
	clear(b.jobs[:])
	checkBatches.Put(b)
}

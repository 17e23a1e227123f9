package rls

import (
	"errors"
	"fmt"
	"sync"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/policy"
)

// Request-level limits. A descriptor carrying a limit
// (RateLimitDescriptor.limit: requests_per_unit and unit, from Envoy's
// route config) is decided against that limit instead of the config's, as
// envoyproxy/ratelimit does: whenever the domain is known, whether or not
// the config matches the descriptor; an epoch-aligned fixed window of the
// unit, no name (never replaced), no shadow mode; the count is keyed by
// the domain, the entries and the unit (not the limit: raising it keeps
// the count). unit_multiplier is ignored, as envoyproxy/ratelimit ignores
// it. Deliberate differences: requests_per_unit 0 and an unknown unit are
// INVALID_ARGUMENT (envoyproxy/ratelimit rejects everything, or panics);
// a request-level limit counts apart from the config limit of the same
// descriptor (envoyproxy/ratelimit's cache key is the same for both when
// their units are, so one's hits spend the other's allowance).

// maxOverrides bounds the distinct (unit, requests_per_unit) pairs compiled;
// beyond, a new pair is INVALID_ARGUMENT.
const maxOverrides = 1024

// errOverride marks a request-level limit refused.
var errOverride = errors.New("rls: request-level limit")

type overrideKey struct {
	unit     Unit
	rpu      uint32
	onReject counter.OnReject
}

// override is one compiled request-level limit.
type override struct {
	limit *Limit
	rule  *pop.Rule
}

// overrides caches the compiled request-level limits. Safe for
// concurrent use.
type overrides struct {
	mu sync.Mutex
	m  map[overrideKey]*override
}

// override returns the compiled limit of unit u and rpu requests per unit,
// compiling it on first use.
func (s *Service) override(opt Options, u Unit, rpu uint32) (*override, error) {
	switch {
	case u <= UnitUnknown || u > UnitWeek:
		return nil, fmt.Errorf("%w: unknown unit %d", errOverride, u)
	case rpu == 0:
		return nil, fmt.Errorf("%w: requests_per_unit 0 is not supported", errOverride)
	}
	k := overrideKey{u, rpu, counter.Count}
	if opt.StopIncrementOverLimit {
		k.onReject = counter.Refund
	}
	o := &s.ov
	o.mu.Lock()
	defer o.mu.Unlock()
	if ov := o.m[k]; ov != nil {
		return ov, nil
	}
	if len(o.m) >= maxOverrides {
		return nil, fmt.Errorf("%w: more than %d distinct request-level limits", errOverride, maxOverrides)
	}
	// The rule's name prefixes its keys: one per unit, so requests with
	// another requests_per_unit share the count (envoyproxy/ratelimit's
	// cache key has no limit in it). No config rule has it: their names
	// (FullKey, domain.key…) have a dot.
	name := "~override/" + unitName(u)
	w := u.Duration()
	spec := pop.RuleSpec{Name: name, FailMode: policy.FailOpen, Limits: []policy.LimitSpec{{Limit: counter.Limit{
		Name: "override", Algorithm: counter.FixedWindow, Quantity: int64(rpu), Window: w, OnReject: k.onReject}}}}
	rs, err := s.cfg.Limiter.CompileRules([]pop.RuleSpec{spec}, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errOverride, err)
	}
	ov := &override{
		limit: &Limit{FullKey: name, Unit: u, RequestsPerUnit: rpu, Rule: spec, Fixed: w},
		rule:  rs.Rule(name),
	}
	if o.m == nil {
		o.m = map[overrideKey]*override{}
	}
	o.m[k] = ov
	return ov, nil
}

// unitName is u's name in the config files.
func unitName(u Unit) string {
	for n, v := range unitNames {
		if v == u {
			return n
		}
	}
	return "unknown"
}

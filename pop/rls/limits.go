package rls

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/policy"
)

// limitFields are the keys of rate_limit: envoyproxy/ratelimit's, then
// poplimit's extensions.
var limitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
	"algorithm", "window", "precision", "burst", "on_reject", "fail_mode", "limits", "scope"}

// extraFields are the keys of one entry of rate_limit.limits.
var extraFields = []string{"name", "unit", "requests_per_unit", "algorithm", "window", "precision", "burst", "on_reject", "scope"}

// limitDef is one limit as written: envoyproxy/ratelimit's unit and
// requests_per_unit or poplimit's window, with the algorithm fields.
type limitDef struct {
	name      string
	unit      Unit
	rpu       uint64
	hasRPU    bool
	window    time.Duration
	algorithm counter.Algorithm
	precision int
	burst     int64
	onReject  counter.OnReject
	global    bool // scope: global (package pop/global)
	line      int
}

func (p *parser) rateLimit(n *yaml.Node, fullKey string, shadow, detailed bool) *Limit {
	l := &Limit{FullKey: fullKey, ShadowMode: shadow, DetailedMetric: detailed, Line: n.Line}
	def := limitDef{algorithm: counter.FixedWindow, onReject: p.defaultOnReject(), line: n.Line}
	fm := policy.FailOpen
	var extras []limitDef
	p.fields(n, "rate_limit", limitFields, func(k string, v *yaml.Node) {
		switch k {
		case "unlimited":
			l.Unlimited = p.bool(v, k)
		case "name":
			l.Name = p.str(v, k)
			def.name = l.Name
		case "replaces":
			p.list(v, k, func(e *yaml.Node) {
				p.fields(e, "replaces", []string{"name"}, func(_ string, nv *yaml.Node) {
					l.Replaces = append(l.Replaces, p.str(nv, "replaces.name"))
				})
			})
		case "fail_mode":
			fm = oneOf(p, v, k, map[string]policy.FailMode{"open": policy.FailOpen, "closed": policy.FailClosed, "local": policy.FailLocal})
		case "limits":
			p.list(v, k, func(e *yaml.Node) {
				x := limitDef{algorithm: counter.FixedWindow, onReject: p.defaultOnReject(), line: e.Line}
				p.fields(e, "rate_limit.limits", extraFields, func(k string, v *yaml.Node) { p.limitField(&x, k, v) })
				extras = append(extras, x)
			})
		default:
			p.limitField(&def, k, v)
		}
	})
	for _, r := range l.Replaces {
		switch {
		case r == "":
			p.errf(n, "should not have an empty replaces entry")
		case r == l.Name:
			p.errf(n, "replaces should not contain name of same descriptor")
		}
	}
	if l.Unlimited {
		if len(extras) > 0 {
			p.errf(n, "an unlimited rate_limit cannot have limits")
		}
		l.Unit, l.RequestsPerUnit = def.unit, uint32(def.rpu)
		return l
	}
	if def.name == "" && !slices.ContainsFunc(extras, func(x limitDef) bool { return x.name == "limit1" }) {
		// The engine names what decided (a dry run's would-be rejection
		// is known by its limit's name), as pop's policies name theirs.
		def.name = "limit1"
	}
	specs := []policy.LimitSpec{p.limitSpec(n, def, "rate_limit")}
	for i, x := range extras {
		if x.name == "" {
			x.name = fmt.Sprintf("limit%d", i+2)
		}
		specs = append(specs, p.limitSpec(n, x, "rate_limit.limits"))
	}
	for i := range specs {
		// shadow_mode is pop's dry run: counted, decided, admitted, and
		// reported in Decision.Shadow and Decision.ShadowBinding.
		specs[i].Shadow = shadow
	}
	l.Unit, l.RequestsPerUnit = def.unit, uint32(def.rpu)
	if def.window > 0 && def.window != def.unit.Duration() {
		l.Unit = UnitUnknown
	}
	if def.algorithm == counter.FixedWindow {
		l.Fixed = specs[0].Limit.Window
	}
	l.Rule = pop.RuleSpec{Name: fullKey, Limits: specs, FailMode: fm}
	p.cfg.Rules = append(p.cfg.Rules, l.Rule)
	return l
}

func (p *parser) defaultOnReject() counter.OnReject {
	if p.opt.StopIncrementOverLimit {
		return counter.Refund
	}
	return counter.Count
}

func (p *parser) limitField(d *limitDef, k string, v *yaml.Node) {
	switch k {
	case "name":
		d.name = p.str(v, k)
	case "unit":
		s := p.str(v, k)
		u, ok := unitNames[strings.ToLower(s)]
		if !ok {
			p.errf(v, "invalid rate limit unit '%s'", s)
		}
		d.unit = u
	case "requests_per_unit":
		d.rpu, d.hasRPU = p.uint(v, k, 1<<32-1), true
	case "window":
		w, err := time.ParseDuration(p.str(v, k))
		if err != nil || w < time.Millisecond {
			p.errf(v, "window: want a duration of at least 1ms (e.g. 30s, 7m), got %s", kindName(v))
		}
		d.window = w
	case "algorithm":
		d.algorithm = oneOf(p, v, k, map[string]counter.Algorithm{"fixed_window": counter.FixedWindow, "sliding_window": counter.SlidingWindow, "token_bucket": counter.TokenBucket})
	case "precision":
		d.precision = int(p.uint(v, k, 1024))
	case "burst":
		d.burst = int64(p.uint(v, k, 1<<40))
	case "on_reject":
		d.onReject = oneOf(p, v, k, map[string]counter.OnReject{"count": counter.Count, "refund": counter.Refund})
	case "scope":
		d.global = oneOf(p, v, k, map[string]bool{"pop": false, "global": true})
	}
}

// limitSpec checks d and builds its engine limit.
func (p *parser) limitSpec(n *yaml.Node, d limitDef, what string) policy.LimitSpec {
	w := d.window
	if w == 0 {
		w = d.unit.Duration()
	}
	switch {
	case w == 0:
		p.errf(n, "%s: a unit (second, minute, hour, day, week, month, year) or a window is required", what)
	case !d.hasRPU:
		p.errf(n, "%s: requests_per_unit is required", what)
	case d.rpu == 0:
		p.errf(n, "%s: requests_per_unit 0 is not supported (use a small limit, or unlimited: false with a deny at Envoy)", what)
	}
	lim := counter.Limit{Name: d.name, Algorithm: d.algorithm, Quantity: int64(d.rpu), Window: w, Burst: d.burst, OnReject: d.onReject, Precision: d.precision}
	if w > 0 && d.rpu > 0 {
		if err := lim.Validate(); err != nil {
			p.errf(n, "%s: %v", what, err)
		}
	}
	if d.global && d.algorithm != counter.FixedWindow {
		p.errf(n, "%s: scope: global counts epoch-aligned fixed windows: set algorithm: fixed_window", what)
	}
	return policy.LimitSpec{Limit: lim, Global: d.global}
}

// oneOf reads a string that must be one of choices' keys.
func oneOf[T any](p *parser, n *yaml.Node, what string, choices map[string]T) T {
	s := p.str(n, what)
	v, ok := choices[s]
	if !ok && s != "" {
		var names []string
		for k := range choices {
			names = append(names, k)
		}
		p.errf(n, "%s: %q is not one of %s", what, s, strings.Join(sortedCopy(names), ", "))
	}
	return v
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

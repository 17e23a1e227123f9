package pop

// The policy half of the policy file: tiers, their limits, the pre-filter
// and the policies (routes, identity, overrides, fail mode, leases).

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poplimit/poplimit/counter"
)

func (p *parser) prefilter(n *yaml.Node, path string) *PrefilterSpec {
	ps := &PrefilterSpec{}
	p.fields(n, path, []string{"quantity", "window", "burst"}, func(k string, v *yaml.Node) {
		switch k {
		case "quantity":
			ps.Quantity = p.int(v, join(path, k), 1)
		case "window":
			ps.Window = p.dur(v, join(path, k))
		case "burst":
			ps.Burst = p.int(v, join(path, k), 0)
		}
	})
	if ps.Quantity == 0 {
		p.errf(n, join(path, "quantity"), "required")
	}
	if ps.Window == 0 {
		ps.Window = time.Second
	}
	return ps
}

func (p *parser) tiers(n *yaml.Node, f *File) {
	if n.Kind != yaml.MappingNode {
		p.errf(n, "tiers", "must be a mapping of tier name to tier")
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := "tiers." + k.Value
		if !validName(k.Value) {
			p.errf(k, path, "tier names use letters, digits, '-' and '_'")
		}
		t := TierSpec{Name: k.Value}
		p.fields(v, path, []string{"limits"}, func(k2 string, v2 *yaml.Node) {
			t.Limits = p.limits(v2, join(path, k2))
		})
		if len(t.Limits) == 0 {
			p.errf(v, join(path, "limits"), "at least one limit is required")
		}
		f.Tiers[k.Value] = t
	}
}

func (p *parser) limits(n *yaml.Node, path string) []LimitSpec {
	var out []LimitSpec
	names := map[string]bool{}
	p.list(n, path, func(i int, e *yaml.Node) {
		lp := fmt.Sprintf("%s[%d]", path, i)
		ls := LimitSpec{Cost: 1}
		l := &ls.Limit
		seen := map[string]bool{}
		p.fields(e, lp, []string{"name", "algorithm", "quantity", "window", "burst", "cost", "on_reject", "precision", "scope",
			"shadow", "mitigation_timeout", "count_if", "cost_header", "max_request_time", "retry_after",
			"time_zone", "start_day", "start_month", "start_weekday"}, func(k string, v *yaml.Node) {
			fp := join(lp, k)
			seen[k] = true
			if p.limitExtra(k, v, fp, &ls) { // shadow, concurrency, count by response: parse_limits.go
				return
			}
			if p.calendarField(k, v, fp, &ls) { // calendar windows: parse_calendar.go
				return
			}
			switch k {
			case "name":
				l.Name = p.str(v, fp)
				if !validName(l.Name) {
					p.errf(v, fp, "limit names use letters, digits, '-' and '_'")
				}
			case "algorithm":
				l.Algorithm = oneOf(p, v, fp, "sliding_window, fixed_window, token_bucket or concurrency",
					choice[counter.Algorithm]{"sliding_window", counter.SlidingWindow}, choice[counter.Algorithm]{"fixed_window", counter.FixedWindow},
					choice[counter.Algorithm]{"token_bucket", counter.TokenBucket})
			case "quantity":
				l.Quantity = p.int(v, fp, 1)
			case "window":
				l.Window = p.dur(v, fp)
			case "burst":
				l.Burst = p.int(v, fp, 0)
			case "cost":
				ls.Cost = p.int(v, fp, 1)
			case "on_reject":
				l.OnReject = oneOf(p, v, fp, "count or refund",
					choice[counter.OnReject]{"count", counter.Count}, choice[counter.OnReject]{"refund", counter.Refund})
			case "precision":
				l.Precision = int(p.int(v, fp, 0))
			case "scope":
				ls.Global = oneOf(p, v, fp, "pop or global", choice[bool]{"pop", false}, choice[bool]{"global", true})
			}
		})
		if ls.Global && l.Algorithm != counter.FixedWindow {
			p.errf(e, join(lp, "scope"), "a global limit counts epoch-aligned fixed windows: set algorithm: fixed_window")
		}
		if l.Name == "" {
			l.Name = fmt.Sprintf("limit%d", i)
		}
		if names[l.Name] {
			p.errf(e, join(lp, "name"), "duplicate limit name %q", l.Name)
		}
		names[l.Name] = true
		if !seen["quantity"] {
			p.errf(e, join(lp, "quantity"), "required")
		}
		if p.checkLimitExtra(e, lp, &ls, seen) {
			out = append(out, ls)
			return // a concurrency limit: no window, no algorithm
		}
		p.checkCalendar(e, lp, &ls, seen)
		if !seen["window"] {
			p.errf(e, join(lp, "window"), "required")
		}
		if l.Quantity > 0 && l.Window > 0 {
			if err := l.Validate(); err != nil {
				p.errf(e, lp, "%v", err)
			}
		}
		if ls.Cost > l.Quantity && l.Quantity > 0 && (l.Algorithm != counter.TokenBucket || l.Burst < ls.Cost) {
			p.errf(e, join(lp, "cost"), "cost %d exceeds the allowance: no request could ever pass", ls.Cost)
		}
		out = append(out, ls)
	})
	return out
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func (p *parser) policy(n *yaml.Node, path string, f *File) PolicySpec {
	ps := PolicySpec{TierSource: "api_key"}
	var maxBatchNode *yaml.Node
	p.fields(n, path, []string{"name", "routes", "identity", "tier", "default_tier", "overrides", "fail_mode", "lease", "shadow"}, func(k string, v *yaml.Node) {
		fp := join(path, k)
		switch k {
		case "shadow":
			ps.Shadow = p.bool(v, fp)
		case "name":
			ps.Name = p.str(v, fp)
			if !validName(ps.Name) {
				p.errf(v, fp, "policy names use letters, digits, '-' and '_'")
			}
		case "routes":
			ps.Routes = p.routeList(v, fp)
		case "identity":
			p.list(v, fp, func(i int, e *yaml.Node) {
				rp := fmt.Sprintf("%s[%d]", fp, i)
				switch pt := Part(p.str(e, rp)); pt {
				case PartIP, PartAPIKey, PartUser, PartTenant, PartRoute:
					ps.Identity = append(ps.Identity, pt)
				default:
					p.errf(e, rp, "must be ip, api_key, user, tenant or route; got %q", e.Value)
				}
			})
		case "tier":
			ps.TierSource = p.str(v, fp)
			if _, ok := f.Tiers[ps.TierSource]; !ok && ps.TierSource != "api_key" {
				p.errf(v, fp, "must be api_key or a tier name; got %q", ps.TierSource)
			}
		case "default_tier":
			ps.DefaultTier = p.str(v, fp)
			if _, ok := f.Tiers[ps.DefaultTier]; !ok {
				p.errf(v, fp, "unknown tier %q", ps.DefaultTier)
			}
		case "overrides":
			ps.Overrides = p.overrides(v, fp, f)
		case "fail_mode":
			ps.FailMode = oneOf(p, v, fp, "open, closed or local",
				choice[FailMode]{"open", FailOpen}, choice[FailMode]{"closed", FailClosed}, choice[FailMode]{"local", FailLocal})
		case "lease":
			p.fields(v, fp, []string{"enabled", "max_batch", "horizon"}, func(k2 string, v2 *yaml.Node) {
				switch k2 {
				case "enabled":
					ps.Lease.Enabled = p.bool(v2, join(fp, k2))
				case "max_batch":
					ps.Lease.MaxBatch = p.int(v2, join(fp, k2), 1)
					maxBatchNode = v2
				case "horizon":
					ps.Lease.Horizon = p.dur(v2, join(fp, k2))
				}
			})
		}
	})
	if ps.Name == "" {
		p.errf(n, join(path, "name"), "required")
	}
	if len(ps.Routes) == 0 && (ps.Name == "" || ps.Name != f.DefaultPolicy) {
		p.errf(n, join(path, "routes"), "at least one route pattern is required (only the default_policy may have none)")
	}
	if len(ps.Identity) == 0 {
		ps.Identity = []Part{PartIP}
	}
	if maxBatchNode != nil && ps.Lease.MaxBatch > 0 {
		p.checkMaxBatch(maxBatchNode, join(path, "lease.max_batch"), ps, f)
	}
	if ps.DefaultTier == "" {
		if _, ok := f.Tiers[ps.TierSource]; ok {
			ps.DefaultTier = ps.TierSource
		} else {
			p.errf(n, join(path, "default_tier"), "required when tier is api_key")
		}
	}
	return ps
}

// routeList parses a policy's route patterns, each new to the file.
func (p *parser) routeList(n *yaml.Node, path string) []string {
	var routes []string
	p.list(n, path, func(i int, e *yaml.Node) {
		rp := fmt.Sprintf("%s[%d]", path, i)
		r := p.str(e, rp)
		if err := p.addPattern(r); err != nil {
			p.errf(e, rp, "%v", err)
			return
		}
		routes = append(routes, r)
		p.routes = append(p.routes, routeNode{e, rp, r})
	})
	return routes
}

// overrides parses a policy's per-tier limits; nil when n is not a
// mapping (reported).
func (p *parser) overrides(n *yaml.Node, path string, f *File) map[string][]LimitSpec {
	if n.Kind != yaml.MappingNode {
		p.errf(n, path, "must be a mapping of tier name to limits")
		return nil
	}
	o := map[string][]LimitSpec{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		tk, tv := n.Content[i], n.Content[i+1]
		if _, ok := f.Tiers[tk.Value]; !ok {
			p.errf(tk, join(path, tk.Value), "unknown tier %q", tk.Value)
			continue
		}
		o[tk.Value] = p.limits(tv, join(path, tk.Value))
	}
	return o
}

// checkMaxBatch rejects a lease max_batch bigger than the allowance ÷ cost
// of a limit the policy may apply (every tier when the tier comes from the
// API key): such a batch could never be granted.
func (p *parser) checkMaxBatch(n *yaml.Node, path string, ps PolicySpec, f *File) {
	tiers := []string{ps.TierSource}
	if ps.TierSource == "api_key" {
		tiers = tiers[:0]
		for name := range f.Tiers {
			tiers = append(tiers, name)
		}
		sort.Strings(tiers)
	}
	for _, tier := range tiers {
		limits, ok := ps.Overrides[tier]
		if !ok {
			limits = f.Tiers[tier].Limits
		}
		for _, ls := range limits {
			if ls.Cost < 1 || ls.Concurrency.MaxRequestTime > 0 || ls.Response.Set() { // never leased
				continue
			}
			if c := allowanceOf(ls.Limit) / ls.Cost; ps.Lease.MaxBatch > c && c > 0 {
				p.errf(n, path, "%d exceeds what limit %s of tier %s can grant at once (%d)", ps.Lease.MaxBatch, ls.Limit.Name, tier, c)
				return
			}
		}
	}
}

// addPattern validates a ServeMux pattern "[METHOD ][HOST]/[PATH]" and
// checks it conflicts with no route registered before it.
func (p *parser) addPattern(s string) (err error) {
	if s == "" {
		return errors.New("empty route pattern")
	}
	if p.mux == nil {
		p.mux = newRouteMux()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bad route pattern %q: %v", s, r)
		}
	}()
	p.mux.HandleFunc(s, nopHandler)
	return nil
}

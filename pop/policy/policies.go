package policy

// The policies of the policy file: routes, identity, tier, overrides,
// fail mode, leases.

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

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
			if c := Allowance(ls.Limit) / ls.Cost; ps.Lease.MaxBatch > c && c > 0 {
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
		p.mux = http.NewServeMux()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bad route pattern %q: %v", s, r)
		}
	}()
	p.mux.HandleFunc(s, func(http.ResponseWriter, *http.Request) {})
	return nil
}

// patternHasUpper reports upper-case letters in the path of a ServeMux
// pattern "[METHOD ][HOST]/PATH", outside {wildcards}.
func patternHasUpper(pat string) bool {
	if i := strings.IndexByte(pat, '/'); i >= 0 {
		pat = pat[i:]
	}
	depth := 0
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; {
		case c == '{':
			depth++
		case c == '}':
			depth--
		case depth == 0 && c >= 'A' && c <= 'Z':
			return true
		}
	}
	return false
}

package pop

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poplimit/poplimit/counter"
)

// ParseFile reads and validates a policy file. A file that cannot be read
// is reported as such (errors.Is(err, fs.ErrNotExist) for a missing one),
// not as ErrInvalidPolicy.
func ParseFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pop: read policy: %w", err)
	}
	return Parse(path, data)
}

// Parse validates a policy document. name labels errors. Every problem
// found is reported (errors.Join of *ValidationError), each naming the file,
// line and field.
func Parse(name string, data []byte) (*File, error) {
	p := &parser{file: name}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		line := 0
		if s := err.Error(); strings.HasPrefix(s, "yaml: line ") {
			fmt.Sscanf(s, "yaml: line %d", &line)
		}
		return nil, &ValidationError{File: name, Line: line, Field: "(document)", Msg: err.Error()}
	}
	if len(doc.Content) == 0 {
		return nil, &ValidationError{File: name, Line: 1, Field: "(document)", Msg: "empty document"}
	}
	f := p.file_(doc.Content[0])
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return f, nil
}

type parser struct {
	file string
	errs []error
	mux  *http.ServeMux // every route seen so far, to report conflicts
	// routes are the route patterns seen, for checks that need the
	// whole file.
	routes []routeNode
}

type routeNode struct {
	node           *yaml.Node
	field, pattern string
}

func (p *parser) errf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &ValidationError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// fields iterates a mapping node, reporting unknown keys.
func (p *parser) fields(n *yaml.Node, path string, known []string, fn func(key string, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		field := path
		if field == "" {
			field = "(document)" // the root, as a YAML error is reported
		}
		p.errf(n, field, "must be a mapping")
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ok := false
		for _, kn := range known {
			if k.Value == kn {
				ok = true
				break
			}
		}
		if !ok {
			p.errf(k, join(path, k.Value), "unknown field (known: %s)", strings.Join(known, ", "))
			continue
		}
		fn(k.Value, v)
	}
}

func join(path, f string) string {
	if path == "" {
		return f
	}
	return path + "." + f
}

func (p *parser) str(n *yaml.Node, path string) string {
	if n.Kind != yaml.ScalarNode {
		p.errf(n, path, "must be a string")
		return ""
	}
	return n.Value
}

func (p *parser) int(n *yaml.Node, path string, min int64) int64 {
	if n.Kind != yaml.ScalarNode {
		p.errf(n, path, "must be an integer")
		return 0
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		p.errf(n, path, "must be an integer, got %q", n.Value)
		return 0
	}
	if v < min {
		p.errf(n, path, "must be ≥ %d, got %d", min, v)
	}
	return v
}

func (p *parser) bool(n *yaml.Node, path string) bool {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.errf(n, path, "must be true or false")
	}
	return b
}

// ParseDuration accepts Go durations ("250ms", "1h30m") and whole days
// ("1d", "7d").
func ParseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n <= 0 || n > 3650 {
			return 0, fmt.Errorf("bad day count %q", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func (p *parser) dur(n *yaml.Node, path string) time.Duration {
	if n.Kind != yaml.ScalarNode {
		p.errf(n, path, "must be a duration like 1s, 250ms, 1h, 1d")
		return 0
	}
	d, err := ParseDuration(n.Value)
	if err != nil {
		p.errf(n, path, "must be a duration like 1s, 250ms, 1h, 1d: %v", err)
		return 0
	}
	if d < time.Millisecond {
		p.errf(n, path, "must be at least 1ms, got %s", n.Value)
	}
	return d
}

func (p *parser) list(n *yaml.Node, path string, fn func(i int, v *yaml.Node)) {
	if n.Kind != yaml.SequenceNode {
		p.errf(n, path, "must be a list")
		return
	}
	for i, v := range n.Content {
		fn(i, v)
	}
}

func (p *parser) file_(n *yaml.Node) *File {
	f := &File{Name: p.file, Keys: map[string]KeyRecord{}, Tiers: map[string]TierSpec{}}
	var tiersNode, keysNode, policiesNode *yaml.Node
	var defaultNode, unmatchedNode *yaml.Node
	p.fields(n, "", []string{"version", "headers", "trusted_proxies", "api_key", "user_header", "prefilter", "keys", "tiers", "policies",
		"default_policy", "unmatched", "case_insensitive_paths", "max_forwarded_hops", "ip_prefix"}, func(k string, v *yaml.Node) {
		switch k {
		case "default_policy":
			f.DefaultPolicy, defaultNode = p.str(v, k), v
		case "unmatched":
			if p.str(v, k) != "unlimited" {
				p.errf(v, k, "must be unlimited (or set default_policy instead); got %q", v.Value)
			}
			f.UnmatchedUnlimited, unmatchedNode = true, v
		case "case_insensitive_paths":
			f.CaseInsensitivePaths = p.bool(v, k)
		case "max_forwarded_hops":
			f.MaxForwardedHops = int(p.int(v, k, 1))
			if f.MaxForwardedHops > 1024 {
				p.errf(v, k, "must be ≤ 1024, got %d", f.MaxForwardedHops)
			}
		case "ip_prefix":
			p.fields(v, k, []string{"ipv4", "ipv6"}, func(k2 string, v2 *yaml.Node) {
				if k2 == "ipv4" {
					f.IPv4Prefix = int(p.int(v2, join(k, k2), 1))
					if f.IPv4Prefix > 32 {
						p.errf(v2, join(k, k2), "must be ≤ 32, got %d", f.IPv4Prefix)
					}
					return
				}
				f.IPv6Prefix = int(p.int(v2, join(k, k2), 1))
				if f.IPv6Prefix > 128 {
					p.errf(v2, join(k, k2), "must be ≤ 128, got %d", f.IPv6Prefix)
				}
			})
		case "version":
			if ver := p.int(v, k, 1); ver != 1 {
				p.errf(v, k, "unsupported version %d (want 1)", ver)
			}
		case "headers":
			switch p.str(v, k) {
			case "both":
				f.Headers = HeadersBoth
			case "seed":
				f.Headers = HeadersSeed
			case "draft11":
				f.Headers = HeadersDraft11
			case "none":
				f.Headers = HeadersNone
			default:
				p.errf(v, k, "must be one of both, seed, draft11, none; got %q", v.Value)
			}
		case "trusted_proxies":
			p.list(v, k, func(i int, e *yaml.Node) {
				path := fmt.Sprintf("%s[%d]", k, i)
				s := p.str(e, path)
				pr, err := netip.ParsePrefix(s)
				if err != nil {
					a, err2 := netip.ParseAddr(s)
					if err2 != nil {
						p.errf(e, path, "must be a CIDR or an address, got %q", s)
						return
					}
					pr = netip.PrefixFrom(a, a.BitLen())
				}
				f.TrustedProxies = append(f.TrustedProxies, pr.Masked())
			})
		case "api_key":
			p.fields(v, k, []string{"header", "bearer", "query"}, func(k2 string, v2 *yaml.Node) {
				switch k2 {
				case "header":
					f.APIKey.Header = textproto.CanonicalMIMEHeaderKey(p.str(v2, join(k, k2)))
				case "bearer":
					f.APIKey.Bearer = p.bool(v2, join(k, k2))
				case "query":
					f.APIKey.Query = p.str(v2, join(k, k2))
				}
			})
		case "user_header":
			f.UserHeader = textproto.CanonicalMIMEHeaderKey(p.str(v, k))
		case "prefilter":
			f.Prefilter = p.prefilter(v, k)
		case "keys":
			keysNode = v
		case "tiers":
			tiersNode = v
		case "policies":
			policiesNode = v
		}
	})
	if tiersNode != nil {
		p.tiers(tiersNode, f)
	}
	if len(f.Tiers) == 0 {
		p.errf(n, "tiers", "at least one tier is required")
	}
	if keysNode != nil {
		p.list(keysNode, "keys", func(i int, e *yaml.Node) {
			path := fmt.Sprintf("keys[%d]", i)
			var key string
			var rec KeyRecord
			p.fields(e, path, []string{"key", "tenant", "tier"}, func(k string, v *yaml.Node) {
				switch k {
				case "key":
					key = p.str(v, join(path, k))
				case "tenant":
					rec.Tenant = p.str(v, join(path, k))
				case "tier":
					rec.Tier = p.str(v, join(path, k))
					if _, ok := f.Tiers[rec.Tier]; !ok {
						p.errf(v, join(path, k), "unknown tier %q", rec.Tier)
					}
				}
			})
			if key == "" {
				p.errf(e, join(path, "key"), "required")
				return
			}
			if _, dup := f.Keys[key]; dup {
				p.errf(e, join(path, "key"), "duplicate key (digest %s)", KeyID(key))
			}
			f.Keys[key] = rec
		})
	}
	if policiesNode == nil {
		p.errf(n, "policies", "at least one policy is required")
	} else {
		names := map[string]bool{}
		p.list(policiesNode, "policies", func(i int, e *yaml.Node) {
			ps := p.policy(e, fmt.Sprintf("policies[%d]", i), f)
			if ps.Name != "" && names[ps.Name] {
				p.errf(e, fmt.Sprintf("policies[%d].name", i), "duplicate policy name %q", ps.Name)
			}
			names[ps.Name] = true
			f.Policies = append(f.Policies, ps)
		})
	}
	p.unmatched(f, defaultNode, unmatchedNode)
	return f
}

// unmatched checks default_policy and unmatched together, and that route
// patterns are lower case when paths are matched case-insensitively.
func (p *parser) unmatched(f *File, defaultNode, unmatchedNode *yaml.Node) {
	if defaultNode != nil && unmatchedNode != nil {
		p.errf(unmatchedNode, "unmatched", "conflicts with default_policy (line %d): pick one", defaultNode.Line)
	}
	if defaultNode != nil && f.DefaultPolicy != "" {
		found := false
		for _, ps := range f.Policies {
			found = found || ps.Name == f.DefaultPolicy
		}
		if !found {
			p.errf(defaultNode, "default_policy", "unknown policy %q", f.DefaultPolicy)
		}
	}
	if !f.CaseInsensitivePaths {
		return
	}
	for _, rn := range p.routes {
		if patternHasUpper(rn.pattern) {
			p.errf(rn.node, rn.field, "route %q has upper case letters, but case_insensitive_paths matches lower-cased paths only", rn.pattern)
		}
	}
}

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
		p.fields(e, lp, []string{"name", "algorithm", "quantity", "window", "burst", "cost", "on_reject", "precision"}, func(k string, v *yaml.Node) {
			fp := join(lp, k)
			seen[k] = true
			switch k {
			case "name":
				l.Name = p.str(v, fp)
				if !validName(l.Name) {
					p.errf(v, fp, "limit names use letters, digits, '-' and '_'")
				}
			case "algorithm":
				switch p.str(v, fp) {
				case "sliding_window":
					l.Algorithm = counter.SlidingWindow
				case "fixed_window":
					l.Algorithm = counter.FixedWindow
				case "token_bucket":
					l.Algorithm = counter.TokenBucket
				default:
					p.errf(v, fp, "must be sliding_window, fixed_window or token_bucket; got %q", v.Value)
				}
			case "quantity":
				l.Quantity = p.int(v, fp, 1)
			case "window":
				l.Window = p.dur(v, fp)
			case "burst":
				l.Burst = p.int(v, fp, 0)
			case "cost":
				ls.Cost = p.int(v, fp, 1)
			case "on_reject":
				switch p.str(v, fp) {
				case "count":
					l.OnReject = counter.Count
				case "refund":
					l.OnReject = counter.Refund
				default:
					p.errf(v, fp, "must be count or refund; got %q", v.Value)
				}
			case "precision":
				l.Precision = int(p.int(v, fp, 0))
			}
		})
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
	p.fields(n, path, []string{"name", "routes", "identity", "tier", "default_tier", "overrides", "fail_mode", "lease"}, func(k string, v *yaml.Node) {
		fp := join(path, k)
		switch k {
		case "name":
			ps.Name = p.str(v, fp)
			if !validName(ps.Name) {
				p.errf(v, fp, "policy names use letters, digits, '-' and '_'")
			}
		case "routes":
			p.list(v, fp, func(i int, e *yaml.Node) {
				rp := fmt.Sprintf("%s[%d]", fp, i)
				r := p.str(e, rp)
				if err := p.addPattern(r); err != nil {
					p.errf(e, rp, "%v", err)
					return
				}
				ps.Routes = append(ps.Routes, r)
				p.routes = append(p.routes, routeNode{e, rp, r})
			})
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
			if v.Kind != yaml.MappingNode {
				p.errf(v, fp, "must be a mapping of tier name to limits")
				return
			}
			ps.Overrides = map[string][]LimitSpec{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				tk, tv := v.Content[i], v.Content[i+1]
				if _, ok := f.Tiers[tk.Value]; !ok {
					p.errf(tk, join(fp, tk.Value), "unknown tier %q", tk.Value)
					continue
				}
				ps.Overrides[tk.Value] = p.limits(tv, join(fp, tk.Value))
			}
		case "fail_mode":
			switch p.str(v, fp) {
			case "open":
				ps.FailMode = FailOpen
			case "closed":
				ps.FailMode = FailClosed
			case "local":
				ps.FailMode = FailLocal
			default:
				p.errf(v, fp, "must be open, closed or local; got %q", v.Value)
			}
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
			if ls.Cost < 1 {
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

package policy

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poplimit/poplimit/proxy/yamlpos"
)

// Parse validates a policy document. name labels errors. Every problem
// found is reported (errors.Join of *ValidationError), each naming the file,
// line and field.
func Parse(name string, data []byte) (*File, error) {
	p := &parser{file: name}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, &ValidationError{File: name, Line: yamlpos.Line(data, err), Field: "(document)", Msg: yamlpos.Reason(err)}
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
			name := k.Value
			if name == "" {
				name = `""` // an empty or complex key ("?" in YAML)
			}
			p.errf(k, join(path, name), "unknown field (known: %s)", strings.Join(known, ", "))
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

// choice is one spelling of an enumerated field and its value.
type choice[T any] struct {
	name  string
	value T
}

// oneOf reads a string node that must be one of choices; otherwise it
// reports "must be <want>; got ..." and returns the zero T.
func oneOf[T any](p *parser, n *yaml.Node, path, want string, choices ...choice[T]) T {
	s := p.str(n, path)
	for _, c := range choices {
		if s == c.name {
			return c.value
		}
	}
	p.errf(n, path, "must be %s; got %q", want, n.Value)
	var zero T
	return zero
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
		"default_policy", "unmatched", "case_insensitive_paths", "max_forwarded_hops", "ip_prefix", "shadow_header", "shadow", "rejection_body"}, func(k string, v *yaml.Node) {
		switch k {
		case "default_policy":
			f.DefaultPolicy, defaultNode = p.str(v, k), v
		case "unmatched":
			if p.str(v, k) != "unlimited" {
				p.errf(v, k, "must be unlimited (or set default_policy instead); got %q", v.Value)
			}
			f.UnmatchedUnlimited, unmatchedNode = true, v
		case "keys":
			keysNode = v
		case "tiers":
			tiersNode = v
		case "policies":
			policiesNode = v
		default:
			p.setting(f, k, v)
		}
	})
	if tiersNode != nil {
		p.tiers(tiersNode, f)
	}
	if len(f.Tiers) == 0 {
		p.errf(n, "tiers", "at least one tier is required")
	}
	if keysNode != nil {
		p.keys(keysNode, f)
	}
	p.policies(n, policiesNode, f)
	p.unmatched(f, defaultNode, unmatchedNode)
	return f
}

// setting parses one of the file's request settings: the version, the
// header mode, where identities come from (forwarding, API key, user,
// prefixes) and the pre-filter.
func (p *parser) setting(f *File, k string, v *yaml.Node) {
	switch k {
	case "shadow_header":
		f.ShadowHeader = p.bool(v, k)
	case "rejection_body":
		f.RejectionBody = oneOf(p, v, k, "json or problem", choice[BodyFormat]{"json", BodyJSON}, choice[BodyFormat]{"problem", BodyProblem})
	case "shadow":
		f.Shadow = p.bool(v, k)
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
		f.Headers = oneOf(p, v, k, "one of both, seed, draft11, none",
			choice[HeaderMode]{"both", HeadersBoth}, choice[HeaderMode]{"seed", HeadersSeed},
			choice[HeaderMode]{"draft11", HeadersDraft11}, choice[HeaderMode]{"none", HeadersNone})
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
	}
}

// keys parses the API key records; their tiers must exist.
func (p *parser) keys(n *yaml.Node, f *File) {
	p.list(n, "keys", func(i int, e *yaml.Node) {
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

// policies parses the policy list; names are unique.
func (p *parser) policies(root, policiesNode *yaml.Node, f *File) {
	if policiesNode == nil {
		p.errf(root, "policies", "at least one policy is required")
		return
	}
	names := map[string]bool{}
	p.list(policiesNode, "policies", func(i int, e *yaml.Node) {
		ps := p.policy(e, fmt.Sprintf("policies[%d]", i), f)
		ps.Shadow = ps.Shadow || f.Shadow // the file's dry run is every policy's
		if ps.Name != "" && names[ps.Name] {
			p.errf(e, fmt.Sprintf("policies[%d].name", i), "duplicate policy name %q", ps.Name)
		}
		names[ps.Name] = true
		f.Policies = append(f.Policies, ps)
	})
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

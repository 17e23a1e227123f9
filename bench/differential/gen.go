// Package differential replays randomized Envoy rate limit scripts in
// lockstep against cmd/rls and its peer envoyproxy/ratelimit and reports
// every answer that differs: generated from a seed (configs in the peer's
// descriptor YAML, request scripts), compared field by field, each
// difference classified as deliberate (with its reason, listed in deliberates),
// skipped (a window boundary between the two answers) or unexpected.
package differential

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/poplimit/poplimit/pop/rls"
)

// The generated name spaces are small so that keys repeat and limits are
// reached: keys, the values a config names, the values requests send.
var (
	genKeys      = []string{"k0", "k1", "k2"}
	genValues    = []string{"a", "b", "c"}
	genWildcards = []string{"a*", "b*"}
	genReqValues = []string{"a", "b", "c", "ab", "ax", "bx", "d"}
	genUnits     = []string{"second", "minute", "hour", "day"}
	genEntryKeys = []string{"k0", "k1", "k2", "kx"} // kx: in no config
)

// A config is at most genMaxDepth levels deep, a descriptor at most
// genMaxEntries entries long.
const (
	genMaxDepth   = 3
	genMaxEntries = 4
)

// Node is one descriptor of a generated config.
type node struct {
	Key   string
	Value string // "": a key-only default; a trailing "*": a wildcard
	// Limit is the node's rate_limit, nil for none.
	Limit    *limit
	Shadow   bool
	Children []*node
}

// Limit is a generated rate_limit.
type limit struct {
	Unlimited bool
	Unit      string // "" when Unlimited
	RPU       uint32
	Name      string
	Replaces  []string
}

// Domain is one generated config file.
type domain struct {
	Name  string
	Nodes []*node
}

// Replay is one generated test: the config (its domains carry the run
// token, so no two replays share a count) and the requests, sent in order.
type replay struct {
	Seed     uint64
	Run      string
	Domains  []domain
	Requests []*rlv3.RateLimitRequest
}

// Generate is the replay of seed with n requests, its domains and keys
// named with run.
func generate(seed uint64, run string, n int) *replay {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	rp := &replay{Seed: seed, Run: run}
	for i := range 2 + r.IntN(2) {
		d := domain{Name: fmt.Sprintf("d%d_%s", i, run)}
		d.Nodes = genNodes(r, 0)
		genReplaces(r, d.Nodes)
		rp.Domains = append(rp.Domains, d)
	}
	for range n {
		rp.Requests = append(rp.Requests, rp.genRequest(r))
	}
	return rp
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// genNodes is one level of siblings at depth (0: the domain's top).
func genNodes(r *rand.Rand, depth int) []*node {
	n := 1 + r.IntN(3)
	if depth == 0 {
		n++
	}
	seen := map[string]bool{}
	var out []*node
	for range n {
		nd := &node{Key: pick(r, genKeys)}
		switch x := r.Float64(); {
		case x < 0.3:
		case x < 0.75:
			nd.Value = pick(r, genValues)
		default:
			nd.Value = pick(r, genWildcards)
		}
		if seen[nd.Key+"_"+nd.Value] { // the peer refuses a duplicate composite key
			continue
		}
		seen[nd.Key+"_"+nd.Value] = true
		if depth+1 < genMaxDepth && r.Float64() < 0.45 {
			nd.Children = genNodes(r, depth+1)
		}
		// A leaf nearly always limits; an inner node half the time.
		pLimit := 0.9
		if len(nd.Children) > 0 {
			pLimit = 0.5
		}
		if r.Float64() < pLimit {
			nd.Limit = genLimit(r)
			nd.Shadow = r.Float64() < 0.15
		}
		out = append(out, nd)
	}
	return out
}

func genLimit(r *rand.Rand) *limit {
	l := &limit{}
	if r.Float64() < 0.12 {
		l.Unlimited = true // the peer refuses a unit beside unlimited
	} else {
		l.Unit, l.RPU = pick(r, genUnits), uint32(1+r.IntN(10))
	}
	if r.Float64() < 0.35 {
		l.Name = fmt.Sprintf("n%d", r.IntN(4))
	}
	return l
}

// genReplaces gives some limits a replaces list naming other limits'
// names (never their own: the peer refuses it).
func genReplaces(r *rand.Rand, nodes []*node) {
	var names []string
	var limits []*limit
	var walk func([]*node)
	walk = func(ns []*node) {
		for _, n := range ns {
			if n.Limit != nil {
				limits = append(limits, n.Limit)
				if n.Limit.Name != "" && !slices.Contains(names, n.Limit.Name) {
					names = append(names, n.Limit.Name)
				}
			}
			walk(n.Children)
		}
	}
	walk(nodes)
	for _, l := range limits {
		if len(names) == 0 || r.Float64() >= 0.2 {
			continue
		}
		for range 1 + r.IntN(2) {
			if n := pick(r, names); n != l.Name && !slices.Contains(l.Replaces, n) {
				l.Replaces = append(l.Replaces, n)
			}
		}
	}
}

// genRequest is one request: usually 1–4 descriptors of a known domain,
// sometimes an unknown domain or key, a repeated descriptor, hits_addend
// on the request and on descriptors; rarely an empty domain or descriptor
// list (malformed).
func (rp *replay) genRequest(r *rand.Rand) *rlv3.RateLimitRequest {
	req := &rlv3.RateLimitRequest{}
	d := pick(r, rp.Domains)
	switch x := r.Float64(); {
	case x < 0.01:
		req.Domain = ""
	case x < 0.1:
		req.Domain = "unknown_" + rp.Run
	default:
		req.Domain = d.Name
	}
	if r.Float64() < 0.5 {
		req.HitsAddend = uint32(1 + r.IntN(5))
	}
	n := 1 + r.IntN(4)
	if r.Float64() < 0.01 {
		n = 0
	}
	for i := range n {
		desc := &rlcommon.RateLimitDescriptor{}
		if i > 0 && r.Float64() < 0.15 {
			prev := req.Descriptors[r.IntN(i)]
			for _, e := range prev.Entries {
				desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
			}
		} else {
			desc.Entries = genEntries(r, d.Nodes)
		}
		if r.Float64() < 0.3 {
			desc.HitsAddend = wrapperspb.UInt64(uint64(r.IntN(6)))
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	return req
}

// genEntries walks the config tree from nodes, mostly along configured
// keys and values (or values a wildcard matches), sometimes off it.
func genEntries(r *rand.Rand, nodes []*node) []*rlcommon.RateLimitDescriptor_Entry {
	var out []*rlcommon.RateLimitDescriptor_Entry
	for len(out) < genMaxEntries {
		if len(nodes) == 0 || r.Float64() < 0.08 {
			out = append(out, &rlcommon.RateLimitDescriptor_Entry{Key: pick(r, genEntryKeys), Value: pick(r, genReqValues)})
			if r.Float64() < 0.7 {
				break
			}
			continue
		}
		n := pick(r, nodes)
		v := pick(r, genReqValues)
		switch {
		case n.Value == "":
		case strings.HasSuffix(n.Value, "*"):
			if r.Float64() < 0.8 {
				v = strings.TrimSuffix(n.Value, "*") + pick(r, []string{"", "b", "x"})
			}
		default:
			if r.Float64() < 0.8 {
				v = n.Value
			}
		}
		out = append(out, &rlcommon.RateLimitDescriptor_Entry{Key: n.Key, Value: v})
		if len(n.Children) == 0 || r.Float64() < 0.3 {
			break
		}
		nodes = n.Children
	}
	return out
}

// Files are the replay's config files in envoyproxy/ratelimit's
// descriptor YAML, by file name.
func (rp *replay) files() map[string]string {
	out := map[string]string{}
	for i, d := range rp.Domains {
		var b strings.Builder
		fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", d.Name)
		writeNodes(&b, d.Nodes, "")
		out[fmt.Sprintf("diff_%s_%d.yaml", rp.Run, i)] = b.String()
	}
	return out
}

func writeNodes(b *strings.Builder, nodes []*node, indent string) {
	for _, n := range nodes {
		fmt.Fprintf(b, "%s- key: %s\n", indent, n.Key)
		in := indent + "  "
		if n.Value != "" {
			fmt.Fprintf(b, "%svalue: %q\n", in, n.Value)
		}
		if l := n.Limit; l != nil {
			fmt.Fprintf(b, "%srate_limit:\n", in)
			if l.Unlimited {
				fmt.Fprintf(b, "%s  unlimited: true\n", in)
			} else {
				fmt.Fprintf(b, "%s  unit: %s\n%s  requests_per_unit: %d\n", in, l.Unit, in, l.RPU)
			}
			if l.Name != "" {
				fmt.Fprintf(b, "%s  name: %s\n", in, l.Name)
			}
			if len(l.Replaces) > 0 {
				fmt.Fprintf(b, "%s  replaces:\n", in)
				for _, name := range l.Replaces {
					fmt.Fprintf(b, "%s    - name: %s\n", in, name)
				}
			}
		}
		if n.Shadow {
			fmt.Fprintf(b, "%sshadow_mode: true\n", in)
		}
		if len(n.Children) > 0 {
			fmt.Fprintf(b, "%sdescriptors:\n", in)
			writeNodes(b, n.Children, in)
		}
	}
}

// Units are the window lengths the replay's config uses.
func (rp *replay) units() []time.Duration {
	var out []time.Duration
	var walk func([]*node)
	walk = func(ns []*node) {
		for _, n := range ns {
			if n.Limit != nil && !n.Limit.Unlimited {
				u := rls.Unit(rlv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(n.Limit.Unit)]).Duration()
				if !slices.Contains(out, u) {
					out = append(out, u)
				}
			}
			walk(n.Children)
		}
	}
	for _, d := range rp.Domains {
		walk(d.Nodes)
	}
	slices.Sort(out)
	return out
}

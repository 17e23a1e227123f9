package pop

// The limit fields of issue 14 beside the rate algorithms: dry run
// (shadow), mitigation timeout, concurrency limits and counting by
// response (count_if, cost_header).

import (
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Concurrency limit defaults.
const (
	// DefaultMaxRequestTime is a concurrency limit's max_request_time: the
	// edge's --upstream-timeout default.
	DefaultMaxRequestTime = time.Minute
	// DefaultConcurrencyRetryAfter is a concurrency limit's retry_after.
	DefaultConcurrencyRetryAfter = time.Second
	// maxCostCeiling bounds cost_header.max.
	maxCostCeiling = 1 << 30
)

// ConcurrencySpec configures a concurrency limit.
type ConcurrencySpec struct {
	// MaxRequestTime (`max_request_time:`, default DefaultMaxRequestTime)
	// is the longest a request is counted in flight: a slot whose release
	// never comes (a crashed worker) stops counting at most 1.25 times this
	// after its request was admitted (concurrency.go). Set it at or above
	// the upstream timeout.
	MaxRequestTime time.Duration
	// RetryAfter (`retry_after:`, default DefaultConcurrencyRetryAfter) is
	// the Retry-After of a rejection.
	RetryAfter time.Duration
}

// StatusRange is an inclusive range of HTTP statuses (Lo == Hi for one).
type StatusRange struct{ Lo, Hi int }

// ResponseCount says how a limit counts a request after its response:
// only when the status matches Statuses (all when empty), Cost units, or
// the value of the CostHeader response header when set (bounded).
type ResponseCount struct {
	Statuses []StatusRange
	// CostHeader is the canonical name of the response header holding the
	// cost (`cost_header: {name: X-Cost}`); "" charges LimitSpec.Cost.
	CostHeader string
	// MaxCost caps a header's cost (`max:`, default the limit's
	// allowance); a larger value is charged MaxCost and counted in
	// poplimit_response_cost_invalid_total{reason="too_large"}.
	MaxCost int64
	// DefaultCost (`default:`, default 1) is charged when the header is
	// missing, negative or not an integer (also counted in that metric).
	DefaultCost int64
}

// Set reports whether the limit counts by response.
func (rc ResponseCount) Set() bool { return len(rc.Statuses) > 0 || rc.CostHeader != "" }

// Matches reports whether status is counted.
func (rc ResponseCount) Matches(status int) bool {
	if len(rc.Statuses) == 0 {
		return true
	}
	for _, r := range rc.Statuses {
		if status >= r.Lo && status <= r.Hi {
			return true
		}
	}
	return false
}

// limitExtra parses the issue-14 fields of a limit; false when k is not
// one of them.
func (p *parser) limitExtra(k string, v *yaml.Node, fp string, ls *LimitSpec) bool {
	switch k {
	case "algorithm":
		if v.Kind != yaml.ScalarNode || v.Value != "concurrency" {
			return false // a rate algorithm: parse_policy.go
		}
	case "shadow":
		ls.Shadow = p.bool(v, fp)
	case "mitigation_timeout":
		ls.MitigationTimeout = p.dur(v, fp)
	case "max_request_time":
		ls.Concurrency.MaxRequestTime = p.dur(v, fp)
	case "retry_after":
		ls.Concurrency.RetryAfter = p.dur(v, fp)
	case "count_if":
		p.fields(v, fp, []string{"status"}, func(_ string, v2 *yaml.Node) {
			ls.Response.Statuses = p.statuses(v2, join(fp, "status"))
		})
		if len(ls.Response.Statuses) == 0 && v.Kind == yaml.MappingNode {
			p.errf(v, join(fp, "status"), "required: a list of statuses (401) or ranges (\"400-499\")")
		}
	case "cost_header":
		p.fields(v, fp, []string{"name", "max", "default"}, func(k2 string, v2 *yaml.Node) {
			switch k2 {
			case "name":
				name := p.str(v2, join(fp, k2))
				if name == "" || strings.ContainsAny(name, " :\t\r\n") {
					p.errf(v2, join(fp, k2), "must be a header name, got %q", name)
				}
				ls.Response.CostHeader = textproto.CanonicalMIMEHeaderKey(name)
			case "max":
				ls.Response.MaxCost = p.int(v2, join(fp, k2), 1)
				if ls.Response.MaxCost > maxCostCeiling {
					p.errf(v2, join(fp, k2), "must be ≤ %d, got %d", maxCostCeiling, ls.Response.MaxCost)
				}
			case "default":
				ls.Response.DefaultCost = p.int(v2, join(fp, k2), 0)
				if ls.Response.DefaultCost > maxCostCeiling {
					p.errf(v2, join(fp, k2), "must be ≤ %d, got %d", maxCostCeiling, ls.Response.DefaultCost)
				}
			}
		})
		if ls.Response.CostHeader == "" && v.Kind == yaml.MappingNode {
			p.errf(v, join(fp, "name"), "required")
		}
		if ls.Response.DefaultCost == 0 && mappingValue(v, "default") == nil {
			ls.Response.DefaultCost = 1
		}
	default:
		return false
	}
	return true
}

// statuses parses a count_if status list: integers 100..599 or "lo-hi"
// ranges within it.
func (p *parser) statuses(n *yaml.Node, path string) []StatusRange {
	var out []StatusRange
	p.list(n, path, func(i int, e *yaml.Node) {
		ep := fmt.Sprintf("%s[%d]", path, i)
		s := p.str(e, ep)
		lo, hi, isRange := strings.Cut(s, "-")
		a, errA := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		var errB error
		if isRange {
			b, errB = strconv.Atoi(strings.TrimSpace(hi))
		}
		switch {
		case s == "":
		case errA != nil || errB != nil:
			p.errf(e, ep, "must be a status (401) or a range (\"400-499\"), got %q", s)
		case a < 100 || b > 599:
			p.errf(e, ep, "impossible HTTP status %q: statuses are 100 to 599", s)
		case a > b:
			p.errf(e, ep, "empty status range %q", s)
		default:
			out = append(out, StatusRange{a, b})
		}
	})
	return out
}

// mappingValue is the value of key in mapping n, nil if absent.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// checkLimitExtra checks the issue-14 fields of limit node e once it is
// parsed. It reports true for a concurrency limit (checked here whole:
// the rate checks do not apply).
func (p *parser) checkLimitExtra(e *yaml.Node, lp string, ls *LimitSpec, seen map[string]bool) bool {
	alg := mappingValue(e, "algorithm")
	conc := alg != nil && alg.Kind == yaml.ScalarNode && alg.Value == "concurrency"
	if !conc {
		for _, k := range []string{"max_request_time", "retry_after"} {
			if seen[k] {
				p.errf(mappingValue(e, k), join(lp, k), "only a concurrency limit (algorithm: concurrency) has %s", k)
			}
		}
		ls.Concurrency = ConcurrencySpec{}
		if rc := ls.Response; rc.CostHeader != "" && rc.MaxCost == 0 {
			ls.Response.MaxCost = max(1, allowanceOf(ls.Limit))
		}
		if rc := ls.Response; rc.CostHeader != "" && rc.DefaultCost > rc.MaxCost {
			p.errf(mappingValue(e, "cost_header"), join(lp, "cost_header.default"), "default %d exceeds max %d", rc.DefaultCost, rc.MaxCost)
		}
		return false
	}
	for _, k := range []string{"window", "burst", "on_reject", "precision", "cost", "count_if", "cost_header"} {
		if seen[k] {
			p.errf(mappingValue(e, k), join(lp, k), "a concurrency limit has no %s (it counts requests in flight)", k)
		}
	}
	// quantity: p.int reported one below 1 (a concurrency limit of 0).
	if ls.Concurrency.MaxRequestTime == 0 {
		ls.Concurrency.MaxRequestTime = DefaultMaxRequestTime
	}
	if ls.Concurrency.RetryAfter == 0 {
		ls.Concurrency.RetryAfter = DefaultConcurrencyRetryAfter
	}
	ls.Limit.Window = ls.Concurrency.MaxRequestTime
	return true
}

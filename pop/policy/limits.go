package policy

// A tier's limits: the rate algorithms and windows, and beside them dry
// run (shadow), mitigation timeout, concurrency limits and counting by
// response (count_if, cost_header).

import (
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
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
			if p.limitExtra(k, v, fp, &ls) { // shadow, concurrency, count by response: limitExtra
				return
			}
			if p.calendarField(k, v, fp, &ls) { // calendar windows: calendar.go
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

// limitExtra parses the fields of a limit beside its rate algorithm and
// window; false when k is not one of them.
func (p *parser) limitExtra(k string, v *yaml.Node, fp string, ls *LimitSpec) bool {
	switch k {
	case "algorithm":
		if v.Kind != yaml.ScalarNode || v.Value != "concurrency" {
			return false // a rate algorithm: limits
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

// checkLimitExtra checks the fields limitExtra parsed of limit node e
// once it is parsed. It reports true for a concurrency limit (checked here whole:
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
			ls.Response.MaxCost = max(1, Allowance(ls.Limit))
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

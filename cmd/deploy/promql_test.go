package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promqlNumber   = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b`)
)

// promqlKeywords are PromQL's words that are not metric names.
var promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true, "by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promqlMetrics are the metric names a PromQL expression (with Grafana's
// $variables) selects: identifiers that are not functions, keywords,
// label names of matchers and groupings, strings or durations.
func promqlMetrics(expr string) []string {
	s := promqlString.ReplaceAllString(expr, `""`)
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRange.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\$\{?\w+\}?`).ReplaceAllString(s, " ")
	s = promqlNumber.ReplaceAllString(s, " ")
	var out []string
	for _, m := range promqlIdent.FindAllStringSubmatch(s, -1) {
		name := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(m[0]), "("))
		if m[1] != "" || promqlKeywords[strings.ToLower(name)] || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestPromqlMetrics(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (job, le) (rate(poplimit_store_latency_seconds_bucket{instance=~"$instance"}[$__rate_interval]))) > 0.05`: {"poplimit_store_latency_seconds_bucket"},
		`max by (pool) (1 - mcproxy_shard_live) > 0 and on (pool) mcproxy_pool_live_shards == 0`:                                                   {"mcproxy_shard_live", "mcproxy_pool_live_shards"},
		`sum(increase(poplimit_policy_reloads_total{result!="ok"}[15m])) > 0`:                                                                      {"poplimit_policy_reloads_total"},
	} {
		if got := promqlMetrics(expr); !slices.Equal(got, want) {
			t.Errorf("promqlMetrics(%q) = %q, want %q", expr, got, want)
		}
	}
}

// checkExported fails for every metric of exprs (by where) the binaries
// do not export.
func checkExported(t *testing.T, exprs map[string]string, allowed map[string]bool) {
	t.Helper()
	for where, expr := range exprs {
		names := promqlMetrics(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, n := range names {
			if !allowed[n] {
				t.Errorf("%s queries %s, which no binary exports (not in the live /metrics nor METRICS.md): %s", where, n, expr)
			}
		}
	}
}

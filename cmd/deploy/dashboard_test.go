package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

const dashboardFile = "grafana/poplimit.json"

var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_]\w*\s*\)$`)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title      string
	Templating struct {
		List []struct {
			Name, Type string
			Definition string
		}
	}
	Panels []struct {
		Title, Type string
		Targets     []struct{ Expr string }
	}
}

// TestDashboardQueriesExportedMetrics: the dashboard's every query (panel
// targets and template variables) parses as PromQL (promtool) and names
// only metrics the binaries export, and it has the panels the operator
// needs.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	exprs := map[string]string{}
	promql := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %d", p.Title, i)
			exprs[where] = tg.Expr
			// Grafana's variables, as Grafana substitutes them.
			promql[where] = strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*", "$proxy", ".*").Replace(tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			// label_values(metric, label): the metric is what must exist.
			m := labelValues.FindStringSubmatch(v.Definition)
			if m == nil {
				t.Errorf("variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
				continue
			}
			exprs["variable "+v.Name] = m[1]
		}
	}
	for _, want := range []string{"Decisions by outcome", "Decisions by policy", "Rejections by policy", "Fallback and local-budget decisions",
		"Store latency quantiles", "Breaker state and store errors", "Requests per shard", "Ejections and live shards"} {
		if !hasPanel(d, want) {
			t.Errorf("no panel %q", want)
		}
	}
	checkExported(t, exprs, exported(t))
	promtoolCheckExprs(t, promql)
}

func hasPanel(d dashboard, title string) bool {
	for _, p := range d.Panels {
		if p.Title == title && len(p.Targets) > 0 {
			return true
		}
	}
	return false
}

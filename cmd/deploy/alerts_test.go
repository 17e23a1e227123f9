package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/poplimit/poplimit/bench/fixture"
)

const alertsFile = "prometheus/alerts.yml"

// TestAlertRules: promtool check rules accepts alerts.yml and promtool test
// rules passes its unit tests (each alert fires on the series that should
// page and not on healthy ones).
func TestAlertRules(t *testing.T) {
	promtool := fixture.LookPath(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertsQueryExportedMetrics: every metric an alert rule queries is one
// the binaries export.
func TestAlertsQueryExportedMetrics(t *testing.T) {
	exprs := alertExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("%d alert rules in %s, want at least 10", len(exprs), alertsFile)
	}
	allowed := exported(t)
	if !allowed["poplimit_decisions_total"] || !allowed["mcproxy_shard_live"] || allowed["poplimit_no_such_metric_total"] {
		t.Fatalf("exported metrics look wrong: %d names", len(allowed))
	}
	checkExported(t, exprs, allowed)
}

// alertExprs are the expressions of alerts.yml by alert name.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct{ Alert, Record, Expr string }
		}
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert+r.Record] = r.Expr
		}
	}
	return out
}

// promtoolCheckExprs runs promtool check rules on exprs as recording rules:
// it proves they parse as PromQL.
func promtoolCheckExprs(t *testing.T, exprs map[string]string) {
	t.Helper()
	promtool := fixture.LookPath(t, "promtool")
	var b strings.Builder
	b.WriteString("groups:\n  - name: exprs\n    rules:\n")
	i := 0
	for _, e := range exprs {
		i++
		q, _ := yaml.Marshal(e)
		fmt.Fprintf(&b, "      - record: check:expr_%d\n        expr: %s", i, q)
	}
	path := filepath.Join(t.TempDir(), "exprs.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the queries: %v\n%s\n%s", err, out, b.String())
	}
}

package deploy

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

var update = flag.Bool("update", false, "rewrite METRICS.md from the reference run instead of checking it")

// binaries are the binaries whose /metrics the reference lists, in order,
// with the listener that serves it.
var binaries = []struct{ name, admin string }{
	{"edge", "`--admin`, default `127.0.0.1:7481`"},
	{"mcproxy", "`--admin`, default `127.0.0.1:7412`"},
	{"rls", "`--http`, default `127.0.0.1:7490`"},
}

// row is one metric of the reference.
type row struct {
	binary, name, typ, labels, help string
}

const metricsDoc = "METRICS.md"

// TestMetricsReference: METRICS.md is what the reference run's /metrics
// and the source's metric declarations make of it (run with -update to
// rewrite it). A metric declared in the source but not exported in the
// reference run keeps the type and labels an earlier run saw, else it is
// listed with its help text from the source and "not seen" for the rest.
func TestMetricsReference(t *testing.T) {
	fams := liveMetrics(t)
	declared := declaredMetrics(t)
	old, err := os.ReadFile(metricsDoc)
	if err != nil && !*update {
		t.Fatal(err)
	}
	oldRows := parseRows(string(old))
	rows := referenceRows(fams, declared, oldRows)
	got := renderMetrics(rows, fams)
	if *update {
		if err := os.WriteFile(metricsDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	// A metric the reference lists as not seen may show up in this run (a
	// lease or a slow store on a loaded host): not drift.
	if lenient := renderMetrics(keepNotSeen(rows, oldRows), fams); !bytes.Equal(lenient, got) && bytes.Equal(lenient, old) {
		t.Logf("%s lists metrics as not seen that this run exported; -update would record their labels", metricsDoc)
		return
	}
	if !bytes.Equal(got, old) {
		t.Errorf("%s is out of date: regenerate it with\n\tgo test ./cmd/deploy -run TestMetricsReference -update\n(see /work/notes/metrics-doc.txt or the file's header); diff:\n%s", metricsDoc, lineDiff(string(old), string(got)))
	}
}

// keepNotSeen is rows with the "not seen" rows of old in place of the
// live rows of the same metric.
func keepNotSeen(rows, old []row) []row {
	out := slices.Clone(rows)
	for i, r := range out {
		for _, o := range old {
			if o.binary == r.binary && o.name == r.name && o.typ == "not seen" {
				out[i] = o
			}
		}
	}
	return out
}

// runtimeFamily reports the client_golang Go and process collectors' families.
func runtimeFamily(name string) bool {
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_")
}

// referenceRows merges the live families, the declared names and the rows
// of the previous reference (for declared metrics not seen this time).
func referenceRows(fams map[string]Families, declared map[string]string, old []row) []row {
	var rows []row
	liveNames := map[string]bool{}
	for _, b := range binaries {
		for name, f := range fams[b.name] {
			if runtimeFamily(name) {
				continue
			}
			liveNames[name] = true
			labels := "—"
			if ls := labelNames(f); len(ls) > 0 {
				labels = "`" + strings.Join(ls, "`, `") + "`"
			}
			rows = append(rows, row{b.name, name, strings.ToLower(f.GetType().String()), labels, f.GetHelp()})
		}
	}
	for name, help := range declared {
		if liveNames[name] {
			continue
		}
		kept := false
		for _, r := range old {
			if r.name == name && r.typ != "not seen" {
				rows, kept = append(rows, r), true
			}
		}
		if !kept {
			rows = append(rows, row{guessBinary(name), name, "not seen", "not seen", help})
		}
	}
	order := map[string]int{}
	for i, b := range binaries {
		order[b.name] = i
	}
	slices.SortFunc(rows, func(a, b row) int {
		if d := order[a.binary] - order[b.binary]; d != 0 {
			return d
		}
		return strings.Compare(a.name, b.name)
	})
	return rows
}

// guessBinary is the binary a declared metric that was never seen belongs
// to, by its prefix.
func guessBinary(name string) string {
	if strings.HasPrefix(name, "mcproxy_") {
		return "mcproxy"
	}
	if strings.HasPrefix(name, "poplimit_rls_") || strings.HasPrefix(name, "ratelimit_") {
		return "rls"
	}
	return "edge"
}

// renderMetrics is METRICS.md for rows and the runtime families of fams.
func renderMetrics(rows []row, fams map[string]Families) []byte {
	var b bytes.Buffer
	b.WriteString(`# Metrics reference

Every metric each binary exports on its admin listener's ` + "`/metrics`" + `, its
labels and meaning. **Generated**, do not edit: the list is what the
binaries' live ` + "`/metrics`" + ` showed in the reference run of
` + "`cmd/deploy`" + `'s tests (a PoP of real processes driven through traffic,
rejections, reloads, a shard ejection and a store outage), plus the metrics
the source declares that the run did not reach ("not seen": a counter that
has never been incremented has no samples yet). ` + "`make test`" + ` fails when
this file and the binaries disagree. Regenerate it with

    go test ./cmd/deploy -run TestMetricsReference -update

The Grafana dashboard (` + "`grafana/poplimit.json`" + `) and the alert rules
(` + "`prometheus/alerts.yml`" + `) are checked against the same run: they query
only metrics listed here.
`)
	for _, bin := range binaries {
		fmt.Fprintf(&b, "\n## %s\n\n/metrics on %s.\n\n", bin.name, bin.admin)
		b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
		for _, r := range rows {
			if r.binary == bin.name {
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.name, r.typ, r.labels, strings.ReplaceAll(r.help, "|", `\|`))
			}
		}
		var rt []string
		for name := range fams[bin.name] {
			if runtimeFamily(name) {
				rt = append(rt, "`"+name+"`")
			}
		}
		slices.Sort(rt)
		if len(rt) > 0 {
			b.WriteString("\nAlso the Go runtime and process collectors of client_golang (meanings in their\nHELP text):")
			width := 80
			for i, name := range rt {
				sep := ","
				if i == len(rt)-1 {
					sep = "."
				}
				if width+1+len(name)+1 > 78 {
					b.WriteString("\n")
					width = 0
				} else {
					b.WriteString(" ")
					width++
				}
				b.WriteString(name + sep)
				width += len(name) + 1
			}
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

// rowLine matches one metric row of METRICS.md.
var rowLine = regexp.MustCompile("^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\| ([^|]+) \\| ([^|]+) \\| (.*) \\|$")

// parseRows reads the metric rows of a METRICS.md (under "## binary").
func parseRows(doc string) []row {
	var rows []row
	binary := ""
	for _, line := range strings.Split(doc, "\n") {
		if name, ok := strings.CutPrefix(line, "## "); ok {
			binary = name
			continue
		}
		if m := rowLine.FindStringSubmatch(line); m != nil {
			rows = append(rows, row{binary, m[1], m[2], m[3], strings.ReplaceAll(m[4], `\|`, "|")})
		}
	}
	return rows
}

// declaration matches a metric's name and help in the source: the
// Name/Help fields of client_golang's Opts, or NewDesc's arguments.
var declaration = regexp.MustCompile(`(?:Name:\s*"|NewDesc\(\s*")((?:poplimit|mcproxy|ratelimit)_[a-z0-9_]+)",\s*(?:Help:\s*)?"((?:[^"\\]|\\.)*)"`)

// declaredMetrics are the metrics the module's non-test Go files declare,
// name to help text.
func declaredMetrics(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := moduleRoot(t)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range declaration.FindAllSubmatch(src, -1) {
			out[string(m[1])] = strings.ReplaceAll(string(m[2]), `\"`, `"`)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// exported is every metric name the binaries export: the live families,
// their histogram and summary series (_bucket, _sum, _count), and the
// reference's rows.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, fams := range liveMetrics(t) {
		for name, f := range fams {
			out[name] = true
			if f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY {
				out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
			}
		}
	}
	doc, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range parseRows(string(doc)) {
		out[r.name] = true
		if r.typ == "histogram" || r.typ == "summary" {
			out[r.name+"_bucket"], out[r.name+"_sum"], out[r.name+"_count"] = true, true, true
		}
	}
	return out
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture"
)

func TestCommandsRegistered(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands() {
		if seen[c.Name] {
			t.Fatalf("duplicate command %s", c.Name)
		}
		seen[c.Name] = true
		if c.Usage == "" || c.Action == nil {
			t.Errorf("%s lacks usage or action", c.Name)
		}
	}
	for _, want := range []string{"demo", "load", "accuracy", "faults", "pops", "central", "memory", "proxy"} {
		if !seen[want] {
			t.Errorf("command %s missing", want)
		}
	}
}

// TestAccuracyCLI runs `popbench accuracy` over the in-memory store (no
// processes) and reads back the JSON it writes.
func TestAccuracyCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mcproxy")
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	app := &cli.App{Name: "popbench", Commands: commands(), Writer: &stdout, ErrWriter: &stderr}
	args := []string{"popbench", "accuracy", "--no-pop", "--quiet", "--json", "--trace", "near",
		"--precision", "1,4", "--sources", "5", "--duration", "3m", "--out", out}
	if err := app.Run(args); err != nil {
		t.Fatal(err)
	}
	// --json prints the report on the app's writer (not the process's
	// stdout) and --quiet leaves the error writer empty.
	var printed struct{ Rows []json.RawMessage }
	if err := json.Unmarshal(stdout.Bytes(), &printed); err != nil || len(printed.Rows) != 2 {
		t.Fatalf("app writer holds %d rows (%v): %q", len(printed.Rows), err, stdout.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("--quiet wrote %q to the app's error writer", stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "accuracy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Rows []struct {
			Precision int     `json:"precision"`
			Requests  int     `json:"requests"`
			Agreement float64 `json:"agreement_pct"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[1].Precision != 4 || rep.Rows[0].Requests == 0 || rep.Rows[0].Agreement != 100 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	for _, f := range []string{"accuracy.md", "accuracy-precision.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if err := app.Run([]string{"popbench", "accuracy", "--precision", "x"}); err == nil {
		t.Error("bad --precision accepted")
	}
}

// runJSON runs popbench with args (its output discarded) and decodes
// out/<name>.json into v.
func runJSON(t *testing.T, name string, v any, args ...string) {
	t.Helper()
	out := t.TempDir()
	app := &cli.App{Name: "popbench", Commands: commands(), Writer: io.Discard, ErrWriter: io.Discard}
	if err := app.Run(append(append([]string{"popbench"}, args...), "--quiet", "--json", "--out", out)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// TestAccuracyTraceFile replays a trace file given by path; its own
// sources and duration are used.
func TestAccuracyTraceFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mcproxy")
	}
	path := filepath.Join(t.TempDir(), "tiny.json")
	tiny := `{"name":"bursts","seed":7,"sources":3,"quantity":10,"window_ms":10000,"duration_ms":60000,"burst_share":0.5,"burst_tail":0.1}`
	if err := os.WriteFile(path, []byte(tiny), 0o644); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Traces []struct {
			Seed     uint64 `json:"seed"`
			WindowMs int64  `json:"window_ms"`
		} `json:"traces"`
		Rows []struct {
			Trace   string `json:"trace"`
			Sources int    `json:"sources"`
		} `json:"rows"`
	}
	runJSON(t, "accuracy", &rep, "accuracy", "--no-pop", "--trace", path)
	if len(rep.Rows) != 1 || rep.Rows[0].Trace != "bursts" || rep.Rows[0].Sources != 3 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	if len(rep.Traces) != 1 || rep.Traces[0].Seed != 7 || rep.Traces[0].WindowMs != 10000 {
		t.Fatalf("traces %+v", rep.Traces)
	}
	app := &cli.App{Name: "popbench", Commands: commands()}
	if err := app.Run([]string{"popbench", "accuracy", "--no-pop", "--trace", "nope"}); err == nil {
		t.Error("unknown trace accepted")
	}
}

// TestMemoryCLI writes a few limiters through a PoP of real memcached: a
// two-counter sliding window is two items in the 96-byte class.
func TestMemoryCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("launches a PoP")
	}
	fixture.RequireMemcached(t)
	var rep struct {
		Rows []struct {
			Algorithm       string  `json:"algorithm"`
			Precision       int     `json:"precision"`
			Limiters        int     `json:"limiters"`
			ItemsPerLimiter float64 `json:"items_per_limiter"`
			SlabPerLimiter  float64 `json:"slab_bytes_per_limiter"`
		} `json:"rows"`
	}
	runJSON(t, "memory", &rep, "memory", "--store", "memcached", "--limiters", "300", "--algorithm", "sliding", "--precision", "1")
	if len(rep.Rows) != 1 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	r := rep.Rows[0]
	if r.Algorithm != "sliding" || r.Precision != 1 || r.Limiters != 300 || r.ItemsPerLimiter != 2 || r.SlabPerLimiter <= 0 || r.SlabPerLimiter > 192 {
		t.Fatalf("%+v: want 2 items and at most 192 slab bytes per limiter", r)
	}
}

func TestTablesReportNamesCommandAndLinksCharts(t *testing.T) {
	tab := &bench.Table{Header: []string{"a"}}
	tab.Add(1)
	tr2 := filepath.Join(t.TempDir(), "tables.md")
	if err := writeTablesReport(tr2, "x", "popbench x", []*bench.Table{tab}, []string{"precision.png"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(tr2); !strings.Contains(string(b), "`popbench x`") || !strings.Contains(string(b), "![precision.png](precision.png)") {
		t.Errorf("tables report:\n%s", b)
	}
}

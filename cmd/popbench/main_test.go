package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/urfave/cli/v2"
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
	app := &cli.App{Name: "popbench", Commands: commands()}
	args := []string{"popbench", "accuracy", "--no-pop", "--quiet", "--json", "--trace", "near",
		"--precision", "1,4", "--sources", "5", "--duration", "3m", "--out", out}
	stdout := os.Stdout
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	os.Stdout = devnull
	err := app.Run(args)
	os.Stdout = stdout
	if err != nil {
		t.Fatal(err)
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

package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestDemoLogHasNoCarriageReturns: `make demo > demo.log 2>&1` (popbench
// demo with its output in a file, not a terminal) writes whole lines only:
// progress as plain lines, no progress bar redrawn with carriage returns.
// The demo runs 3 s of traffic instead of 20.
func TestDemoLogHasNoCarriageReturns(t *testing.T) {
	fixture.RequireMemcached(t)
	bin := fixture.Binary(t, "popbench")
	log, err := os.Create(filepath.Join(t.TempDir(), "demo.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(bin, "demo", "--duration", "3s", "--out", t.TempDir())
	cmd.Dir = moduleRoot(t) // popbench builds mcproxy and edge from the module
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("popbench demo: %v\n%s", err, out)
	}
	out, err := os.ReadFile(log.Name())
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(out, []byte("\r")); n > 0 {
		t.Errorf("demo.log has %d carriage returns:\n%q", n, out)
	}
	for _, want := range []string{"traffic: ", "report with charts: "} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("demo.log lacks %q:\n%s", want, out)
		}
	}
}

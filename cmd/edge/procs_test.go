package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestEdgeProcs: by default an idle edge runs on one P (daemon.GovernProcs,
// as mcproxy: it raises the count when the load calls for it); --procs N,
// or GOMAXPROCS in the environment, fixes the count instead. Read from
// go_sched_gomaxprocs_threads on /metrics.
func TestEdgeProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to govern")
	}
	bin := fixture.Binary(t, "edge")
	policy := filepath.Join(t.TempDir(), "policy.yml")
	if err := os.WriteFile(policy, []byte(strings.Replace(reloadPolicy, "QUANTITY", "10", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	fixture.CheckProcs(t, func(t *testing.T, admin string, args []string) func() bool {
		p := fixture.Start(t, bin, append([]string{"--listen", fixture.FreeAddr(t), "--admin", admin,
			"--upstream", "http://127.0.0.1:1", "--policy", policy}, args...)...)
		return p.Exited
	})
}

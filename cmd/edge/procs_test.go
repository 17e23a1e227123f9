package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

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
	for _, tt := range []struct {
		name, env string
		args      []string
		want      string
	}{
		{"default", "", nil, "1"},
		{"flag", "", []string{"--procs", "2"}, "2"},
		{"env", "2", nil, "2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tt.env) // "" counts as unset, for the runtime too
			admin := fixture.FreeAddr(t)
			p := fixture.Start(t, bin, append([]string{"--listen", fixture.FreeAddr(t), "--admin", admin,
				"--upstream", "http://127.0.0.1:1", "--policy", policy}, tt.args...)...)
			deadline := time.Now().Add(10 * time.Second)
			for got := fixture.GOMAXPROCS(admin); got != tt.want; got = fixture.GOMAXPROCS(admin) {
				if p.Exited() || time.Now().After(deadline) {
					t.Fatalf("GOMAXPROCS %q, want %s (exited: %v)", got, tt.want, p.Exited())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

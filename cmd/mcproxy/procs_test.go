package main

import (
	"runtime"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestMcproxyProcs: by default the idle daemon runs on one P (the
// governor of daemon.GovernProcs starts there and an idle proxy gives it no
// reason to raise it); --procs N, or GOMAXPROCS in the environment, fixes
// the count instead. Read from go_sched_gomaxprocs_threads on /metrics.
func TestMcproxyProcs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to govern")
	}
	bin := buildMcproxy(t)
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
			p := startMcproxy(t, bin, "", append([]string{"--embedded", "1", "--admin", admin}, tt.args...)...)
			waitFor(t, "GOMAXPROCS "+tt.want, p, func() bool { return fixture.GOMAXPROCS(admin) == tt.want })
			p.stop(t)
		})
	}
}

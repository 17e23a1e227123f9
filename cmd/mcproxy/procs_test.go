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
	fixture.CheckProcs(t, func(t *testing.T, admin string, args []string) func() bool {
		p := startMcproxy(t, bin, "", append([]string{"--embedded", "1", "--admin", admin}, args...)...)
		t.Cleanup(func() { p.stop(t) })
		return func() bool {
			select {
			case err := <-p.done:
				p.done <- err
				return true
			default:
				return false
			}
		}
	})
}

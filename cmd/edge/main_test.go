package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// TestStartupErrorExits runs the built binary with a startup error and
// --events: it must exit (with an error) instead of waiting for the event
// writer forever.
func TestStartupErrorExits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := fixture.Binary(t, "edge")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"missing policy, events to stderr", []string{"--policy", "/nonexistent", "--events", "-"}},
		{"missing policy, events to file", []string{"--policy", "/nonexistent", "--events", filepath.Join(t.TempDir(), "ev.jsonl")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"--upstream", "http://127.0.0.1:1"}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("edge %v did not exit within 10s (hang)\n%s", tc.args, out)
			}
			if err == nil {
				t.Fatalf("edge %v exited 0, want an error\n%s", tc.args, out)
			}
		})
	}
}

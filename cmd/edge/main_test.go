package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

func TestNewStore(t *testing.T) {
	for _, tc := range []struct {
		client string
		mux    int
		addrs  []string
		want   string // %T of the store, "" for an error
	}{
		{"pipe", 0, []string{"127.0.0.1:1"}, "*memcached.PipeStore"},
		{"pipe", 2, []string{"127.0.0.1:1"}, "*memcached.PipeStore"},
		{"pipe", -1, []string{"127.0.0.1:1"}, ""},
		{"gomemcache", 2, []string{"127.0.0.1:1"}, "*memcached.Store"},
		{"gomemcache", 2, []string{"127.0.0.1:1", "127.0.0.1:2"}, "*memcached.Store"},
		{"pipe", 2, nil, "*counter.MemoryStore"},
		{"gomemcache", 2, nil, "*counter.MemoryStore"},
		{"pipe", 2, []string{"127.0.0.1:1", "127.0.0.1:2"}, ""},
		{"redis", 2, []string{"127.0.0.1:1"}, ""},
		{"redis", 2, nil, ""},
	} {
		st, err := newStore(tc.client, tc.addrs, 20*time.Millisecond, tc.mux)
		got := ""
		if err == nil {
			got = typeName(st)
		}
		if got != tc.want {
			t.Errorf("newStore(%q, %v) = %s (err %v), want %q", tc.client, tc.addrs, got, err, tc.want)
		}
	}
}

func typeName(s counter.Store) string {
	switch s.(type) {
	case *memcached.PipeStore:
		return "*memcached.PipeStore"
	case *memcached.Store:
		return "*memcached.Store"
	case *counter.MemoryStore:
		return "*counter.MemoryStore"
	}
	return "other"
}

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

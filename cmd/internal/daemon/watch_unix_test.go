//go:build unix

package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWatchSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yml")
	writeFile(t, path, "v1")
	for _, tc := range []struct {
		name string
		cfg  WatchConfig
	}{
		{"with the file watch", WatchConfig{Path: path}},
		{"signals only", WatchConfig{Path: path, NoFileWatch: true}},
		{"no file", WatchConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeConfig(path)
			startWatch(t, f, tc.cfg)
			// The content is the one already loaded: a signal reloads
			// anyway (the operator asked for it).
			if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			if l := f.next(t, "the SIGHUP reload"); l.trigger != TriggerSignal || l.content != "v1" {
				t.Fatalf("load %+v, want %q of v1", l, TriggerSignal)
			}
		})
	}
}

func TestStopContext(t *testing.T) {
	ctx, stop := StopContext(context.Background())
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not cancel the context")
	}
	if c := context.Cause(ctx); c == nil || !strings.Contains(c.Error(), "terminated") {
		t.Fatalf("cause %v does not name the signal", c)
	}
}

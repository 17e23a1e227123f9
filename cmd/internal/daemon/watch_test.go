package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var errBroken = errors.New("test: broken config")

// load is one call of WatchConfig.Load as the fake config saw it.
type load struct {
	trigger string
	content string // the file as read by Load
	err     error
}

// fakeConfig is a daemon's config: Load reads path, rejects a file that
// starts with "bad" (or every file while failing is set) and otherwise
// takes it as current; every call is reported on loads.
type fakeConfig struct {
	path    string
	failing atomic.Bool
	current atomic.Pointer[string]
	loads   chan load
}

func newFakeConfig(path string) *fakeConfig {
	return &fakeConfig{path: path, loads: make(chan load, 64)}
}

func (f *fakeConfig) Load(trigger string) error {
	b, err := os.ReadFile(f.path)
	switch {
	case err != nil:
	case strings.HasPrefix(string(b), "bad"):
		err = errBroken
	case f.failing.Load():
		err = errors.New("test: store unreachable")
	default:
		s := string(b)
		f.current.Store(&s)
	}
	f.loads <- load{trigger, string(b), err}
	return err
}

func (f *fakeConfig) cur() string {
	if p := f.current.Load(); p != nil {
		return *p
	}
	return ""
}

// next returns the next Load call, failing the test after 5 s.
func (f *fakeConfig) next(t *testing.T, what string) load {
	t.Helper()
	select {
	case l := <-f.loads:
		return l
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	return load{}
}

// none fails the test if Load is called within quiet.
func (f *fakeConfig) none(t *testing.T, why string, quiet time.Duration) {
	t.Helper()
	select {
	case l := <-f.loads:
		t.Fatalf("%s: unexpected load %+v", why, l)
	case <-time.After(quiet):
	}
}

// startWatch runs Watch over f until the test ends.
func startWatch(t *testing.T, f *fakeConfig, cfg WatchConfig) {
	t.Helper()
	cfg.Load = f.Load
	if cfg.Debounce == 0 {
		cfg.Debounce = 10 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := Watch(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the watch goroutine did not end")
		}
	})
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes content next to path and renames it over path, as
// deploy tools and editors do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	writeFile(t, path+".tmp", content)
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// waitContent waits for a Load that accepted content (earlier calls, e.g.
// of a burst split in two, are skipped).
func waitContent(t *testing.T, f *fakeConfig, content string) load {
	t.Helper()
	for {
		l := f.next(t, "a load of "+content)
		if l.err == nil && l.content == content {
			return l
		}
	}
}

func TestWatchFileChanges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, path, content string)
	}{
		{"rewrite in place", writeFile},
		{"atomic rename", replaceFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yml")
			writeFile(t, path, "v1")
			f := newFakeConfig(path)
			startWatch(t, f, WatchConfig{Path: path})
			tc.write(t, path, "v2")
			if l := waitContent(t, f, "v2"); l.trigger != TriggerFile {
				t.Errorf("trigger %q, want %q", l.trigger, TriggerFile)
			}
			tc.write(t, path, "v3")
			waitContent(t, f, "v3")
			if f.cur() != "v3" {
				t.Fatalf("current %q, want v3", f.cur())
			}
		})
	}
}

// TestWatchConfigMapSymlinkSwap: Kubernetes mounts a ConfigMap as
// name -> ..data/name with ..data -> ..<timestamp>, and updates it by
// renaming a new ..data symlink over the old one: no event names the file.
func TestWatchConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "config.yml"), content)
	}
	version("..v1", "v1")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yml")
	if err := os.Symlink(filepath.Join("..data", "config.yml"), path); err != nil {
		t.Fatal(err)
	}
	f := newFakeConfig(path)
	startWatch(t, f, WatchConfig{Path: path})
	version("..v2", "v2")
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitContent(t, f, "v2")
}

// TestWatchBrokenFileKeepsOld: a file Load rejects leaves the previous
// config current; fixing the file loads it.
func TestWatchBrokenFileKeepsOld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yml")
	writeFile(t, path, "v1")
	f := newFakeConfig(path)
	startWatch(t, f, WatchConfig{Path: path})
	replaceFile(t, path, "v2")
	waitContent(t, f, "v2")
	replaceFile(t, path, "bad: [")
	for {
		if l := f.next(t, "the rejected load"); errors.Is(l.err, errBroken) {
			break
		}
	}
	if f.cur() != "v2" {
		t.Fatalf("a broken file replaced the config: current %q", f.cur())
	}
	replaceFile(t, path, "v3")
	waitContent(t, f, "v3")
}

// TestWatchRetriesFailedLoad: a load that failed for a reason outside the
// file is retried at the next event in the directory although the file is
// unchanged; once accepted, further events with the same content do not
// call Load.
func TestWatchRetriesFailedLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yml")
	writeFile(t, path, "v1")
	f := newFakeConfig(path)
	startWatch(t, f, WatchConfig{Path: path})
	f.failing.Store(true)
	replaceFile(t, path, "v2")
	for {
		if l := f.next(t, "the failed load"); l.err != nil && l.content == "v2" {
			break
		}
	}
	f.failing.Store(false)
	writeFile(t, filepath.Join(dir, "other"), "x") // the policy file itself is unchanged
	waitContent(t, f, "v2")
	writeFile(t, filepath.Join(dir, "other"), "y")
	f.none(t, "unchanged content after a successful load", 300*time.Millisecond)
}

// TestWatchNoFileWatch: with NoFileWatch a change on disk waits for a
// signal.
func TestWatchNoFileWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yml")
	writeFile(t, path, "v1")
	f := newFakeConfig(path)
	startWatch(t, f, WatchConfig{Path: path, NoFileWatch: true})
	replaceFile(t, path, "v2")
	f.none(t, "a file change without the file watch", 300*time.Millisecond)
}

func TestWatchConfigErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Watch(ctx, WatchConfig{Path: "x"}); !errors.Is(err, ErrWatchConfig) {
		t.Errorf("no Load: %v, want ErrWatchConfig", err)
	}
	missing := filepath.Join(t.TempDir(), "none", "config.yml")
	if _, err := Watch(ctx, WatchConfig{Path: missing, Load: func(string) error { return nil }}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing directory: %v, want ErrNotExist", err)
	}
}

// TestWatchLoadFirst: with LoadFirst, Watch loads the file once before it
// returns, and another file written in the directory loads nothing again;
// a change of the file loads it; a config that fails to load, or is
// missing, fails Watch with Load's error.
func TestWatchLoadFirst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yml")
	if err := os.WriteFile(path, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFakeConfig(path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, err := Watch(ctx, WatchConfig{Path: path, LoadFirst: true, Load: f.Load, Debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-done }()
	if l := f.next(t, "the first load"); l.trigger != TriggerStart || l.content != "v1" {
		t.Fatalf("first load %+v, want %q of v1", l, TriggerStart)
	}
	if err := os.WriteFile(filepath.Join(dir, "edge.log"), []byte("a log line"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.none(t, "another file of the directory written", 300*time.Millisecond)
	if err := os.WriteFile(path, []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if l := f.next(t, "the change"); l.trigger != TriggerFile || l.content != "v2" {
		t.Fatalf("load %+v, want %q of v2", l, TriggerFile)
	}

	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte("bad"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Watch(ctx, WatchConfig{Path: bad, LoadFirst: true, Load: newFakeConfig(bad).Load}); !errors.Is(err, errBroken) {
		t.Fatalf("Watch of a broken config: %v, want %v", err, errBroken)
	}
	missing := filepath.Join(t.TempDir(), "no-such-dir", "policy.yml")
	if _, err := Watch(ctx, WatchConfig{Path: missing, LoadFirst: true, Load: newFakeConfig(missing).Load}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Watch of a config in a missing directory: %v, want the config's not-exist error", err)
	}
}

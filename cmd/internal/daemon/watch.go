// Package daemon is the process plumbing the poplimit daemons (cmd/edge,
// cmd/mcproxy, cmd/rls) share: the one config-file watcher (Watch: a file
// change on disk or SIGHUP reloads, Kubernetes ConfigMap symlink swaps
// included), the stop signals (StopContext: SIGTERM and SIGINT end the
// daemon gracefully), and the Go runtime's tuning for a long-running
// daemon (GovernProcs, RunGCFloor, StartHeapFloor). What a reload means
// stays in the daemon's own package (pop.Limiter.LoadFile,
// proxy.Proxy.ReloadFile); this package only decides when to call it. It
// imports the standard library and fsnotify, nothing of poplimit.
package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Triggers passed to WatchConfig.Load.
const (
	// TriggerFile: the watched file's content changed on disk.
	TriggerFile = "file changed"
	// TriggerSignal: a reload signal (SIGHUP) arrived.
	TriggerSignal = "SIGHUP"
	// TriggerStart: the first load, by Watch itself (LoadFirst).
	TriggerStart = "start"
)

// ErrWatchConfig reports a WatchConfig that Watch cannot use.
var ErrWatchConfig = errors.New("daemon: invalid watch config")

// WatchConfig configures Watch. Zero means default.
type WatchConfig struct {
	// Path is the config file. "" watches no file: only the reload
	// signals call Load (a daemon without a config file still catches
	// SIGHUP instead of dying of it).
	Path string
	// Dir, when set, makes Path a directory of config files (cmd/rls):
	// events in it and in its parent (a swapped symlink) arm the debounce,
	// and the content compared is every regular file's name and bytes.
	Dir bool
	// NoFileWatch, when set, leaves the file alone: only the reload
	// signals call Load.
	NoFileWatch bool
	// LoadFirst, when set, makes Watch call Load (TriggerStart) once the
	// file is watched and before it returns, and return Load's error
	// (watching nothing then). The content loaded is the one later events
	// compare with, so an event that changed nothing (another file
	// written in the directory) loads nothing again.
	LoadFirst bool
	// Load applies the config (required). It is called from Watch's one
	// goroutine, never concurrently, with the trigger (TriggerFile or
	// TriggerSignal). An error means the content was not taken: the next
	// event in the directory calls Load again even if the file has not
	// changed (the failure may be outside the file, say a store briefly
	// unreachable). Load reports its own errors (Watch does not log them).
	Load func(trigger string) error
	// Debounce is the quiet time after the last event in the file's
	// directory before the file is read; default 50ms. A burst of events
	// (an editor's write, rename and chmod) causes one read.
	Debounce time.Duration
	// Signals are the reload signals; default SIGHUP.
	Signals []os.Signal
	// Logger receives watch errors; default slog.Default().
	Logger *slog.Logger
}

func (c WatchConfig) debounce() time.Duration {
	if c.Debounce > 0 {
		return c.Debounce
	}
	return 50 * time.Millisecond
}

func (c WatchConfig) signals() []os.Signal {
	if len(c.Signals) > 0 {
		return c.Signals
	}
	return []os.Signal{syscall.SIGHUP}
}

func (c WatchConfig) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// Watch calls cfg.Load each time a reload signal arrives and each time the
// content of cfg.Path changes on disk, until ctx ends. It returns once the
// signals are caught and the watch is in place, so no change or signal
// after it returns is missed (nor does a signal take its default action);
// the returned channel is closed when the watching goroutine has ended
// (after ctx ends, once a Load in progress returns).
//
// It watches the file's directory rather than the file: any event there
// may change what the path resolves to (an editor or deploy tool renames a
// new file over it; Kubernetes swaps the "..data" symlink of a mounted
// ConfigMap, and no event names the file itself), so every event arms the
// debounce, and when it fires the file is read and Load is called if its
// content differs from the last content Load accepted. The first event
// always calls Load (the content loaded before Watch is unknown to it); a
// file that cannot be read (mid-replace) waits for the next event. A
// signal calls Load whatever the content.
//
// The error is ErrWatchConfig for a missing Load, else the error of
// setting up the file watch (the signals are released again).
func Watch(ctx context.Context, cfg WatchConfig) (<-chan struct{}, error) {
	if cfg.Load == nil {
		return nil, fmt.Errorf("%w: no Load", ErrWatchConfig)
	}
	w := &watch{cfg: cfg}
	if cfg.Path != "" && !cfg.NoFileWatch {
		abs, err := filepath.Abs(cfg.Path)
		if err != nil {
			return nil, err
		}
		fw, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, err
		}
		err = fw.Add(filepath.Dir(abs))
		if err == nil && cfg.Dir {
			err = fw.Add(abs)
		}
		if err != nil {
			fw.Close()
			if cfg.LoadFirst {
				if lerr := cfg.Load(TriggerStart); lerr != nil {
					return nil, lerr // the config's own error (a missing file) says more
				}
			}
			return nil, err
		}
		w.abs, w.fs = abs, fw
	}
	if cfg.LoadFirst {
		if err := w.loadFirst(); err != nil {
			if w.fs != nil {
				w.fs.Close()
			}
			return nil, err
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, cfg.signals()...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(sigs)
		if w.fs != nil {
			defer w.fs.Close()
		}
		w.loop(ctx, sigs)
	}()
	return done, nil
}

// watch is the state of one Watch goroutine.
type watch struct {
	cfg    WatchConfig
	abs    string            // absolute path, "" without a file watch
	fs     *fsnotify.Watcher // nil without a file watch
	last   [sha256.Size]byte // content Load last accepted
	loaded bool              // last is set
}

func (w *watch) loop(ctx context.Context, sigs <-chan os.Signal) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.fs != nil {
		events, errs = w.fs.Events, w.fs.Errors
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
			w.load(TriggerSignal, true)
		case _, ok := <-events:
			if !ok {
				return
			}
			debounce.Reset(w.cfg.debounce())
		case err, ok := <-errs:
			if !ok {
				return
			}
			w.cfg.logger().Warn("config watch error", "path", w.cfg.Path, "err", err)
		case <-debounce.C:
			w.load(TriggerFile, false)
		}
	}
}

// load reads the file (when watched) and calls Load, unless the content is
// the one last accepted and force is false. The content is remembered only
// once Load accepted it, so a failed load is retried at the next event.
func (w *watch) load(trigger string, force bool) {
	if w.abs == "" {
		_ = w.cfg.Load(trigger)
		return
	}
	b, err := w.read()
	if err != nil {
		if force {
			_ = w.cfg.Load(trigger) // Load reports the missing file
		}
		return // mid-replace: the next event re-arms the debounce
	}
	sum := sha256.Sum256(b)
	if !force && w.loaded && sum == w.last {
		return
	}
	if w.cfg.Load(trigger) == nil {
		w.last, w.loaded = sum, true
	}
}

// loadFirst is LoadFirst's load: Load's error, the content recorded when
// Load took it.
func (w *watch) loadFirst() error {
	if w.abs == "" {
		return w.cfg.Load(TriggerStart)
	}
	b, rerr := w.read()
	if err := w.cfg.Load(TriggerStart); err != nil || rerr != nil {
		return err
	}
	w.last, w.loaded = sha256.Sum256(b), true
	return nil
}

// read is the watched content: the file, or with Dir every regular file
// of the directory (name, length, bytes).
func (w *watch) read() ([]byte, error) {
	if !w.cfg.Dir {
		return os.ReadFile(w.abs)
	}
	ents, err := os.ReadDir(w.abs)
	if err != nil {
		return nil, err
	}
	var all []byte
	for _, e := range ents {
		if !e.Type().IsRegular() && e.Type()&os.ModeSymlink == 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(w.abs, e.Name()))
		if err != nil {
			continue // a dangling link or a directory behind a link
		}
		all = fmt.Appendf(all, "%s\x00%d\x00", e.Name(), len(b))
		all = append(all, b...)
	}
	return all, nil
}

// StopContext returns a copy of parent that is cancelled when SIGTERM or
// SIGINT arrives (or when stop is called): the daemons' graceful stop.
// context.Cause of the cancelled context names the signal. Until stop is
// called, those signals no longer terminate the process; call stop once
// the daemon has shut down.
func StopContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	return signal.NotifyContext(parent, syscall.SIGTERM, os.Interrupt)
}

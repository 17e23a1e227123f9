package pop

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchFile reloads path whenever it changes on disk, until ctx ends. It
// returns once the watch is in place (so no change after it returns is
// missed) and reloads in a goroutine; the returned channel is closed when
// that goroutine ends. It watches the file's directory, so editors and
// deploy tools that replace the file (rename over it) are seen too. Bursts
// of events within 50ms cause one reload. An invalid file keeps the current
// snapshot (the error is logged and kept in LastLoadError).
func (l *Limiter) WatchFile(ctx context.Context, path string) (<-chan struct{}, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		err = w.Add(filepath.Dir(abs))
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Close()
		l.watchLoop(ctx, w, abs)
	}()
	return done, nil
}

func (l *Limiter) watchLoop(ctx context.Context, w *fsnotify.Watcher, abs string) {
	// Any event in the directory may change what abs resolves to (editors
	// rename over it; Kubernetes swaps a "..data" symlink), so every event
	// arms the debounce and the file is reloaded when its content changed.
	sum := func() (s [32]byte, ok bool) {
		b, err := os.ReadFile(abs)
		if err != nil {
			return s, false
		}
		return sha256.Sum256(b), true
	}
	// Unknown at first: the first event reloads whatever is there (a
	// no-op for unchanged policies, whose caches are kept).
	var last [32]byte
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			debounce = time.After(50 * time.Millisecond)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			l.cfg.logger().Warn("policy watch error", "err", err)
		case <-debounce:
			debounce = nil
			cur, ok := sum()
			if !ok || cur == last {
				continue // mid-replace (the next event re-arms), or unchanged
			}
			// Remember the content only once it loaded: a load that
			// failed (say, a store briefly unreachable) is retried at the
			// next event even if the file has not changed.
			if l.LoadFile(abs) == nil {
				last = cur
			}
		}
	}
}

// ReloadOnSignal reloads path each time one of sigs arrives (usually
// syscall.SIGHUP) until ctx ends. The signals are caught before it returns
// (so a signal sent afterwards never takes its default action); the
// returned channel is closed when the reloading goroutine ends.
func (l *Limiter) ReloadOnSignal(ctx context.Context, path string, sigs ...os.Signal) <-chan struct{} {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				_ = l.LoadFile(path)
			}
		}
	}()
	return done
}

// ReloadHandler is the admin endpoint: POST reloads path and answers 200
// "ok", or 422 with the validation errors (the old snapshot stays).
func (l *Limiter) ReloadHandler(path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		if err := l.LoadFile(path); err != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, "policy rejected, previous policy kept:\n"+err.Error()+"\n")
			return
		}
		io.WriteString(w, "ok\n")
	})
}

package pop

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch reloads path whenever it changes on disk until ctx ends. It
// watches the file's directory, so editors that replace the file (rename
// over it) and symlink swaps are seen too. Bursts of events within 50ms
// cause one reload. An invalid file keeps the current snapshot (the error
// is logged and kept in LastLoadError).
func (l *Limiter) Watch(ctx context.Context, path string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		return err
	}
	base := filepath.Base(abs)
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if filepath.Base(ev.Name) != base && !ev.Has(fsnotify.Create) {
				continue
			}
			if ev.Has(fsnotify.Write) || ev.Has(fsnotify.Create) || ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Chmod) {
				debounce = time.After(50 * time.Millisecond)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			l.cfg.logger().Warn("policy watch error", "err", err)
		case <-debounce:
			debounce = nil
			if _, err := os.Stat(abs); err != nil {
				continue // mid-replace; the Create will follow
			}
			_ = l.LoadFile(path)
		}
	}
}

// ReloadOnSignal reloads path each time one of sigs arrives (usually
// syscall.SIGHUP) until ctx ends.
func (l *Limiter) ReloadOnSignal(ctx context.Context, path string, sigs ...os.Signal) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			_ = l.LoadFile(path)
		}
	}
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

// HealthHandler answers 200 when a policy is loaded and the store breaker
// is closed, 503 otherwise, with a one-line reason.
func (l *Limiter) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		switch {
		case !l.Loaded():
			err = ErrNoPolicy
		case l.breaker.State() != BreakerClosed:
			err = errors.New("store breaker " + l.breaker.State().String())
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
}

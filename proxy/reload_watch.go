package proxy

import (
	"context"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchFile calls onChange after path is written, created, renamed onto or
// removed, once per burst of events (debounce, default 200ms, after the
// last event). It watches the file's directory, so editors that replace
// the file and files created later are seen. It returns when ctx ends, or
// with the error of setting up the watch.
func WatchFile(ctx context.Context, path string, debounce time.Duration, onChange func()) error {
	if debounce <= 0 {
		debounce = 200 * time.Millisecond
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(abs)); err != nil {
		return err
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if filepath.Clean(ev.Name) == abs && !ev.Has(fsnotify.Chmod) {
				t.Reset(debounce)
			}
		case _, ok := <-w.Errors:
			if !ok {
				return nil
			}
		case <-t.C:
			onChange()
		}
	}
}

package pop

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/poplimit/poplimit/counter"
)

// loadedLimiter returns a limiter over a flaky store (clock at t0) with the
// policy file at path loaded.
func loadedLimiter(t *testing.T, path string) *Limiter {
	t.Helper()
	l, err := New(storeConfig(newFlakyStore(newTestClock(t0).Now)))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	return l
}

// freeKeyTier is the tier l decides for the free API key of policyDoc.
func freeKeyTier(l *Limiter) string {
	return l.Decide(context.Background(), freeKeyReq(), t0).Tier
}

// TestLoadFileReplacesAndKeepsOldOnError: the reload contract the
// daemon's watcher (cmd/internal/daemon.Watch) relies on: a new file
// replaces the snapshot, an invalid one keeps it and says why, naming the
// file.
func TestLoadFileReplacesAndKeepsOldOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yml")
	if err := os.WriteFile(path, []byte(policyDoc("open")), 0o644); err != nil {
		t.Fatal(err)
	}
	l := loadedLimiter(t, path)
	tierOf := func() string { return freeKeyTier(l) }
	// Replace the file atomically (rename over it), as deploy tools do.
	tmp := filepath.Join(dir, "policy.yml.tmp")
	os.WriteFile(tmp, []byte(strings.Replace(policyDoc("open"), "tier: free}", "tier: pro}", 1)), 0o644)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if err := l.LoadFile(path); err != nil || tierOf() != "pro" {
		t.Fatalf("reload: %v, tier %q, want pro", err, tierOf())
	}

	// An invalid file keeps the old snapshot and says why.
	os.WriteFile(path, []byte("version: 1\ntiers: {}\n"), 0o644)
	if err := l.LoadFile(path); err == nil || l.LastLoadError() == nil {
		t.Fatalf("invalid file: LoadFile %v, LastLoadError %v", err, l.LastLoadError())
	}
	if tierOf() != "pro" {
		t.Fatal("invalid file replaced the snapshot")
	}
	if !strings.Contains(l.LastLoadError().Error(), "policy.yml:") {
		t.Fatalf("error does not name the file: %v", l.LastLoadError())
	}
}

func TestAdminReloadAndHealth(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yml")
	os.WriteFile(path, []byte(policyDoc("open")), 0o644)
	clk := newTestClock(t0)
	l, _ := New(storeConfig(newFlakyStore(clk.Now)))

	rec := httptest.NewRecorder()
	l.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("health before load: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	l.ReloadHandler(path).ServeHTTP(rec, httptest.NewRequest("GET", "/reload", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /reload: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	l.ReloadHandler(path).ServeHTTP(rec, httptest.NewRequest("POST", "/reload", nil))
	if rec.Code != 200 || !l.Loaded() {
		t.Fatalf("POST /reload: %d %s", rec.Code, rec.Body)
	}
	os.WriteFile(path, []byte("nope: ["), 0o644)
	rec = httptest.NewRecorder()
	l.ReloadHandler(path).ServeHTTP(rec, httptest.NewRequest("POST", "/reload", nil))
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "policy.yml:") {
		t.Fatalf("bad reload: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	l.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 {
		t.Fatalf("health after load: %d", rec.Code)
	}
}

// TestLoadFileFailsOnStoreSetup: a load that failed for a reason outside
// the file (here the shared limiter could not be built) is an error, so
// the daemon's watcher retries it at the next event; the same file loads
// once the store is back.
func TestLoadFileFailsOnStoreSetup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yml")
	if err := os.WriteFile(path, []byte(policyDoc("open")), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := storeConfig(newFlakyStore(newTestClock(t0).Now))
	shared := cfg.NewShared
	var failing atomic.Bool
	cfg.NewShared = func(lim counter.Limit) (counter.Allower, error) {
		if failing.Load() {
			return nil, errors.New("test: store setup failed")
		}
		return shared(lim)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	// A changed limit: the policy is rebuilt (NewShared called).
	changed := strings.Replace(strings.Replace(policyDoc("open"), "tier: free}", "tier: pro}", 1), "quantity: 100,", "quantity: 200,", 1)
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.LoadFile(path); err == nil || l.LastLoadError() == nil {
		t.Fatalf("store setup failing: LoadFile %v, LastLoadError %v", err, l.LastLoadError())
	}
	if freeKeyTier(l) != "free" {
		t.Fatal("a failed load replaced the snapshot")
	}
	failing.Store(false)
	if err := l.LoadFile(path); err != nil || l.LastLoadError() != nil || freeKeyTier(l) != "pro" {
		t.Fatalf("retried load: %v, LastLoadError %v, tier %q", err, l.LastLoadError(), freeKeyTier(l))
	}
}

// TestLoadFileErrors: a missing file is reported as unreadable (not as an
// invalid policy), and the log says whether a previous policy is kept.
func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yml")
	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(good, []byte(policyDoc("open")), 0o644)
	os.WriteFile(bad, []byte("version: 1\ntiers: {}\n"), 0o644)
	for _, tc := range []struct {
		name        string
		first       string // loaded before, "" for none
		path        string
		wantInvalid bool
		wantMissing bool
		wantLog     string
	}{
		{"missing, first load", "", filepath.Join(dir, "none.yml"), false, true, "no policy loaded yet"},
		{"missing, after a load", good, filepath.Join(dir, "none.yml"), false, true, "keeping the previous one"},
		{"invalid, first load", "", bad, true, false, "no policy loaded yet"},
		{"invalid, after a load", good, bad, true, false, "keeping the previous one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			cfg := storeConfig(newFlakyStore(newTestClock(t0).Now))
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if tc.first != "" {
				if err := l.LoadFile(tc.first); err != nil {
					t.Fatal(err)
				}
			}
			logs.Reset()
			err = l.LoadFile(tc.path)
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.Is(err, ErrInvalidPolicy); got != tc.wantInvalid {
				t.Errorf("errors.Is(%v, ErrInvalidPolicy) = %v, want %v", err, got, tc.wantInvalid)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tc.wantMissing {
				t.Errorf("errors.Is(%v, fs.ErrNotExist) = %v, want %v", err, got, tc.wantMissing)
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log %q does not say %q", logs.String(), tc.wantLog)
			}
			if l.Loaded() != (tc.first != "") {
				t.Errorf("Loaded() = %v after a failed load", l.Loaded())
			}
		})
	}
}

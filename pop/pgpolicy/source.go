// Package pgpolicy is a pop policy source backed by PostgreSQL: tiers and
// API keys (the design's rate_limit_policies and client_api_keys, with
// the extensions of migrations/0002) become pop's immutable snapshot.
// Changes arrive by LISTEN/NOTIFY (triggers on every table, migration
// 0003) and are applied within a second; a periodic full re-read catches
// anything a dropped connection missed. No query is made on the request
// path. While PostgreSQL is unreachable the last good snapshot stays (or
// the on-disk cache one, at start), health says degraded, and the source
// reconnects with exponential backoff and jitter.
package pgpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/poplimit/poplimit/pop/policy"
)

// Sentinel errors.
var (
	// ErrConfig reports an unusable Config.
	ErrConfig = errors.New("pgpolicy: bad config")
	// ErrMigrate wraps a migration failure.
	ErrMigrate = errors.New("pgpolicy: migration failed")
	// ErrNoCache reports a missing or unreadable snapshot cache.
	ErrNoCache = errors.New("pgpolicy: no cached snapshot")
)

// Channel is the NOTIFY channel of migration 0003's triggers.
const Channel = "poplimit_policy"

// Config configures a Source. Zero means default.
type Config struct {
	// DSN is the PostgreSQL connection string (postgres://...). Required.
	DSN string
	// Install installs a built snapshot, usually (*pop.Limiter).LoadPolicy.
	// Required.
	Install func(*policy.File) error
	// Resync is the period of the full re-read; default 30s.
	Resync time.Duration
	// Debounce is how long notifications are gathered before they are
	// applied together; default 20ms.
	Debounce time.Duration
	// CachePath, if set, receives the snapshot after each successful load
	// (mode 0600; key digests only) and LoadCache reads it.
	CachePath string
	// MinBackoff and MaxBackoff bound the reconnect delay (doubling, with
	// ±50% jitter); defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// ConnectTimeout bounds one connection attempt; default 2s.
	ConnectTimeout time.Duration
	// Metrics, if not nil, receives the source's counters (NewMetrics).
	Metrics *Metrics
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func orDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Source keeps a Limiter's policy in step with the database. Run drives
// it; HealthReasons feeds pop.Config.HealthReasons.
type Source struct {
	cfg Config
	log *slog.Logger

	// Owned by Run's goroutine.
	base     *policy.File // the tiers' file, no keys
	keys     map[string]policy.KeyRecord
	tierByID map[string]string
	doc      []byte
	st       Settings

	mu        sync.Mutex
	connected bool
	downSince time.Time
	origin    string // "database" or "cache"
	loadedAt  time.Time
}

// New returns a Source; nothing is read until LoadCache or Run.
func New(cfg Config) (*Source, error) {
	if cfg.DSN == "" || cfg.Install == nil {
		return nil, fmt.Errorf("%w: DSN and Install are required", ErrConfig)
	}
	if cfg.Resync < 0 || cfg.Debounce < 0 || cfg.MinBackoff < 0 || cfg.MaxBackoff < 0 || cfg.ConnectTimeout < 0 {
		return nil, fmt.Errorf("%w: negative duration", ErrConfig)
	}
	if _, err := pgx.ParseConfig(cfg.DSN); err != nil {
		return nil, fmt.Errorf("%w: DSN: %v", ErrConfig, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Source{cfg: cfg, log: log, downSince: time.Now()}, nil
}

// HealthReasons says why the source is degraded: PostgreSQL unreachable
// (with what is served meanwhile), or no snapshot yet. Empty when
// connected and loaded.
func (s *Source) HealthReasons() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connected && s.origin == "database" {
		return nil
	}
	served := "no snapshot"
	if s.origin != "" {
		served = fmt.Sprintf("serving the %s snapshot loaded %s", s.origin, s.loadedAt.UTC().Format(time.RFC3339))
	}
	return []string{fmt.Sprintf("policy source: PostgreSQL unreachable since %s, %s", s.downSince.UTC().Format(time.RFC3339), served)}
}

// cacheFile is the on-disk snapshot: the generated policy document and
// the key table (digests only).
type cacheFile struct {
	Document      string                      `json:"document"`
	Keys          map[string]policy.KeyRecord `json:"keys"`
	RejectUnknown bool                        `json:"reject_unknown"`
	WrittenAt     time.Time                   `json:"written_at"`
}

// LoadCache installs the snapshot of CachePath (a worker starting while
// PostgreSQL is down serves it). ErrNoCache without one.
func (s *Source) LoadCache() error {
	if s.cfg.CachePath == "" {
		return ErrNoCache
	}
	b, err := os.ReadFile(s.cfg.CachePath)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoCache, err)
	}
	var c cacheFile
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoCache, s.cfg.CachePath, err)
	}
	f, err := policy.Parse(s.cfg.CachePath, []byte(c.Document))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoCache, s.cfg.CachePath, err)
	}
	f.Keys, f.KeyDigests, f.RejectUnknownKeys = c.Keys, true, c.RejectUnknown
	err = s.cfg.Install(f)
	s.cfg.Metrics.load("cache", err)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.origin, s.loadedAt = "cache", c.WrittenAt
	s.mu.Unlock()
	s.log.Info("policy source: serving the cached snapshot", "path", s.cfg.CachePath, "written", c.WrittenAt)
	return nil
}

func (s *Source) writeCache(f *policy.File) {
	if s.cfg.CachePath == "" {
		return
	}
	b, err := json.Marshal(cacheFile{Document: string(s.doc), Keys: f.Keys, RejectUnknown: f.RejectUnknownKeys, WrittenAt: time.Now()})
	if err == nil {
		tmp := s.cfg.CachePath + ".tmp"
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, filepath.Clean(s.cfg.CachePath))
		}
	}
	if err != nil {
		s.log.Warn("policy source: snapshot cache not written", "path", s.cfg.CachePath, "err", err)
	}
}

func (s *Source) setConnected(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connected && !up {
		s.downSince = time.Now()
	}
	s.connected = up
	s.cfg.Metrics.connected(up)
}

// Run keeps the snapshot current until ctx ends: connect, LISTEN, full
// read, apply notifications, re-read every Resync; on any error, back off
// (with jitter) and start over. It returns ctx's error.
func (s *Source) Run(ctx context.Context) error {
	backoff := orDur(s.cfg.MinBackoff, 100*time.Millisecond)
	for {
		start := time.Now()
		err := s.session(ctx)
		s.setConnected(false)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) > 10*time.Second {
			backoff = orDur(s.cfg.MinBackoff, 100*time.Millisecond) // a session that lived: start over
		}
		s.cfg.Metrics.reconnect()
		wait := time.Duration(float64(backoff) * (0.5 + rand.Float64()))
		s.log.Warn("policy source: PostgreSQL unreachable, keeping the current snapshot", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, orDur(s.cfg.MaxBackoff, 5*time.Second))
	}
}

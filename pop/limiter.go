package pop

// The Limiter: its Config, construction, and installing a policy.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop/policy"
)

// Config configures a Limiter. Zero means default.
type Config struct {
	// NewShared builds the PoP-wide limiter of one limit, usually
	// counter.New over a memcached store reached through mcproxy. Default:
	// counter.New over one in-process memstore.Store (this process
	// only: nothing is shared with other workers).
	NewShared func(counter.Limit) (counter.Allower, error)
	// Store is the PoP-wide store concurrency limits and mitigation flags
	// use directly (the one NewShared counts in). Default: the in-process
	// memstore.Store of the default NewShared, or, when NewShared is set, a
	// memstore.Store of this process only.
	Store counter.Store
	// Shadow makes every limit a dry run (edge --shadow): it counts and
	// decides as usual, but a request it would reject is admitted and
	// reported (metrics, events). Default false.
	Shadow bool
	// NewLocal builds an in-process limiter (pre-filter and the local fail
	// mode); default counter.NewLocal.
	NewLocal func(counter.Limit) (counter.Allower, error)
	// NewGlobal builds the allower of a "scope: global" limit (package
	// pop/global), given the policy's fail mode for when the global store
	// is unreachable. Default nil: a policy with a global limit is
	// rejected.
	NewGlobal func(counter.Limit, policy.FailMode) (counter.Allower, error)
	// PoPs is the number of PoPs sharing each global limit; default 1. A
	// global limit's in-process budget (a decision the store did not
	// answer in time, the local fail mode) is its limit ÷ (WorkersPerPoP ×
	// PoPs): every worker of every PoP may fall back to it at once, so a
	// per-PoP share would admit up to PoPs × the limit.
	PoPs int
	// HealthReasons, if not nil, adds reasons to Health (e.g. the global
	// store's state); any reason makes the health degraded.
	HealthReasons func() []string
	// StoreDeadline, if positive, fixes the deadline of one decision's
	// store calls (Deadline.Fixed); default 0: the deadline adapts to the
	// observed store latency (see DeadlineConfig). It is passed down as a
	// context deadline: a store that cannot honour contexts mid-call
	// (gomemcache) must get a socket timeout of the longest deadline
	// (cmd/edge sets memcached.Config.Timeout to it).
	StoreDeadline time.Duration
	// Deadline configures the adaptive store deadline.
	Deadline DeadlineConfig
	// MaxInFlight bounds the decisions waiting on the store at once in
	// this Limiter; default 256. A decision beyond it waits up to
	// InFlightWait for a slot, then is decided by the local budget
	// (ReasonStoreBusy): it never queues without bound.
	MaxInFlight int
	// InFlightWait is how long a decision waits for an in-flight slot;
	// default the current store deadline.
	InFlightWait time.Duration
	// WorkersPerPoP divides each limit for the local fail mode and sizes
	// default lease batches; default 1.
	WorkersPerPoP int
	// Breaker configures the store circuit breaker.
	Breaker BreakerConfig
	// MitigationEntries bounds each policy's mitigation cache, and each
	// lease table (a leasing policy has one per limit of each tier it can
	// apply); default 100000.
	MitigationEntries int
	// Metrics, if not nil, receives every decision.
	Metrics *Metrics
	// Events, if not nil, receives every rejection.
	Events *Events
	// Logger logs reloads (never decisions); default slog.Default().
	Logger *slog.Logger
	// Clock is read by the middleware (and Run, Load*) for the instant
	// handed to Decide; default time.Now. Decide itself never reads it:
	// see Decide for the one clock it times store calls with.
	Clock func() time.Time
}

func (c Config) deadline() DeadlineConfig {
	d := c.Deadline
	if c.StoreDeadline > 0 {
		d.Fixed = c.StoreDeadline
	}
	return d
}

func (c Config) maxInFlight() int {
	if c.MaxInFlight > 0 {
		return c.MaxInFlight
	}
	return 256
}

// localShares is how many in-process budgets share ls's limit.
func (c Config) localShares(ls policy.LimitSpec) int {
	if ls.Global && c.PoPs > 1 {
		return c.workers() * c.PoPs
	}
	return c.workers()
}

func (c Config) workers() int {
	if c.WorkersPerPoP > 0 {
		return c.WorkersPerPoP
	}
	return 1
}

func (c Config) mitigationEntries() int {
	if c.MitigationEntries > 0 {
		return c.MitigationEntries
	}
	return 100000
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

func (c Config) clock() func() time.Time {
	if c.Clock != nil {
		return c.Clock
	}
	return time.Now
}

// Limiter decides requests against the current policy snapshot. Safe for
// concurrent use; the snapshot is swapped atomically by Load*.
type Limiter struct {
	cfg     Config
	clock   func() time.Time
	snap    atomic.Pointer[snapshot]
	breaker *Breaker
	dl      *deadline
	slots   chan struct{} // one token per store call in flight
	store   counter.Store // Config.Store resolved
	loadMu  sync.Mutex    // serialises reloads (not decisions)
	lastErr atomic.Pointer[error]
}

// New returns a Limiter with no policy: every request passes until a policy
// is loaded (LoadFile, LoadBytes).
func New(cfg Config) (*Limiter, error) {
	if cfg.NewShared == nil {
		if cfg.Store == nil {
			cfg.Store = memstore.New()
		}
		store := cfg.Store
		cfg.NewShared = func(l counter.Limit) (counter.Allower, error) { return counter.New(store, l) }
	}
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	if cfg.NewLocal == nil {
		cfg.NewLocal = func(l counter.Limit) (counter.Allower, error) { return counter.NewLocal(l) }
	}
	if cfg.WorkersPerPoP < 0 || cfg.PoPs < 0 || cfg.StoreDeadline < 0 || cfg.MitigationEntries < 0 || cfg.MaxInFlight < 0 || cfg.InFlightWait < 0 {
		return nil, fmt.Errorf("%w: negative WorkersPerPoP, PoPs, StoreDeadline, MitigationEntries, MaxInFlight or InFlightWait", ErrConfig)
	}
	if d := cfg.Deadline; d.Fixed < 0 || d.Floor < 0 || d.Ceiling < 0 || d.Multiple < 0 || (d.Ceiling > 0 && d.Ceiling < d.floor()) {
		return nil, fmt.Errorf("%w: deadline floor %v, ceiling %v, multiple %v: want non-negative, floor ≤ ceiling", ErrConfig, d.Floor, d.Ceiling, d.Multiple)
	}
	l := &Limiter{cfg: cfg, clock: cfg.clock(), slots: make(chan struct{}, cfg.maxInFlight()), store: cfg.Store}
	l.dl = newDeadline(cfg.deadline(), cfg.Metrics.storeDeadline)
	cfg.Metrics.storeDeadline(l.dl.Current())
	logger := cfg.logger()
	l.breaker = NewBreaker(cfg.Breaker, func(s BreakerState) {
		cfg.Metrics.breakerState(s)
		logger.Warn("store circuit breaker", "state", s.String())
	})
	if cfg.Events != nil {
		cfg.Events.metrics = cfg.Metrics
	}
	return l, nil
}

// sharedAllower builds the PoP-wide allower of ls: NewShared, or NewGlobal
// for a global limit.
func (l *Limiter) sharedAllower(ls policy.LimitSpec, fm policy.FailMode) (counter.Allower, error) {
	if !ls.Global {
		return l.cfg.NewShared(sharedLimit(ls.Limit))
	}
	if l.cfg.NewGlobal == nil {
		return nil, ErrNoGlobal
	}
	return l.cfg.NewGlobal(ls.Limit, fm)
}

// sharedLimit is l as the shared count enforces it: on_reject count of a
// sliding window or token bucket is counter.CountFirst, so a refusal while
// the identity is already over is charged on no worker, as the mitigation
// cache charges none in one: the counts the first refusal's Retry-After
// was computed on stand, and every worker's Retry-After for one burst is
// that same, true instant.
func sharedLimit(l counter.Limit) counter.Limit {
	if l.OnReject == counter.Count && l.Algorithm != counter.FixedWindow {
		l.OnReject = counter.CountFirst
	}
	return l
}

// ErrNoGlobal: a policy has a "scope: global" limit but the Limiter has no
// Config.NewGlobal (edge: no --global-memcached).
var ErrNoGlobal = errors.New("pop: scope: global limit without a global store (edge --global-memcached)")

// sweeper is implemented by counter's limiters: drop state idle for a
// whole window.
type sweeper interface{ Sweep(now time.Time) }

// Sweep drops idle per-key state of every limiter of the current snapshot
// (local pre-filter and fail-mode budgets, shared limiters' window caches).
// Run calls it periodically.
func (l *Limiter) Sweep(now time.Time) {
	s := l.snap.Load()
	if s == nil {
		return
	}
	if sw, ok := s.prefilter.(sweeper); ok {
		sw.Sweep(now)
	}
	for _, p := range s.policies {
		for _, rs := range p.tiers {
			for _, r := range rs.limits {
				for _, a := range []counter.Allower{r.shared, r.local} {
					if sw, ok := a.(sweeper); ok {
						sw.Sweep(now)
					}
				}
			}
		}
	}
}

// Run sweeps idle state every interval (default 10s) until ctx ends.
func (l *Limiter) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.Sweep(l.clock())
		}
	}
}

// Breaker exposes the store circuit breaker (for health endpoints).
func (l *Limiter) Breaker() *Breaker { return l.breaker }

// LoadFile parses, validates and installs a policy file. On error the
// current snapshot stays in place and the error says why.
func (l *Limiter) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return l.loaded(path, fmt.Errorf("pop: read policy: %w", err))
	}
	f, err := policy.Parse(path, data)
	if err != nil {
		return l.loaded(path, err)
	}
	return l.install(f)
}

// LoadPolicy installs f, a File built by a policy source (pop/pgpolicy)
// rather than parsed from YAML: f must not be modified afterwards. On
// error the current snapshot stays in place. A source validates what it
// builds (policy.Parse of a generated document does); LoadPolicy compiles it
// as LoadBytes does.
func (l *Limiter) LoadPolicy(f *policy.File) error {
	if f == nil {
		return l.loaded("", ErrNoPolicy)
	}
	return l.install(f)
}

// LoadBytes is LoadFile for an in-memory document labelled name.
func (l *Limiter) LoadBytes(name string, data []byte) error {
	f, err := policy.Parse(name, data)
	if err != nil {
		return l.loaded(name, err)
	}
	return l.install(f)
}

func (l *Limiter) install(f *policy.File) error {
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	s, err := l.compile(f, l.snap.Load(), l.clock())
	if err == nil {
		l.snap.Store(s)
	}
	return l.loaded(f.Name, err)
}

func (l *Limiter) loaded(name string, err error) error {
	l.cfg.Metrics.reload(err)
	if err != nil {
		l.lastErr.Store(&err)
		msg := "policy rejected, keeping the previous one"
		if l.snap.Load() == nil {
			msg = "policy rejected, no policy loaded yet"
		}
		l.cfg.logger().Error(msg, "file", name, "err", err)
		return err
	}
	l.lastErr.Store(nil)
	l.cfg.logger().Info("policy loaded", "file", name)
	return nil
}

// LastLoadError is the error of the last load attempt, nil if it succeeded.
func (l *Limiter) LastLoadError() error {
	if p := l.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Loaded reports whether a policy snapshot is installed.
func (l *Limiter) Loaded() bool { return l.snap.Load() != nil }

// Headers is the header mode of the current policy file.
func (l *Limiter) Headers() policy.HeaderMode {
	if s := l.snap.Load(); s != nil {
		return s.file.Headers
	}
	return policy.HeadersBoth
}

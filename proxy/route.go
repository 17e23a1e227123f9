package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/shard"
)

// BackendHooks are the callbacks a backend uses to report I/O failures to
// its shard's health state machine (see PoolConfig.OnFailure).
type BackendHooks struct {
	OnFailure func(now time.Time, err error)
	OnRecover func(now time.Time)
}

// RouterConfig configures NewRouter. Zero means default.
type RouterConfig struct {
	// Servers is the shard list in config order (required).
	Servers []shard.Server
	// Distribution and Hash choose the placement (see
	// shard.MembershipConfig); default consistent hashing over xxhash.
	Distribution string
	Hash         string
	// HashTag selects the hashed part of keys; the zero value hashes whole
	// keys (use shard.DefaultHashTag() for "{}").
	HashTag shard.HashTag
	// Health is the ejection policy.
	Health shard.HealthConfig
	// ProbeInterval is how often ejected shards are looked at; default
	// 100ms.
	ProbeInterval time.Duration
	// Pool is the template for the default backends: a Pool per server
	// with Pool.Addr set to the server's address.
	Pool PoolConfig
	// NewBackend, when set, builds shard i's backend instead of a Pool
	// (e.g. an in-process memory store). It must report I/O failures
	// through hooks if it can fail at all.
	NewBackend func(i int, s shard.Server, hooks BackendHooks) (Backend, error)
	// Logger receives ejection and re-admission events; default
	// slog.Default().
	Logger *slog.Logger
}

// Router maps keys to shards and their backends. It is safe for concurrent
// use; Locate never takes a lock.
type Router struct {
	tag      shard.HashTag
	m        *shard.Membership
	backends []Backend
	stats    []shardCounters
	lat      []latencyHist // per shard; its count is the calls finished
	log      *slog.Logger
	wg       sync.WaitGroup
	cancel   context.CancelFunc
	once     sync.Once
}

type shardCounters struct {
	requests  atomic.Uint64
	errors    atomic.Uint64
	timeouts  atomic.Uint64
	fragments atomic.Uint64 // sub-requests of multi-key requests split over shards
	_         [32]byte      // keep shards on separate cache lines
}

// NewRouter builds the shard membership and a backend per shard.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("proxy: router needs at least one server")
	}
	r := &Router{tag: cfg.HashTag, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.backends = make([]Backend, len(cfg.Servers))
	r.stats = make([]shardCounters, len(cfg.Servers))
	r.lat = make([]latencyHist, len(cfg.Servers))
	m, err := shard.NewMembership(shard.MembershipConfig{
		Servers:       cfg.Servers,
		Distribution:  cfg.Distribution,
		Hash:          cfg.Hash,
		Health:        cfg.Health,
		ProbeInterval: cfg.ProbeInterval,
		Probe: func(ctx context.Context, i int) error {
			if p, ok := r.backends[i].(Prober); ok {
				return p.Probe(ctx)
			}
			return nil
		},
		OnChange: func(i int, live bool) {
			if live {
				r.log.Info("mcproxy: shard re-admitted after a good probe", "shard", i, "addr", cfg.Servers[i].Addr)
			} else {
				r.log.Warn("mcproxy: shard ejected", "shard", i, "addr", cfg.Servers[i].Addr)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	r.m = m
	for i, s := range cfg.Servers {
		i := i
		hooks := BackendHooks{
			OnFailure: func(now time.Time, err error) { m.Observe(i, now, err) },
			OnRecover: func(now time.Time) { m.Observe(i, now, nil) },
		}
		var b Backend
		if cfg.NewBackend != nil {
			b, err = cfg.NewBackend(i, s, hooks)
		} else {
			pc := cfg.Pool
			pc.Addr = s.Addr
			pc.OnFailure, pc.OnRecover = hooks.OnFailure, hooks.OnRecover
			b, err = NewPool(pc)
		}
		if err != nil {
			r.closeBackends()
			return nil, fmt.Errorf("proxy: shard %d (%s): %w", i, s.Addr, err)
		}
		r.backends[i] = b
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go func() { defer r.wg.Done(); m.Run(ctx) }()
	return r, nil
}

// Locate returns the index of the live shard that owns key (after hash tag
// extraction), or -1 when every shard is ejected.
func (r *Router) Locate(key []byte) int { return r.m.Locate(r.tag.Extract(key)) }

// Len is the number of shards.
func (r *Router) Len() int { return len(r.backends) }

// Membership exposes shard health and placement.
func (r *Router) Membership() *shard.Membership { return r.m }

// do sends c to shard i. A call carrying its own sub-request (c.Req ==
// &c.req: a multi-key request split over shards) counts as a fragment.
func (r *Router) do(i int, c *Call) {
	c.shard = i
	c.router = r
	st := &r.stats[i]
	st.requests.Add(1)
	if c.Req == &c.req {
		st.fragments.Add(1)
	}
	r.backends[i].Do(c)
}

// finished accounts a call's outcome and latency (from c.Start); r must be
// the Router that sent c (c.router).
func (r *Router) finished(c *Call) {
	if c.Err != nil {
		r.stats[c.shard].errors.Add(1)
		if errors.Is(c.Err, ErrTimeout) {
			r.stats[c.shard].timeouts.Add(1)
		}
	}
	r.lat[c.shard].observe(time.Since(c.Start))
}

// Close stops the probe loop and closes every backend.
func (r *Router) Close() error {
	r.once.Do(func() {
		r.cancel()
		r.wg.Wait()
		r.closeBackends()
	})
	return nil
}

func (r *Router) closeBackends() {
	for _, b := range r.backends {
		if b != nil {
			_ = b.Close()
		}
	}
}

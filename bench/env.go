package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// EnvConfig configures NewEnv. Zero means default.
type EnvConfig struct {
	// Dir holds binaries and logs; default a new temporary directory,
	// removed by Close.
	Dir string
	// Edge builds cmd/edge too; without it (or when it does not build),
	// PoPs run in-process workers.
	Edge bool
	// Log receives one line per step ("building mcproxy", "launching …");
	// default io.Discard.
	Log io.Writer
	// Store picks the shards of every PoP; default StoreAuto.
	Store StoreKind
	// Bins, when set, are used as they are instead of building (tests
	// build once for many environments).
	Bins *Binaries
}

// Env is a benchmark environment: built binaries, an upstream, and the PoPs
// launched in it. Close stops everything.
type Env struct {
	Dir      string
	Bins     Binaries
	upstream *upstreamServer
	// EdgeErr says why edge workers are unavailable (nil when built).
	EdgeErr error
	// ProxyErr says why mcproxy is unavailable (nil when built).
	ProxyErr error
	Store    StoreKind
	log      io.Writer
	tmp      bool
	mu       sync.Mutex
	pops     []*PoP
}

// NewEnv builds mcproxy (and edge when asked) from the module and starts
// the upstream. A command that fails to build is recorded (ProxyErr,
// EdgeErr) rather than fatal: callers fall back (in-process workers,
// shards without a proxy) and say so.
func NewEnv(ctx context.Context, cfg EnvConfig) (*Env, error) {
	e := &Env{Dir: cfg.Dir, log: cfg.Log, Store: cfg.Store}
	if e.log == nil {
		e.log = io.Discard
	}
	if e.Dir == "" {
		d, err := os.MkdirTemp("", "popbench-")
		if err != nil {
			return nil, err
		}
		e.Dir, e.tmp = d, true
	} else if err := os.MkdirAll(e.Dir, 0o755); err != nil {
		return nil, err
	}
	if cfg.Bins != nil {
		e.Bins = *cfg.Bins
		if e.Bins.MCProxy == "" {
			e.ProxyErr = fmt.Errorf("%w: mcproxy", procs.ErrNotBuilt)
		}
		if cfg.Edge && e.Bins.Edge == "" {
			e.EdgeErr = fmt.Errorf("%w: edge", procs.ErrNotBuilt)
		}
		if !cfg.Edge {
			e.Bins.Edge = ""
		}
	} else if err := e.build(ctx, cfg.Edge); err != nil {
		return nil, err
	}
	if e.Store == StoreAuto {
		e.Store = StoreEmbedded
		if procs.MemcachedInstalled() {
			e.Store = StoreMemcached
		}
	}
	if e.Store == StoreEmbedded && e.ProxyErr != nil {
		e.Close()
		return nil, fmt.Errorf("bench: no memcached installed and mcproxy does not build: %w", e.ProxyErr)
	}
	u, err := startUpstream()
	if err != nil {
		e.Close()
		return nil, err
	}
	e.upstream = u
	return e, nil
}

// build compiles mcproxy (and edge) into e.Dir, recording failures.
func (e *Env) build(ctx context.Context, edge bool) error {
	e.Logf("building mcproxy from source (go build ./cmd/mcproxy)")
	if bins, err := procs.Build(ctx, e.Dir, "mcproxy"); err == nil {
		e.Bins.MCProxy = bins["mcproxy"]
	} else {
		e.ProxyErr = err
		e.Logf("mcproxy unavailable: %v", firstLine(err))
	}
	if edge {
		e.Logf("building edge from source (go build ./cmd/edge)")
		if bins, err := procs.Build(ctx, e.Dir, "edge"); err == nil {
			e.Bins.Edge = bins["edge"]
		} else {
			e.EdgeErr = err
			e.Logf("edge unavailable, in-process workers instead: %v", firstLine(err))
		}
	}
	if ctx.Err() != nil {
		e.Close()
		return ctx.Err()
	}
	return nil
}

func firstLine(err error) string {
	s := err.Error()
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}

// Logf writes one status line.
func (e *Env) Logf(format string, args ...any) { fmt.Fprintf(e.log, "popbench: "+format+"\n", args...) }

// HasEdge reports whether edge workers can be launched.
func (e *Env) HasEdge() bool { return e.Bins.Edge != "" }

// Launch starts a PoP in the environment. Without mcproxy the PoP has no
// proxy (workers use the shards directly); without edge, Edges is forced
// to 0. It logs what runs.
func (e *Env) Launch(ctx context.Context, cfg PoPConfig) (*PoP, error) {
	cfg.Dir, cfg.Bins, cfg.Store = e.Dir, e.Bins, e.Store
	if cfg.Upstream == "" && e.upstream != nil {
		cfg.Upstream = e.upstream.URL
	}
	if !e.HasEdge() {
		cfg.Edges = 0
	}
	if e.Bins.MCProxy == "" {
		cfg.Proxies = -1
	}
	p, err := launchPoP(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.pops = append(e.pops, p)
	e.mu.Unlock()
	e.Logf("launched %s", p.Describe())
	return p, nil
}

// Workers returns a Target over the PoP's workers: its edges over HTTP, or
// n in-process workers (default 4) when it has none. routes configure the
// in-process limiters (edges use the PoP's policy).
func (e *Env) Workers(p *PoP, routes []Route, n, conns int, cfg InprocConfig) (Target, *Inproc, error) {
	if len(p.Edges) > 0 {
		return NewHTTPTarget(p.EdgeURLs(), conns), nil, nil
	}
	cfg.Servers, cfg.Direct = p.WorkerServers()
	if cfg.Workers == 0 {
		cfg.Workers = n
	}
	in, err := NewInproc(routes, cfg)
	if err != nil {
		return nil, nil, err
	}
	return in, in, nil
}

// Close stops every PoP, the upstream, and removes a temporary Dir.
func (e *Env) Close() {
	e.mu.Lock()
	pops := e.pops
	e.pops = nil
	e.mu.Unlock()
	for _, p := range pops {
		p.close()
	}
	if e.upstream != nil {
		_ = e.upstream.Close()
	}
	if e.tmp {
		_ = os.RemoveAll(e.Dir)
	}
}

// ErrNoPoP is returned by scenarios that need something the checkout cannot
// build.
var ErrNoPoP = errors.New("bench: scenario needs a component that is not available")

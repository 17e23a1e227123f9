// Package proxycmp is popbench proxy: closed-loop memcached load through
// mcproxy, nutcracker or memcached itself, the mix-by-mix comparison of
// the three, and the cost of idle client connections.
package proxycmp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/bench"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// Proxy load mixes.
const (
	// MixIncr is limiter traffic: "incr key 1", and "add key 0 0 1" when
	// the key is NOT_FOUND (then "incr" again if the add lost a race), one
	// logical operation timed as a whole: every success counts exactly 1.
	mixIncr = "incr"
	// MixGetSet is 90% "get key" and 10% "set key" with a 16-byte value.
	mixGetSet = "getset"
	// MixMGet is "get k1 k2 k3 k4": four random keys, usually on
	// different shards behind a proxy.
	mixMGet = "mget"
	// mixGet is "get key" of a preloaded key; mixSet "set key" with a
	// 16-byte value.
	mixGet = "get"
	mixSet = "set"
)

// knownMix reports whether mix is one RunProxyLoad drives.
func knownMix(mix string) bool {
	switch mix {
	case mixIncr, mixGetSet, mixMGet, mixGet, mixSet:
		return true
	}
	return false
}

// ErrProxyLoad reports a bad ProxyLoadConfig.
var errProxyLoad = errors.New("bench: proxy load")

// ProxyLoadConfig configures RunProxyLoad. Zero means default.
type ProxyLoadConfig struct {
	// Addr is the memcached-protocol TCP address to drive (required).
	Addr string
	// Mix is MixIncr, MixGetSet or MixMGet; default MixIncr.
	Mix string
	// Conns is the number of closed-loop connections, each with one
	// request in flight; default 64.
	Conns int
	// Duration is the timed phase; default 10s.
	Duration time.Duration
	// Keys is the size of the key space, drawn uniformly; default 10000.
	Keys int
	// KeyPrefix starts every key; default "pb:<mix>:" ("pb:getset:" for
	// mget), so incr counters never meet getset's non-numeric values.
	KeyPrefix string
	// Seed seeds the per-connection key and operation choices; default 1.
	Seed uint64
	// Timeout bounds a stalled request: a reply later than the end of the
	// timed phase plus Timeout is an error; default 2s.
	Timeout time.Duration
	// NoPreload skips setting every key once before the timed phase
	// (done for getset and mget so that gets hit).
	NoPreload bool
	// CPUPids are processes whose CPU time (utime+stime from /proc) is
	// measured over the timed phase, e.g. the proxy under test.
	CPUPids []int
	// SyscallPids are processes whose system calls and context switches
	// are counted over the timed phase (perf stat, attached by pid: the
	// result's Syscalls and Switches, in the same order). Without perf the
	// run fails.
	SyscallPids []int
}

func (c ProxyLoadConfig) mix() string { return orDefault(c.Mix, mixIncr) }
func (c ProxyLoadConfig) conns() int  { return positiveOr(c.Conns, 64) }
func (c ProxyLoadConfig) keys() int   { return positiveOr(c.Keys, 10000) }
func (c ProxyLoadConfig) keyPrefix() string {
	switch {
	case c.KeyPrefix != "":
		return c.KeyPrefix
	case c.mix() == mixMGet:
		return "pb:" + mixGetSet + ":" // read what getset writes
	}
	return "pb:" + c.mix() + ":"
}
func (c ProxyLoadConfig) duration() time.Duration {
	if c.Duration > 0 {
		return c.Duration
	}
	return 10 * time.Second
}
func (c ProxyLoadConfig) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 2 * time.Second
}
func (c ProxyLoadConfig) seed() uint64 {
	if c.Seed != 0 {
		return c.Seed
	}
	return 1
}

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

func positiveOr(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// ProxyLoadResult is the outcome of one timed run.
type ProxyLoadResult struct {
	// System labels the target in comparisons ("nutcracker", ...).
	System string `json:"system,omitempty"`
	// Round is the comparison round, from 1.
	Round int    `json:"round,omitempty"`
	Addr  string `json:"addr"`
	Mix   string `json:"mix"`
	Conns int    `json:"conns"`
	// Seconds is the measured wall time of the timed phase.
	Seconds float64 `json:"seconds"`
	// Ops counts operations answered as expected; Errors the others
	// (error replies, unexpected replies, I/O errors, timeouts).
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// Hits and Misses count keys found and not found by gets.
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// Latency is over every successful operation.
	Latency bench.Summary `json:"latency"`
	// CPUSeconds is the CPU time of each of ProxyLoadConfig.CPUPids over
	// the timed phase, in the same order; ClientCPUSeconds the driver's.
	CPUSeconds []float64 `json:"cpu_seconds,omitempty"`
	// Syscalls and Switches are the system calls and context switches of
	// each of ProxyLoadConfig.SyscallPids over the timed phase.
	Syscalls         []float64 `json:"syscalls,omitempty"`
	Switches         []float64 `json:"context_switches,omitempty"`
	ClientCPUSeconds float64   `json:"client_cpu_seconds"`
	// FirstError describes the first error seen, if any.
	FirstError string `json:"first_error,omitempty"`

	hist *bench.Latency
}

// CPUPerMillion returns CPU seconds per million operations for
// CPUSeconds[i], or 0 without operations.
func (r *ProxyLoadResult) cpuPerMillion(i int) float64 {
	if r.Ops == 0 || i >= len(r.CPUSeconds) {
		return 0
	}
	return r.CPUSeconds[i] / float64(r.Ops) * 1e6
}

// RunProxyLoad opens cfg.Conns connections to cfg.Addr, preloads the key
// space when the mix reads, then drives the mix for cfg.Duration with one
// request in flight per connection and returns what it measured. The load
// ends early when ctx ends. An error means the run could not be made (bad
// config, no connection); failures during the run are counted in Errors.
func RunProxyLoad(ctx context.Context, cfg ProxyLoadConfig) (*ProxyLoadResult, error) {
	mix := cfg.mix()
	if !knownMix(mix) {
		return nil, fmt.Errorf("%w: unknown mix %q (want incr, get, set, getset or mget)", errProxyLoad, mix)
	}
	if cfg.Addr == "" {
		return nil, fmt.Errorf("%w: no address", errProxyLoad)
	}
	if mix != mixIncr && !cfg.NoPreload {
		if err := preloadKeys(ctx, cfg); err != nil {
			return nil, err
		}
	}
	workers := make([]*loadConn, cfg.conns())
	for i := range workers {
		c, err := net.DialTimeout("tcp", cfg.Addr, cfg.timeout())
		if err != nil {
			for _, w := range workers[:i] {
				w.close()
			}
			return nil, fmt.Errorf("%w: dial %s: %v", errProxyLoad, cfg.Addr, err)
		}
		workers[i] = newLoadConn(c, cfg, uint64(i))
	}

	counters, perfDir, err := startSysCounters(cfg.SyscallPids)
	if err != nil {
		for _, w := range workers {
			w.close()
		}
		return nil, err
	}
	if perfDir != "" {
		defer os.RemoveAll(perfDir)
	}
	if err := counters.enable(); err != nil {
		_, _, _ = counters.stop()
		for _, w := range workers {
			w.close()
		}
		return nil, err
	}
	var stop atomic.Bool
	end := time.Now().Add(cfg.duration())
	timer := time.AfterFunc(cfg.duration(), func() { stop.Store(true) })
	defer timer.Stop()
	unwatch := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer unwatch()

	cpuBefore := make([]float64, len(cfg.CPUPids))
	for i, pid := range cfg.CPUPids {
		cpuBefore[i], _ = procs.CPUSeconds(pid)
	}
	clientBefore := selfCPUSeconds()
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(mix, &stop, end.Add(cfg.timeout()))
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	syscalls, switches, serr := counters.stop()
	res := &ProxyLoadResult{
		Addr: cfg.Addr, Mix: mix, Conns: cfg.conns(), Seconds: elapsed.Seconds(),
		ClientCPUSeconds: selfCPUSeconds() - clientBefore,
		hist:             bench.NewLatency(),
	}
	for i, pid := range cfg.CPUPids {
		after, err := procs.CPUSeconds(pid)
		if err != nil {
			after = cpuBefore[i]
		}
		res.CPUSeconds = append(res.CPUSeconds, after-cpuBefore[i])
	}
	for _, w := range workers {
		w.close()
		res.Ops += w.ops
		res.Errors += w.errs
		res.Hits += w.hits
		res.Misses += w.misses
		res.hist.Merge(w.hist)
		if res.FirstError == "" && w.firstErr != nil {
			res.FirstError = w.firstErr.Error()
		}
	}
	if serr != nil {
		return nil, serr
	}
	res.Syscalls, res.Switches = syscalls, switches
	res.OpsPerSec = float64(res.Ops) / res.Seconds
	res.Latency = res.hist.Summary()
	return res, nil
}

// preloadKeys sets every key of the space once, 100 pipelined sets at a
// time on one connection.
func preloadKeys(ctx context.Context, cfg ProxyLoadConfig) error {
	c, err := net.DialTimeout("tcp", cfg.Addr, cfg.timeout())
	if err != nil {
		return fmt.Errorf("%w: preload: dial %s: %v", errProxyLoad, cfg.Addr, err)
	}
	defer c.Close()
	w := newLoadConn(c, cfg, 0)
	for lo := 0; lo < cfg.keys(); lo += 100 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = c.SetDeadline(time.Now().Add(cfg.timeout()))
		hi := min(lo+100, cfg.keys())
		for k := lo; k < hi; k++ {
			w.writeSet(uint64(k))
		}
		if err := w.w.Flush(); err != nil {
			return fmt.Errorf("%w: preload: %v", errProxyLoad, err)
		}
		for k := lo; k < hi; k++ {
			line, err := w.r.ReadSlice('\n')
			if err != nil {
				return fmt.Errorf("%w: preload: %v", errProxyLoad, err)
			}
			if !bytes.Equal(line, replyStored) {
				return fmt.Errorf("%w: preload: set answered %q", errProxyLoad, line)
			}
		}
	}
	return nil
}

package rlsbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// Config configures Run. Zero means default.
type Config struct {
	// Targets are the gRPC addresses driven (client i uses target i mod
	// len); none: a launched PoP's, and the peer's.
	Targets []string
	// Clients is the number of concurrent closed-loop callers; default 64.
	// They share Conns connections per target (HTTP/2 streams).
	Clients int
	// Conns is the gRPC connections per target; default 4.
	Conns int
	// Duration of the timed phase; default 10s.
	Duration time.Duration
	// Domain and Key name the descriptors sent: each request carries
	// Descriptors descriptors {Key: value}, the values Zipf-distributed
	// over Keys values (each client cycles through rlsRing requests drawn
	// before the timed phase); defaults "bench", "user", 3, 10000.
	Domain, Key string
	Descriptors int
	Keys        uint64
	// ZipfS is the Zipf exponent (> 1); default 1.1.
	ZipfS float64
	// Seed seeds the value choices; default 1.
	Seed uint64

	// pids are the server-side processes charged with a run's CPU, by
	// group name ("rls", "mcproxy", "memcached"; Result.CPU and
	// ServerCPU); set by Run for launched processes, none: not measured.
	pids map[string][]int

	// Dir keeps configs and logs; default a temporary directory, removed.
	Dir string
	// RLS is the number of rls processes of the launched PoP; default 4.
	RLS int
	// RLSBin is the rls binary; default go build ./cmd/rls.
	RLSBin string
	// RLSArgs are extra rls flags.
	RLSArgs []string
	// Store is the launched PoP's store: bench.StoreMemcached (3 shards
	// behind mcproxy, the default) or bench.StoreRedis (a Redis Cluster).
	Store bench.StoreKind
	// Peer is an envoyproxy/ratelimit binary run beside rls over the same
	// store; "" runs none.
	Peer string
	// Rounds is the number of interleaved rls, peer rounds with Peer;
	// default 1.
	Rounds int
	// Limit is requests_per_unit (per minute) of the launched config's
	// descriptor; default 1000000.
	Limit int
}

// Run runs the load on cfg.Targets when given, else on a launched
// PoP of rls processes (rounds alternating with the peer when cfg.Peer is
// set), and returns the runs (JSON: an array of them; shown as a table,
// then each round's ratios).
func Run(ctx context.Context, cfg Config) (bench.Result, error) {
	load := cfg
	if len(load.Targets) > 0 {
		r, err := runLoad(ctx, load)
		if err != nil {
			return nil, err
		}
		return results{r}, nil
	}
	dir, done, err := bench.WorkDir(cfg.Dir, "popbench-rls-")
	if err != nil {
		return nil, err
	}
	defer done()
	launched, peer, err := launch(ctx, cfg, dir)
	if launched != nil {
		defer launched.Close()
	}
	if peer != nil {
		defer peer.Kill()
	}
	if err != nil {
		return nil, err
	}
	rounds := 1
	if peer != nil {
		rounds = max(cfg.Rounds, 1)
	}
	var rs results
	for range rounds {
		load.Targets, load.pids = launched.GRPCAddrs(), launched.PidGroups()
		r, err := runLoad(ctx, load)
		if err != nil {
			return nil, err
		}
		over, peerStore := "mcproxy", "memcache"
		if launched.Redis != nil {
			over, peerStore = "Redis Cluster", "Redis Cluster"
		}
		r.Target = fmt.Sprintf("rls ×%d over %s", len(launched.RLS), over)
		rs = append(rs, r)
		if peer == nil {
			continue
		}
		stores := launched.PidGroups() // the peer is charged with the same store processes
		load.Targets, load.pids = []string{peer.Addr}, map[string][]int{"memcached": stores["memcached"], "redis": stores["redis"], "ratelimit": {peer.Pid()}}
		if r, err = runLoad(ctx, load); err != nil {
			return nil, err
		}
		r.Target = "envoyproxy/ratelimit (" + peerStore + ")"
		rs = append(rs, r)
	}
	return rs, nil
}

// launch starts 3 memcached + mcproxy (bench.StoreRedis: a Redis Cluster
// of 3 masters + 3 replicas) + cfg.RLS rls processes with the bench
// config, and with cfg.Peer envoyproxy/ratelimit over the same memcached
// (or cluster).
func launch(ctx context.Context, cfg Config, dir string) (*bench.RLSPoP, *procs.Proc, error) {
	kind := cfg.Store
	if kind == "" {
		kind = bench.StoreMemcached
	}
	if kind != bench.StoreMemcached && kind != bench.StoreRedis {
		return nil, nil, fmt.Errorf("--store %q: want memcached or redis", kind)
	}
	bin, mcproxy, err := binaries(ctx, cfg.RLSBin, dir)
	if err != nil {
		return nil, nil, err
	}
	limit := cfg.Limit
	if limit <= 0 {
		limit = 1000000
	}
	// envoyproxy/ratelimit's layout: RUNTIME_ROOT/ratelimit/config.
	confDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := bench.WriteRLSConfig(confDir, "bench.yaml", bench.RLSBenchConfig(limit)); err != nil {
		return nil, nil, err
	}
	p, err := bench.LaunchRLSPoP(ctx, bench.RLSPoPConfig{
		PoP: bench.PoPConfig{Name: "rls", Dir: dir, Store: kind, Bins: bench.Binaries{MCProxy: mcproxy}},
		RLS: cfg.RLS, Bin: bin, ConfigDir: confDir, Args: cfg.RLSArgs,
	})
	if err != nil || cfg.Peer == "" {
		return p, nil, err
	}
	runtime, log := filepath.Join(dir, "runtime"), filepath.Join(dir, "peer.log")
	if p.Redis != nil {
		peer, err := bench.StartPeerRLS(ctx, cfg.Peer, runtime, log, bench.PeerRedisEnv(p.Redis.Addrs())...)
		return p, peer, err
	}
	var shards []string
	for _, s := range p.Shards {
		shards = append(shards, s.Addr)
	}
	peer, err := bench.StartPeerRLS(ctx, cfg.Peer, runtime, log, "BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT="+strings.Join(shards, ","))
	return p, peer, err
}

// binaries returns the rls binary (bin, or built into dir) and an mcproxy
// beside it (or built into dir).
func binaries(ctx context.Context, bin, dir string) (rls, mcproxy string, err error) {
	if bin == "" {
		bins, err := procs.Build(ctx, dir, "rls", "mcproxy")
		if err != nil {
			return "", "", err
		}
		bin = bins["rls"]
	}
	mcproxy = filepath.Join(filepath.Dir(bin), "mcproxy")
	if _, err := os.Stat(mcproxy); err != nil {
		bins, err := procs.Build(ctx, dir, "mcproxy")
		if err != nil {
			return "", "", err
		}
		mcproxy = bins["mcproxy"]
	}
	return bin, mcproxy, nil
}

// results are Run's runs, in order.
type results []*result

// Tables are the runs, one row each.
func (rs results) Tables() []*bench.Table {
	t := &bench.Table{Header: []string{"target", "server processes", "requests/s", "decisions/s", "p50 ms", "p99 ms", "p999 ms", "server µs/dec", "client µs/dec", "errors", "codes"}}
	for _, r := range rs {
		t.Add(r.Target, r.processList(), fmt.Sprintf("%.0f", r.PerSec), fmt.Sprintf("%.0f", r.DecisionsPerSec), fmt.Sprintf("%.2f", r.Latency.P50),
			fmt.Sprintf("%.2f", r.Latency.P99), fmt.Sprintf("%.2f", r.Latency.P999), fmt.Sprintf("%.1f", r.ServerCPU.CPUUS()),
			fmt.Sprintf("%.1f", r.Generator.CPUUS()), r.Errors, fmt.Sprint(r.Codes))
	}
	return []*bench.Table{t}
}

// WriteSummary writes, when runs alternate rls and the peer, their ratios
// round by round (the same machine's load at nearly the same time).
func (rs results) WriteSummary(w io.Writer) {
	for i := 0; i+1 < len(rs); i += 2 {
		a, b := rs[i], rs[i+1]
		if !strings.HasPrefix(b.Target, "envoyproxy/ratelimit") || b.DecisionsPerSec == 0 || a.Latency.P99 == 0 {
			return
		}
		fmt.Fprintf(w, "round %d: %s / %s: %.2f× the decisions/s, p99 %.2f× (%.1f against %.1f ms)", i/2+1, a.Target, b.Target,
			a.DecisionsPerSec/b.DecisionsPerSec, a.Latency.P99/b.Latency.P99, a.Latency.P99, b.Latency.P99)
		own, peerOwn, store, peerStore := a.CPU["rls"].CPUUS(), b.CPU["ratelimit"].CPUUS(), storeCPU(a), storeCPU(b)
		if own > 0 && peerOwn > 0 {
			fmt.Fprintf(w, "; the service process alone %.2f× the CPU per decision (%.1f against %.1f µs; the store's processes %.1f against %.1f µs)",
				own/peerOwn, own, peerOwn, store, peerStore)
		}
		fmt.Fprintln(w)
	}
}

// storeCPU is the CPU per decision of r's store processes (every group
// but the services rls and ratelimit).
func storeCPU(r *result) float64 {
	var us float64
	for g, c := range r.CPU {
		if g != "rls" && g != "ratelimit" {
			us += c.CPUUS()
		}
	}
	return us
}

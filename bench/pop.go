package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// StoreKind chooses what the shards of a PoP are.
type StoreKind string

const (
	// StoreAuto uses memcached when installed, else embedded shards.
	StoreAuto StoreKind = ""
	// StoreMemcached runs every shard as a real memcached process.
	StoreMemcached StoreKind = "memcached"
	// StoreEmbedded runs every shard as `mcproxy --embedded 1`: mcproxy's
	// in-process memory shard behind its own port, for machines without
	// memcached.
	StoreEmbedded StoreKind = "embedded"
	// StoreRedis runs a Redis Cluster (3 masters + 3 replicas, package
	// counter/redis) instead of shards and proxies: edges get
	// --store redis://…, in-process workers count in Lua scripts.
	StoreRedis StoreKind = "redis"
)

// Binaries are the executables a PoP runs, built from this module.
type Binaries struct {
	// MCProxy is the path of cmd/mcproxy; required.
	MCProxy string
	// Edge is the path of cmd/edge; required when the PoP has edge workers.
	Edge string
}

// PoPConfig describes one PoP. Zero means default for every field.
type PoPConfig struct {
	// Name labels the PoP; default "pop".
	Name string
	// Shards is the number of store shards; default 3.
	Shards int
	// Proxies is the number of mcproxy processes; default 1. Edge worker i
	// talks to proxy i mod Proxies. Negative means none: workers talk to
	// the shards directly (gomemcache's own key hashing; real memcached
	// only).
	Proxies int
	// Edges is the number of `edge` worker processes; default 0 (the
	// benchmark then drives the PoP with in-process workers).
	Edges int
	// WorkersPerPoP is passed to edges as --workers-per-pop; default Edges
	// (or 4 when Edges is 0).
	WorkersPerPoP int
	// Store picks memcached or embedded shards; default StoreAuto.
	Store StoreKind
	// ShardMemoryMB is each memcached shard's -m; default memcached's 64.
	ShardMemoryMB int
	// ProxyArgs are extra mcproxy flags (e.g. --auto-eject).
	ProxyArgs []string
	// ProxyPool, when not "", has every mcproxy read a Twemproxy YAML
	// pool the PoP writes instead of --shard flags: these pool lines
	// (e.g. "timeout: 300"; not listen or servers, which the PoP fills
	// in), so AddShard and RemoveShard can change its shards by SIGHUP.
	ProxyPool string
	// EdgeArgs are extra edge flags.
	EdgeArgs []string
	// Policy is the policy file content edges load; required with Edges.
	Policy []byte
	// Upstream is the URL edges forward admitted requests to; required
	// with Edges (see StartUpstream).
	Upstream string
	// ShardDelay, when positive, puts a Relay with this one-way delay
	// between every proxy and its shards: a store in another region.
	ShardDelay time.Duration
	// StoreDelay, when positive, puts a Relay with this one-way delay
	// between the workers and every proxy: the whole store in another
	// region (the "central store" of the latency paradox).
	StoreDelay time.Duration
	// RelayShards puts a Relay with no delay in front of every shard even
	// without ShardDelay, so a scenario can slow one shard later.
	RelayShards bool
	// Dir holds logs and the policy file; required.
	Dir string
	// Bins are the executables; required.
	Bins Binaries
}

func (c PoPConfig) withDefaults() PoPConfig {
	if c.Name == "" {
		c.Name = "pop"
	}
	defaultTo(&c.Shards, 3)
	if c.Proxies == 0 {
		c.Proxies = 1
	}
	if c.WorkersPerPoP <= 0 {
		c.WorkersPerPoP = c.Edges
		if c.WorkersPerPoP == 0 {
			c.WorkersPerPoP = 4
		}
	}
	if c.Store == StoreAuto {
		c.Store = StoreEmbedded
		if procs.MemcachedInstalled() {
			c.Store = StoreMemcached
		}
	}
	return c
}

// shardProc is one store shard of a PoP: a memcached process or an embedded
// mcproxy shard. Addr is where proxies reach it (a relay when the PoP has
// ShardDelay or RelayShards).
type shardProc struct {
	Addr   string
	Direct string // the process's own address
	Relay  *relay // nil without relays
	mc     *procs.Memcached
	proc   *procs.Proc
}

// Kill ends the shard process abruptly.
func (s *shardProc) Kill() {
	if s.mc != nil {
		s.mc.Stop()
		return
	}
	s.proc.Kill()
}

// Pause hangs the shard (SIGSTOP) and returns once the process is
// stopped.
func (s *shardProc) Pause() error {
	var err error
	if s.mc != nil {
		err = s.mc.Pause()
	} else {
		err = s.proc.Pause()
	}
	if err != nil {
		return err
	}
	return procs.WaitStopped(s.Pid(), 2*time.Second)
}

// Resume undoes Pause.
func (s *shardProc) Resume() error {
	if s.mc != nil {
		return s.mc.Resume()
	}
	return s.proc.Resume()
}

// Restart starts a killed shard again on the same port (empty).
func (s *shardProc) Restart(ctx context.Context) error {
	if s.mc != nil {
		return s.mc.Restart(ctx)
	}
	return s.proc.Restart(ctx, func() error { return procs.Ping(s.Direct, 200*time.Millisecond) })
}

// Pid returns the shard's process id.
func (s *shardProc) Pid() int {
	if s.mc != nil {
		return s.mc.Pid()
	}
	return s.proc.Pid()
}

// edgeProc is one edge worker process.
type edgeProc struct {
	// URL is the worker's base URL, e.g. http://127.0.0.1:41234.
	URL string
	// Admin is its admin base URL (/metrics, /healthz, POST /reload).
	Admin string
	Proc  *procs.Proc
}

// PoP is a launched PoP. Close stops everything it started.
type PoP struct {
	Name    string
	Store   StoreKind
	Shards  []*shardProc
	Proxies []*procs.Proc
	Edges   []*edgeProc
	// PolicyFile is the path edges load (rewrite it and POST /reload).
	PolicyFile string
	// StoreRelays sit between workers and proxies (PoPConfig.StoreDelay).
	StoreRelays []*relay
	// Redis is the cluster of a StoreRedis PoP (nil otherwise).
	Redis     *procs.RedisCluster
	Config    PoPConfig
	closeOnce sync.Once
}

// StoreServers returns the memcached-protocol servers worker i talks to:
// its proxy, or every shard when the PoP has no proxy (direct = true).
func (p *PoP) storeServers(i int) (servers []string, direct bool) {
	if len(p.Proxies) == 0 {
		for _, s := range p.Shards {
			servers = append(servers, s.Addr)
		}
		return servers, true
	}
	if len(p.StoreRelays) > 0 {
		return []string{p.StoreRelays[i%len(p.StoreRelays)].Addr}, false
	}
	return []string{p.Proxies[i%len(p.Proxies)].Addr}, false
}

// WorkerServers returns the addresses in-process workers use: StoreServers
// of every worker (proxies or their relays), or every shard when direct;
// for a StoreRedis PoP, its RedisURL.
func (p *PoP) WorkerServers() (servers []string, direct bool) {
	if p.Redis != nil {
		return []string{p.redisURL()}, false // NewInproc's Redis workers
	}
	if len(p.Proxies) == 0 {
		return p.storeServers(0)
	}
	for i := range p.Proxies {
		s, _ := p.storeServers(i)
		servers = append(servers, s...)
	}
	return servers, false
}

// EdgeURLs returns the base URLs of the edge workers.
func (p *PoP) EdgeURLs() []string {
	out := make([]string, len(p.Edges))
	for i, e := range p.Edges {
		out[i] = e.URL
	}
	return out
}

// Describe says what runs, for the screen and the report.
func (p *PoP) Describe() string {
	workers := "in-process workers"
	if len(p.Edges) > 0 {
		workers = strconv.Itoa(len(p.Edges)) + " edge workers"
	}
	delay := ""
	if len(p.StoreRelays) > 0 {
		delay = fmt.Sprintf(", store %v away (round trip)", 2*p.StoreRelays[0].currentDelay())
	}
	return fmt.Sprintf("PoP %q: %d %s shards, %d mcproxy, %s%s", p.Name, len(p.Shards), p.Store, len(p.Proxies), workers, delay)
}

// LaunchPoP starts shards, proxies and edge workers on free loopback ports
// and waits until each answers. On error everything started is stopped.
func launchPoP(ctx context.Context, cfg PoPConfig) (pop *PoP, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	p := &PoP{Name: cfg.Name, Store: cfg.Store, Config: cfg}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if cfg.Store == StoreRedis {
		if err := p.startRedis(ctx); err != nil {
			return nil, err
		}
	} else if err := p.startShards(ctx); err != nil {
		return nil, err
	} else if err := p.startProxies(ctx); err != nil {
		return nil, err
	}
	if err := p.startEdges(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// check reports a configuration LaunchPoP cannot start (after defaults).
func (cfg PoPConfig) check() error {
	if cfg.Dir == "" {
		return errors.New("bench: PoPConfig needs Dir")
	}
	if cfg.Bins.MCProxy == "" && ((cfg.Proxies > 0 && cfg.Store != StoreRedis) || cfg.Store == StoreEmbedded) {
		return fmt.Errorf("%w: mcproxy is needed for proxies and embedded shards", procs.ErrNotBuilt)
	}
	if cfg.Edges > 0 && (cfg.Bins.Edge == "" || cfg.Upstream == "" || len(cfg.Policy) == 0) {
		return errors.New("bench: edge workers need Bins.Edge, Upstream and Policy")
	}
	if cfg.Store == StoreMemcached && !procs.MemcachedInstalled() {
		return procs.ErrNoMemcached
	}
	return nil
}

// logFile is the log path of the PoP's process name.
func (p *PoP) logFile(name string) string {
	return filepath.Join(p.Config.Dir, p.Config.Name+"-"+name+".log")
}

// startShards starts the shards (memcached or embedded mcproxy), each
// behind a relay when the configuration delays or relays shards.
func (p *PoP) startShards(ctx context.Context) error {
	for i := 0; i < p.Config.Shards; i++ {
		if _, err := p.startShard(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// startShard starts shard i and appends it to p.Shards.
func (p *PoP) startShard(ctx context.Context, i int) (*shardProc, error) {
	cfg := p.Config
	s := &shardProc{}
	if cfg.Store == StoreMemcached {
		m, err := procs.StartMemcached(ctx, procs.MemcachedConfig{Threads: 1, MemoryMB: cfg.ShardMemoryMB})
		if err != nil {
			return nil, err
		}
		s.mc, s.Direct = m, m.Addr
	} else {
		name := fmt.Sprintf("shard-%d", i)
		pr, err := procs.StartServing(ctx, name, cfg.Bins.MCProxy, p.logFile(name),
			func(addr string) []string { return []string{"--listen", addr, "--embedded", "1", "--admin", ""} },
			func(addr string) error { return procs.Ping(addr, 200*time.Millisecond) })
		if err != nil {
			return nil, err
		}
		s.proc, s.Direct = pr, pr.Addr
	}
	s.Addr = s.Direct
	p.Shards = append(p.Shards, s) // before the relay: Close must stop it
	if cfg.ShardDelay > 0 || cfg.RelayShards {
		r, err := startRelay(s.Direct, cfg.ShardDelay)
		if err != nil {
			return nil, err
		}
		s.Relay, s.Addr = r, r.Addr
	}
	return s, nil
}

// startProxies starts the mcproxies over every shard, and their store
// relays when the configuration delays the store.
func (p *PoP) startProxies(ctx context.Context) error {
	cfg := p.Config
	for i := 0; i < cfg.Proxies; i++ {
		name := fmt.Sprintf("mcproxy-%d", i)
		var werr error
		pr, err := procs.StartServing(ctx, name, cfg.Bins.MCProxy, p.logFile(name),
			func(addr string) []string {
				args := []string{"--listen", addr}
				if cfg.ProxyPool != "" {
					// The pool's listen address is in the file (a failed
					// write leaves no file: mcproxy exits, the start fails).
					werr = p.writeProxyConfig(i, addr)
					args = []string{"--config", p.proxyConfigPath(i), "--watch=false"}
				} else {
					for _, s := range p.Shards {
						args = append(args, "--shard", s.Addr)
					}
				}
				if !slices.Contains(cfg.ProxyArgs, "--admin") {
					// mcproxy's default admin address is fixed: two PoPs (or
					// two tests) on one host would collide on it.
					args = append(args, "--admin", "")
				}
				return append(args, cfg.ProxyArgs...)
			},
			func(addr string) error { return procs.Ping(addr, 200*time.Millisecond) })
		if err != nil {
			return errors.Join(werr, err)
		}
		p.Proxies = append(p.Proxies, pr)
	}
	if cfg.StoreDelay > 0 {
		for _, pr := range p.Proxies {
			r, err := startRelay(pr.Addr, cfg.StoreDelay)
			if err != nil {
				return err
			}
			p.StoreRelays = append(p.StoreRelays, r)
		}
	}
	return nil
}

// startEdges writes the policy file and starts the edge workers, each
// with its own admin listener and the store servers StoreServers gives it.
func (p *PoP) startEdges(ctx context.Context) error {
	cfg := p.Config
	if cfg.Edges == 0 {
		return nil
	}
	p.PolicyFile = filepath.Join(cfg.Dir, cfg.Name+"-policy.yml")
	if err := os.WriteFile(p.PolicyFile, cfg.Policy, 0o644); err != nil {
		return fmt.Errorf("bench: write policy: %w", err)
	}
	for i := 0; i < cfg.Edges; i++ {
		adminPort, err := procs.FreePort()
		if err != nil {
			return err
		}
		admin := "127.0.0.1:" + strconv.Itoa(adminPort)
		servers, _ := p.storeServers(i)
		name := fmt.Sprintf("edge-%d", i)
		pr, err := procs.StartServing(ctx, name, cfg.Bins.Edge, p.logFile(name),
			func(addr string) []string {
				args := []string{"--listen", addr, "--upstream", cfg.Upstream}
				args = append(args, p.storeArgs(servers)...)
				return append(append(args, "--policy", p.PolicyFile, "--admin", admin,
					"--workers-per-pop", strconv.Itoa(cfg.WorkersPerPoP)), cfg.EdgeArgs...)
			},
			func(addr string) error { return procs.HTTPUp("http://" + admin + "/healthz") })
		if err != nil {
			return err
		}
		p.Edges = append(p.Edges, &edgeProc{URL: "http://" + pr.Addr, Admin: "http://" + admin, Proc: pr})
	}
	return nil
}

// Pids returns the process ids of every process of the PoP (shards,
// proxies, edges), for CPU accounting.
func (p *PoP) allPids() []int {
	var out []int
	for _, s := range p.Shards {
		out = append(out, s.Pid())
	}
	for _, pr := range p.Proxies {
		out = append(out, pr.Pid())
	}
	for _, e := range p.Edges {
		out = append(out, e.Proc.Pid())
	}
	return append(out, p.redisPids()...)
}

// CPUSeconds sums the user+system CPU time of the PoP's processes
// (procs.CPUSeconds); processes that cannot be read are skipped.
func (p *PoP) cpuSeconds() float64 {
	var t float64
	for _, pid := range p.allPids() {
		if s, err := procs.CPUSeconds(pid); err == nil {
			t += s
		}
	}
	return t
}

// RestartProxy kills proxy i and starts it again with the same arguments.
func (p *PoP) RestartProxy(ctx context.Context, i int) error {
	pr := p.Proxies[i]
	return pr.Restart(ctx, func() error { return procs.Ping(pr.Addr, 200*time.Millisecond) })
}

// close stops edges, proxies, relays and shards. Safe to call twice.
func (p *PoP) close() {
	p.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, e := range p.Edges {
			wg.Add(1)
			go func() { defer wg.Done(); e.Proc.Stop(3 * time.Second) }()
		}
		wg.Wait()
		for _, r := range p.StoreRelays {
			_ = r.Close()
		}
		for _, pr := range p.Proxies {
			wg.Add(1)
			go func() { defer wg.Done(); pr.Stop(3 * time.Second) }()
		}
		wg.Wait()
		for _, s := range p.Shards {
			if s.Relay != nil {
				_ = s.Relay.Close()
			}
			s.Kill()
		}
		if p.Redis != nil {
			p.Redis.Stop()
		}
	})
}

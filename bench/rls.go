package bench

// A PoP of rls processes over mcproxy (or a Redis Cluster), and
// envoyproxy/ratelimit beside it: what bench/rlsbench and the rls tests
// point their gRPC clients at.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// RLSBenchConfig is the config file RLSLoadConfig's defaults hit: domain
// "bench", key "user" counted per value, limit per minute.
func RLSBenchConfig(perMinute int) string {
	return fmt.Sprintf("domain: bench\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: %d\n", perMinute)
}

// RLSPoPConfig describes a PoP of rls processes: LaunchPoP's shards and
// mcproxies (no edges), then RLS processes, process i over mcproxy i mod
// Proxies (with PoP.Store StoreRedis: all over the PoP's Redis Cluster,
// --store redis://…), all loading ConfigDir.
type RLSPoPConfig struct {
	PoP PoPConfig
	// RLS is the number of rls processes; default 4.
	RLS int
	// Bin is the cmd/rls executable; required.
	Bin string
	// ConfigDir is the config directory every rls loads; required.
	ConfigDir string
	// Args are extra rls flags.
	Args []string
}

// RLSPoP is a launched RLSPoPConfig. Close stops everything.
type RLSPoP struct {
	*PoP
	RLS []*rlsProc
}

// rlsProc is one rls process.
type rlsProc struct {
	GRPC, HTTP string // addresses
	Proc       *procs.Proc
}

// PidGroups are the PoP's processes by group: "memcached" (the shards),
// "redis" (every node of the PoP's Redis Cluster, replicas too: they
// apply every write), "mcproxy" and "rls" (RLSLoadConfig.Pids).
func (p *RLSPoP) PidGroups() map[string][]int {
	g := map[string][]int{}
	for _, s := range p.Shards {
		g["memcached"] = append(g["memcached"], s.Pid())
	}
	if p.Redis != nil {
		for _, n := range p.Redis.Nodes {
			g["redis"] = append(g["redis"], n.Pid())
		}
	}
	for _, pr := range p.Proxies {
		g["mcproxy"] = append(g["mcproxy"], pr.Pid())
	}
	for _, r := range p.RLS {
		g["rls"] = append(g["rls"], r.Proc.Pid())
	}
	return g
}

// GRPCAddrs are the rls processes' gRPC addresses.
func (p *RLSPoP) GRPCAddrs() []string {
	out := make([]string, len(p.RLS))
	for i, r := range p.RLS {
		out[i] = r.GRPC
	}
	return out
}

// Close stops the rls processes, then the PoP.
func (p *RLSPoP) Close() {
	for _, r := range p.RLS {
		r.Proc.Kill()
	}
	p.PoP.close()
}

// LaunchRLSPoP starts cfg's PoP and rls processes on free loopback ports
// and waits until each answers /healthcheck. On error everything started
// is stopped.
func LaunchRLSPoP(ctx context.Context, cfg RLSPoPConfig) (_ *RLSPoP, err error) {
	defaultTo(&cfg.RLS, 4)
	if cfg.Bin == "" || cfg.ConfigDir == "" {
		return nil, errors.New("bench: RLSPoPConfig needs Bin and ConfigDir")
	}
	cfg.PoP.Edges = 0
	pop, err := launchPoP(ctx, cfg.PoP)
	if err != nil {
		return nil, err
	}
	p := &RLSPoP{PoP: pop}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	for i := range cfg.RLS {
		port, err := procs.FreePort()
		if err != nil {
			return nil, err
		}
		httpAddr := "127.0.0.1:" + strconv.Itoa(port)
		servers, _ := pop.storeServers(i)
		name := fmt.Sprintf("rls-%d", i)
		pr, err := procs.StartServing(ctx, name, cfg.Bin, pop.logFile(name), func(addr string) []string {
			args := []string{"--grpc", addr, "--http", httpAddr, "--config-dir", cfg.ConfigDir, "--workers-per-pop", strconv.Itoa(cfg.RLS)}
			args = append(args, pop.storeArgs(servers)...)
			return append(args, cfg.Args...)
		}, func(string) error { return procs.HTTPOK("http://" + httpAddr + "/healthcheck") })
		if err != nil {
			return nil, err
		}
		p.RLS = append(p.RLS, &rlsProc{GRPC: pr.Addr, HTTP: httpAddr, Proc: pr})
	}
	return p, nil
}

// WriteRLSConfig writes body as dir/name, creating dir: the rls config
// directory of a PoP (rewrite it to reload every process).
func WriteRLSConfig(dir, name, body string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// StartPeerRLS starts envoyproxy/ratelimit's binary bin with its config
// under runtimeRoot/ratelimit/config, listening on free loopback ports
// (gRPC, HTTP, debug), statsd off, with the extra environment env (the
// backend: BACKEND_TYPE=memcache MEMCACHE_HOST_PORT=… or redis), and waits
// for its gRPC port. The returned process's Addr is its gRPC address.
func StartPeerRLS(ctx context.Context, bin, runtimeRoot, log string, env ...string) (*procs.Proc, error) {
	var ports [3]int
	for i := range ports {
		p, err := procs.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	args := append([]string{
		"USE_STATSD=false", "LOG_LEVEL=warn", "RUNTIME_ROOT=" + runtimeRoot, "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(ports[0]), "GRPC_PORT=" + strconv.Itoa(ports[1]), "DEBUG_PORT=" + strconv.Itoa(ports[2]),
	}, env...)
	pr, err := procs.StartProc("ratelimit", "/usr/bin/env", append(args, bin), log)
	if err != nil {
		return nil, err
	}
	pr.Addr = "127.0.0.1:" + strconv.Itoa(ports[1])
	// Its /healthcheck is no use here: with the memcache backend it stays
	// 500 (its Redis health component starts unhealthy and only Redis
	// marks it healthy). Ready is its gRPC port accepting.
	if err := pr.WaitReady(ctx, 15*time.Second, func() error {
		c, err := net.DialTimeout("tcp", pr.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		pr.Kill()
		b, _ := os.ReadFile(log)
		return nil, fmt.Errorf("bench: envoyproxy/ratelimit did not start: %w\n%s", err, b)
	}
	return pr, nil
}

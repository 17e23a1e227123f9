package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
)

// RunRedisCompare is `popbench load --store redis --peer BIN`: in one run,
// interleaved (A B C A B C …), the same closed loop (HTTP, cfg.Workers
// edges, fixed window) against
//
//   - poplimit over the Redis Cluster of env's PoP (edge --store redis://…),
//   - poplimit over memcached (3 shards behind mcproxy, the default model),
//   - envoyproxy/ratelimit (the binary peerBin, built from source) with its
//     Redis backend on the SAME cluster (REDIS_TYPE=cluster), driven
//     through its /json endpoint with one descriptor per identity.
//
// and, for the decision alone without HTTP, in-process workers over each
// store (…-inproc). Each side enforces cfg.Quantity per second per
// identity. Runs are named by side in the result's Algorithm column; PoP
// CPU counts the side's processes (edges, stores, the peer).
func RunRedisCompare(ctx context.Context, env *Env, cfg LoadConfig, peerBin string) (Result, error) {
	r, err := runRedisCompare(ctx, env, cfg, peerBin)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runRedisCompare is RunRedisCompare returning the report itself.
func runRedisCompare(ctx context.Context, env *Env, cfg LoadConfig, peerBin string) (*loadResult, error) {
	cfg = cfg.withDefaults()
	if env.Store != StoreRedis {
		return nil, errors.New("bench: --peer needs --store redis")
	}
	if !env.HasEdge() || env.Bins.MCProxy == "" {
		return nil, fmt.Errorf("%w: --peer runs edge and mcproxy: %v %v", ErrNoPoP, env.EdgeErr, env.ProxyErr)
	}
	if cfg.Window != time.Second {
		return nil, fmt.Errorf("bench: --peer compares per-second limits; --window %v", cfg.Window)
	}
	route := Route{Path: "/api", Quantity: cfg.Quantity, Window: cfg.Window}
	policy := PolicyYAML([]Route{route}, counter.FixedWindow, 1)
	pc := PoPConfig{Name: "redis", Edges: cfg.Workers, WorkersPerPoP: cfg.Workers, Policy: policy}
	rp, err := env.Launch(ctx, pc)
	if err != nil {
		return nil, err
	}
	mc := PoPConfig{Name: "memcached", Shards: 3, Proxies: 1, Edges: cfg.Workers, WorkersPerPoP: cfg.Workers, Policy: policy,
		Store: StoreMemcached, Dir: env.Dir, Bins: env.Bins, Upstream: env.upstream.URL}
	mp, err := launchPoP(ctx, mc)
	if err != nil {
		return nil, err
	}
	defer mp.close()
	peer, err := startPeer(ctx, peerBin, env.Dir, rp.Redis.Addrs(), cfg.Quantity)
	if err != nil {
		return nil, err
	}
	defer peer.Stop(3 * time.Second)
	res := &loadResult{Conns: cfg.Conns, Keys: cfg.Keys,
		Target: fmt.Sprintf("%d edges over a Redis Cluster (3 masters + 3 replicas) | %d edges over 3 memcached + mcproxy | envoyproxy/ratelimit on the same cluster, /json", cfg.Workers, cfg.Workers)}
	sides := []struct {
		name   string
		target func() (Target, error)
		pids   func() []int
	}{
		{"poplimit-redis", func() (Target, error) { return NewHTTPTarget(rp.EdgeURLs(), cfg.Conns), nil }, rp.allPids},
		{"poplimit-memcached", func() (Target, error) { return NewHTTPTarget(mp.EdgeURLs(), cfg.Conns), nil }, mp.allPids},
		{"envoy-ratelimit-redis", func() (Target, error) { return newPeerTarget(peer.Addr, cfg.Conns), nil }, func() []int { return append(rp.redisPids(), peer.Pid()) }},
		{"poplimit-redis-inproc", inproc(rp, route, cfg.Workers), rp.redisPids},
		{"poplimit-memcached-inproc", inproc(mp, route, cfg.Workers), func() []int { return mp.allPids()[:len(mp.Shards)+len(mp.Proxies)] }},
	}
	sums := map[string]*loadRun{}
	total := cfg.Rounds * len(sides)
	for round := 1; round <= cfg.Rounds; round++ {
		for si, side := range sides {
			env.Logf("load: %s round %d for %v", side.name, round, cfg.Duration)
			target, err := side.target()
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", side.name, err)
			}
			cpu0 := cpuOf(side.pids())
			done := (round-1)*len(sides) + si
			run := ClosedLoop(ctx, target, route, cfg, uint64(round*10+si), func(frac float64) {
				if cfg.Progress != nil {
					cfg.Progress(int(1000*(float64(done)+frac)), 1000*total)
				}
			})
			switch c := target.(type) {
			case interface{ Close() }:
				c.Close()
			case interface{ Close() error }:
				_ = c.Close()
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			run.Algorithm, run.Round = side.name, round
			if run.Decisions > 0 {
				run.cpu = cpuOf(side.pids()) - cpu0
				run.CPUPerM = run.cpu / float64(run.Decisions) * 1e6
			}
			res.add(sums, run)
		}
	}
	res.finish(cfg.Rounds)
	return res, nil
}

// inproc returns a maker of in-process workers over p's store (the
// decision alone, no HTTP), fixed window.
func inproc(p *PoP, route Route, workers int) func() (Target, error) {
	return func() (Target, error) {
		servers, direct := p.WorkerServers()
		return NewInproc([]Route{route}, InprocConfig{Servers: servers, Direct: direct, Workers: workers, Algorithm: counter.FixedWindow})
	}
}

// cpuOf sums the CPU seconds of pids (unreadable ones skipped).
func cpuOf(pids []int) float64 {
	var t float64
	for _, pid := range pids {
		if s, err := procs.CPUSeconds(pid); err == nil {
			t += s
		}
	}
	return t
}

// PeerRedisEnv is envoyproxy/ratelimit's environment for its Redis backend
// on the Redis Cluster of seed addrs: the settings its src/settings give
// for a cluster (REDIS_TYPE=cluster; a pipeline window is required in
// cluster mode, 150us the low end of the recommended 150-500us), a pool of
// 32 per node, and the descriptors of one request sent to their nodes in
// parallel (REDIS_CLUSTER_PIPELINE_PARALLELISM=0, bounded by the pool;
// its default 1 sends them one node after the other).
func PeerRedisEnv(addrs []string) []string {
	return []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=cluster", "REDIS_URL=" + strings.Join(addrs, ","),
		"REDIS_PIPELINE_WINDOW=150us", "REDIS_POOL_SIZE=32", "REDIS_CLUSTER_PIPELINE_PARALLELISM=0"}
}

// startPeer starts envoyproxy/ratelimit on free loopback ports with its
// Redis backend in cluster mode on addrs, one domain "poplimit" whose
// descriptor "user" allows quantity per second, and waits for /json.
func startPeer(ctx context.Context, bin, dir string, addrs []string, quantity int64) (*procs.Proc, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("bench: envoyproxy/ratelimit binary: %w", err)
	}
	root := filepath.Join(dir, "peer-runtime")
	conf := filepath.Join(root, "ratelimit", "config")
	if err := mkdir(conf); err != nil {
		return nil, err
	}
	yml := fmt.Sprintf("domain: poplimit\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: %d\n", quantity)
	if err := os.WriteFile(filepath.Join(conf, "poplimit.yaml"), []byte(yml), 0o644); err != nil {
		return nil, err
	}
	ports := make([]string, 3)
	for i := range ports {
		p, err := procs.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = strconv.Itoa(p)
	}
	// Stats to nowhere.
	envs := append([]string{"USE_STATSD=false", "LOG_LEVEL=warn", "HOST=127.0.0.1", "PORT=" + ports[0],
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + ports[1], "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + ports[2],
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false"},
		PeerRedisEnv(addrs)...)
	p, err := procs.StartProc("ratelimit", "/usr/bin/env", append(envs, bin), filepath.Join(dir, "peer-ratelimit.log"))
	if err != nil {
		return nil, err
	}
	p.Addr = net.JoinHostPort("127.0.0.1", ports[0])
	t := newPeerTarget(p.Addr, 1)
	defer t.Close()
	if err := p.WaitReady(ctx, 20*time.Second, func() error {
		if o := t.Do(ctx, 0, &Client{ID: "probe"}, nil); o == Failed {
			return errors.New("no answer on /json")
		}
		return nil
	}); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// peerTarget drives envoyproxy/ratelimit's /json endpoint: one request is
// one descriptor {user: client id} in domain poplimit; 200 admits, 429
// rejects.
type peerTarget struct {
	url    string
	client *http.Client
}

func newPeerTarget(addr string, conns int) *peerTarget {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 30 * time.Second,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
	return &peerTarget{url: "http://" + addr + "/json", client: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// Workers implements Target.
func (p *peerTarget) Workers() int { return 1 }

// Close releases idle connections.
func (p *peerTarget) Close() { p.client.CloseIdleConnections() }

// Do implements Target.
func (p *peerTarget) Do(ctx context.Context, _ int, c *Client, _ *Route) Outcome {
	body := `{"domain":"poplimit","descriptors":[{"entries":[{"key":"user","value":"` + c.ID + `"}]}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewBufferString(body))
	if err != nil {
		return Failed
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return Failed
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return Admitted
	case http.StatusTooManyRequests:
		return Rejected
	}
	return Failed
}

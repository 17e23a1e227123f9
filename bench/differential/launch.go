package differential

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/pop/rls"
	"github.com/poplimit/poplimit/pop/rls/conformance"
)

// Config configures RunSeeds. Zero means default.
type Config struct {
	// Seeds are the replays' seeds, each replayed once per store;
	// required.
	Seeds []uint64
	// Requests per replay; default 2000.
	Requests int
	// Stores are rls's stores compared, each as one rls process:
	// bench.StoreMemcached (over mcproxy) and bench.StoreRedis (a Redis
	// Cluster); default both.
	Stores []bench.StoreKind
	// RLSBin, MCProxyBin and PeerBin are cmd/rls, cmd/mcproxy and
	// envoyproxy/ratelimit; required.
	RLSBin, MCProxyBin, PeerBin string
	// Dir holds the config files and the processes' logs; required.
	Dir string
}

// RunSeeds generates every replay (a fresh run token each), writes their
// configs into one directory, starts one rls per store and one peer over
// a Redis Cluster (the Redis store's own, or one of its own without it;
// REDIS_TYPE=cluster), all loading that directory, and replays each seed
// against each store in turn. A config rls refuses is reported as an
// unexpected difference of its replay (class "config"); a config the peer
// refuses fails the run. It returns the report of every replay (tables of
// the counts, then each unexpected difference and the counts by class and
// deliberate difference) and the number of unexpected differences.
func RunSeeds(ctx context.Context, cfg Config) (rep bench.Result, unexpected int, err error) {
	rs, err := runSeeds(ctx, cfg)
	if err != nil {
		return nil, 0, err
	}
	for _, r := range rs {
		unexpected += r.Unexpected
	}
	return rs, unexpected, nil
}

// runSeeds is RunSeeds' replays.
func runSeeds(ctx context.Context, cfg Config) (results, error) {
	if len(cfg.Seeds) == 0 || cfg.RLSBin == "" || cfg.MCProxyBin == "" || cfg.PeerBin == "" || cfg.Dir == "" {
		return nil, errors.New("differential: Config needs Seeds, RLSBin, MCProxyBin, PeerBin and Dir")
	}
	if cfg.Requests <= 0 {
		cfg.Requests = 2000
	}
	if len(cfg.Stores) == 0 {
		cfg.Stores = []bench.StoreKind{bench.StoreMemcached, bench.StoreRedis}
	}
	root := filepath.Join(cfg.Dir, "runtime")
	confDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, err
	}
	type job struct {
		rp    *replay
		store bench.StoreKind
		res   *result
	}
	var jobs []*job
	for _, seed := range cfg.Seeds {
		for _, store := range cfg.Stores {
			rp := generate(seed, conformance.NewRun(), cfg.Requests)
			j := &job{rp: rp, store: store}
			files := map[string][]byte{}
			for name, body := range rp.files() {
				files[name] = []byte(body)
			}
			if _, err := rls.Parse(files, rls.Options{}); err != nil {
				j.res = &result{Seed: seed, Store: string(store), Run: rp.Run, Unexpected: 1, Classes: map[string]int{"config": 1},
					Differences: []difference{{Seed: seed, Store: string(store), Step: -1, Class: "config",
						Diffs: []diff{{Desc: -1, Field: "config", RLS: err.Error(), Peer: "loaded"}}}}}
			}
			for name, body := range files {
				if err := bench.WriteRLSConfig(confDir, name, string(body)); err != nil {
					return nil, err
				}
			}
			jobs = append(jobs, j)
		}
	}
	// Files rls refuses stay out of the directory rls loads; the peer
	// loads them all (and must).
	rlsDir := filepath.Join(cfg.Dir, "rls-config")
	for _, j := range jobs {
		if j.res != nil {
			continue
		}
		for name, body := range j.rp.files() {
			if err := bench.WriteRLSConfig(rlsDir, name, body); err != nil {
				return nil, err
			}
		}
	}
	env, err := launch(ctx, cfg, root, rlsDir)
	if env != nil {
		defer env.close()
	}
	if err != nil {
		return nil, err
	}
	var out []*result
	for _, j := range jobs {
		if j.res == nil {
			j.res, err = run(ctx, j.rp, string(j.store), env.rls[j.store], env.peer)
			if err != nil {
				return out, err
			}
		}
		out = append(out, j.res)
	}
	return out, nil
}

// env is the launched services.
type env struct {
	rls   map[bench.StoreKind]rlv3.RateLimitServiceClient
	peer  rlv3.RateLimitServiceClient
	stops []func()
}

func (e *env) close() {
	for _, f := range slices.Backward(e.stops) {
		f()
	}
}

func (e *env) client(addr string) (rlv3.RateLimitServiceClient, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	e.stops = append(e.stops, func() { cc.Close() })
	return rlv3.NewRateLimitServiceClient(cc), nil
}

// launch starts one rls per store on rlsDir and the peer on root's
// ratelimit/config; on error the caller still closes what started.
func launch(ctx context.Context, cfg Config, root, rlsDir string) (*env, error) {
	e := &env{rls: map[bench.StoreKind]rlv3.RateLimitServiceClient{}}
	var redis []string
	for _, store := range cfg.Stores {
		if store != bench.StoreMemcached && store != bench.StoreRedis {
			return e, fmt.Errorf("differential: store %q: want memcached or redis", store)
		}
		p, err := bench.LaunchRLSPoP(ctx, bench.RLSPoPConfig{
			PoP: bench.PoPConfig{Name: "diff-" + string(store), Dir: cfg.Dir, Store: store, Shards: 1,
				Bins: bench.Binaries{MCProxy: cfg.MCProxyBin}},
			RLS: 1, Bin: cfg.RLSBin, ConfigDir: rlsDir,
		})
		if err != nil {
			return e, fmt.Errorf("differential: rls over %s: %w", store, err)
		}
		e.stops = append(e.stops, p.Close)
		if p.Redis != nil {
			redis = p.Redis.Addrs()
		}
		if e.rls[store], err = e.client(p.RLS[0].GRPC); err != nil {
			return e, err
		}
	}
	if redis == nil {
		rdir := filepath.Join(cfg.Dir, "peer-redis")
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			return e, err
		}
		c, err := procs.StartRedisCluster(ctx, rdir, procs.RedisClusterConfig{})
		if err != nil {
			return e, err
		}
		e.stops = append(e.stops, c.Stop)
		redis = c.Addrs()
	}
	peer, err := bench.StartPeerRLS(ctx, cfg.PeerBin, root, filepath.Join(cfg.Dir, "peer.log"), bench.PeerRedisEnv(redis)...)
	if err != nil {
		return e, err
	}
	e.stops = append(e.stops, peer.Kill)
	e.peer, err = e.client(peer.Addr)
	return e, err
}

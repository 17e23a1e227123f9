package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/store"
)

// startRedis starts the Redis Cluster of a StoreRedis PoP in its Dir.
func (p *PoP) startRedis(ctx context.Context) error {
	if !procs.RedisInstalled() {
		return procs.ErrNoRedis
	}
	dir := filepath.Join(p.Config.Dir, p.Config.Name+"-redis")
	if err := mkdir(dir); err != nil {
		return err
	}
	c, err := procs.StartRedisCluster(ctx, dir, procs.RedisClusterConfig{})
	if err != nil {
		return err
	}
	p.Redis = c
	return nil
}

// RedisURL is the --store URL of a StoreRedis PoP ("" otherwise).
func (p *PoP) redisURL() string {
	if p.Redis == nil {
		return ""
	}
	return "redis://" + strings.Join(p.Redis.Addrs(), ",")
}

// storeArgs are the edge flags naming the store: --store redis://… for a
// StoreRedis PoP, else --memcached for each of servers, with
// --store-client gomemcache when there are several (shards without a
// proxy: edge's default client speaks to one address).
func (p *PoP) storeArgs(servers []string) []string {
	if p.Redis != nil {
		return []string{"--store", p.redisURL()}
	}
	var args []string
	for _, s := range servers {
		args = append(args, "--memcached", s)
	}
	if len(servers) > 1 {
		args = append(args, "--store-client", "gomemcache")
	}
	return args
}

// redisPids are the processes of the PoP's cluster.
func (p *PoP) redisPids() []int {
	if p.Redis == nil {
		return nil
	}
	var out []int
	for _, n := range p.Redis.Nodes {
		if !n.Exited() {
			out = append(out, n.Pid())
		}
	}
	return out
}

// newRedisWorker is in-process worker i, counting in the Redis Cluster of
// url: its own Store (connections), one counter/redis Limiter per route.
func newRedisWorker(routes []Route, cfg InprocConfig, i int, url string, timeout time.Duration) (*inprocWorker, error) {
	st, err := store.New(store.Config{Redis: url, Timeout: timeout, RedisServerTime: cfg.RedisServerTime})
	if err != nil {
		return nil, err
	}
	w := &inprocWorker{closer: st, limiters: map[string]counter.Allower{}}
	if len(cfg.Skew) > 0 {
		w.skew = cfg.Skew[i%len(cfg.Skew)]
	}
	for _, r := range routes {
		lim, err := st.NewAllower(routeLimit(r, cfg))
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("bench: limiter for %s: %w", r.Path, err)
		}
		w.limiters[r.Path] = lim
	}
	return w, nil
}

package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/counting"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/counter/store"
)

// InprocConfig configures in-process workers: each is a counter.Limiter per
// route over its own memcached client, as an edge worker process would
// have, without HTTP. Zero means default.
type InprocConfig struct {
	// Servers are the memcached-protocol addresses (proxies); worker i uses
	// Servers[i mod len], or all of them when Direct. Empty means one
	// in-memory store shared by all workers (no network). A server
	// "redis://host:port[,…]" is a Redis Cluster: the worker counts there
	// with counter/redis (one Lua script per decision; client unused).
	// RedisServerTime then takes now from the shard's clock.
	Servers []string
	// Direct: the servers are shards, every worker uses all of them.
	Direct bool
	// Workers is the number of workers; default 4.
	Workers int
	// Skew is each worker's clock offset (worker i uses Skew[i mod len]);
	// default none.
	Skew []time.Duration
	// Timeout is the store timeout; default 1s (long enough for a
	// cross-region store).
	Timeout time.Duration
	// Algorithm, Precision and OnReject apply to every route's limit (a
	// Refund route refunds whatever OnReject says).
	Algorithm counter.Algorithm
	Precision int
	OnReject  counter.OnReject
	// Burst is the token bucket capacity; 0 means the quantity.
	Burst int64
	// client picks the memcached client of each worker: storeGomemcache
	// (the default, memcached.Store), storePipe (memcached.PipeStore,
	// pipelined: one round trip per sliding-window decision) or
	// storePipeMux (PipeStore multiplexing each worker's calls over one
	// shared connection). The pipe clients talk to one address, so they
	// cannot be combined with Direct over several shards.
	client          storeClient
	RedisServerTime bool
}

// storeClient names a memcached client for InprocConfig.
type storeClient string

// Store clients.
const (
	storeGomemcache storeClient = "gomemcache"
	storePipe       storeClient = "pipe"
	storePipeMux    storeClient = "pipe-mux"
)

// Inproc is a set of in-process workers. It implements Target with
// time.Now (plus the worker's skew) as the clock, and Decide with any
// instant, for virtual-time replays.
type Inproc struct {
	workers []*inprocWorker
	routes  []Route
}

type inprocWorker struct {
	store    *counting.Store
	closer   interface{ Close() error } // the store's connections, if any
	limiters map[string]counter.Allower // by route path
	skew     time.Duration
}

// NewInproc builds the workers for routes.
func NewInproc(routes []Route, cfg InprocConfig) (*Inproc, error) {
	n := cfg.Workers
	if n <= 0 {
		n = 4
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = time.Second
	}
	switch cfg.client {
	case "", storeGomemcache, storePipe, storePipeMux:
	default:
		return nil, fmt.Errorf("bench: store client %q: want %q, %q or %q", cfg.client, storeGomemcache, storePipe, storePipeMux)
	}
	pipe := cfg.client == storePipe || cfg.client == storePipeMux
	if pipe && cfg.Direct && len(cfg.Servers) > 1 {
		return nil, fmt.Errorf("bench: store client %q speaks to one address, not %d direct shards", cfg.client, len(cfg.Servers))
	}
	var shared counter.Store
	if len(cfg.Servers) == 0 {
		shared = memstore.New()
	}
	in := &Inproc{routes: routes}
	for i := 0; i < n; i++ {
		if len(cfg.Servers) > 0 && strings.HasPrefix(cfg.Servers[i%len(cfg.Servers)], "redis://") {
			w, err := newRedisWorker(routes, cfg, i, cfg.Servers[i%len(cfg.Servers)], timeout)
			if err != nil {
				return nil, err
			}
			in.workers = append(in.workers, w)
			continue
		}
		st := shared
		var closer interface{ Close() error }
		if st == nil {
			servers := []string{cfg.Servers[i%len(cfg.Servers)]}
			if cfg.Direct {
				servers = cfg.Servers
			}
			sc := store.Config{Memcached: servers, Client: store.Gomemcache, Multiplex: -1, Timeout: timeout}
			switch cfg.client {
			case storePipe:
				sc.Client = store.Pipe
			case storePipeMux:
				sc.Client, sc.Multiplex = store.Pipe, 1
			}
			sh, err := store.New(sc)
			if err != nil {
				return nil, err
			}
			st, closer = sh.Store(), sh
		}
		w := &inprocWorker{store: counting.New(st), closer: closer, limiters: map[string]counter.Allower{}}
		if len(cfg.Skew) > 0 {
			w.skew = cfg.Skew[i%len(cfg.Skew)]
		}
		for _, r := range routes {
			lim, err := counter.New(w.store, routeLimit(r, cfg))
			if err != nil {
				return nil, fmt.Errorf("bench: limiter for %s: %w", r.Path, err)
			}
			w.limiters[r.Path] = lim
		}
		in.workers = append(in.workers, w)
	}
	return in, nil
}

// routeLimit is the limit of route r under cfg.
func routeLimit(r Route, cfg InprocConfig) counter.Limit {
	onReject := cfg.OnReject
	if r.Refund {
		onReject = counter.Refund
	}
	return counter.Limit{Name: r.Path, Algorithm: cfg.Algorithm, Quantity: r.Quantity, Window: r.Window,
		Burst: cfg.Burst, OnReject: onReject, Precision: cfg.Precision}
}

// Close releases the workers' connections (a multiplexing PipeStore keeps
// two goroutines per connection until closed). The Inproc must not be used
// afterwards.
func (in *Inproc) Close() error {
	for _, w := range in.workers {
		if w.closer != nil {
			w.closer.Close()
		}
	}
	return nil
}

// Workers implements Target.
func (in *Inproc) Workers() int { return len(in.workers) }

// IdentityKey is the counter key of a client on a route.
func identityKey(route, client string) string { return counter.Key(route, client) }

// Decide asks worker for a decision at now (before the worker's skew is
// added).
func (in *Inproc) Decide(ctx context.Context, worker int, client, route string, now time.Time) (counter.Result, error) {
	w := in.workers[worker%len(in.workers)]
	lim := w.limiters[route]
	if lim == nil {
		return counter.Result{}, fmt.Errorf("bench: no limiter for route %q", route)
	}
	return lim.AllowN(ctx, identityKey(route, client), now.Add(w.skew), 1)
}

// Do implements Target: time.Now is the clock; a store error is
// Unavailable on a fail-closed route and Failed otherwise.
func (in *Inproc) Do(ctx context.Context, worker int, c *Client, r *Route) Outcome {
	res, err := in.Decide(ctx, worker, c.ID, r.Path, time.Now())
	switch {
	case err != nil && r.FailClosed:
		return Unavailable
	case err != nil:
		return Failed
	case res.Allowed:
		return Admitted
	}
	return Rejected
}

// StoreStats sums the store calls of every worker.
func (in *Inproc) StoreStats() counting.Stats {
	var s counting.Stats
	for _, w := range in.workers {
		if w.store == nil {
			continue // a Redis worker: one script call per decision
		}
		o := w.store.Stats()
		s = counting.Stats{Add: s.Add + o.Add, Incr: s.Incr + o.Incr, Decr: s.Decr + o.Decr,
			GetMulti: s.GetMulti + o.GetMulti, Gets: s.Gets + o.Gets, CAS: s.CAS + o.CAS, Batch: s.Batch + o.Batch,
			Errors: s.Errors + o.Errors}
	}
	return s
}

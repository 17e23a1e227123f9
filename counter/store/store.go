// Package store builds the store a PoP's shared count lives in, from one
// Config with one set of defaults: memcached through the host's mcproxy
// (the pipelined memcached.PipeStore, the default), memcached through
// bradfitz/gomemcache, an in-process memstore.Store, or a Redis
// Cluster (package counter/redis). pop.Open, cmd/edge, cmd/rls and the
// benchmarks all build their stores with New, so the library and the
// binaries count the same way by default.
//
// store imports counter and its store clients; nothing in counter imports
// it.
package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/counter/redis"
)

// The memcached clients New can build (Config.Client).
const (
	// Pipe is memcached.PipeStore: pipelined (one round trip per
	// sliding-window decision), speaking to one address, the host's
	// mcproxy, which routes each key to its shard. The default.
	Pipe = "pipe"
	// Gomemcache is memcached.Store over bradfitz/gomemcache: one round
	// trip per store verb; several addresses are hashed by gomemcache
	// itself (which ignores hash tags).
	Gomemcache = "gomemcache"
)

// ErrConfig is returned by New for a Config it cannot build.
var ErrConfig = errors.New("store: invalid config")

// Config configures New. Zero means default: an in-process store.
type Config struct {
	// Memcached are the memcached or mcproxy addresses (host:port).
	// Default none: an in-process memstore.Store, shared with no
	// other process (tests, demos). The Pipe client speaks to exactly one
	// address, the host's mcproxy: it writes every key of one call on one
	// connection, which only a proxy routes to the keys' shard, so several
	// addresses are an error (put mcproxy in front of the shards, or use
	// Gomemcache, which hashes over them).
	Memcached []string
	// Redis, when set, counts in a Redis Cluster instead:
	// "redis://host:port[,host:port…]" (seed nodes; one atomic Lua script
	// per decision). Memcached, Client and Multiplex are then unused.
	Redis string
	// RedisServerTime, with Redis, takes now from the shard's clock
	// (redis TIME) instead of the caller's.
	RedisServerTime bool
	// Client is the memcached client: Pipe (default) or Gomemcache.
	Client string
	// Multiplex, with Pipe, is the number of connections shared by every
	// call (memcached.PipeConfig.Multiplex): concurrent calls are written
	// together and their replies read in order. Default 1 (one connection
	// batches best); negative: no sharing, each call takes a pooled
	// connection of its own. Unused by Gomemcache.
	Multiplex int
	// Timeout bounds each socket operation (dial, read, write); default
	// 1s, the socket timeout of pop's default store deadline
	// (pop.DeadlineConfig.SocketTimeout, which pop.Open and the daemons
	// set it to). Negative is an error.
	Timeout time.Duration
}

func (c Config) client() string {
	if c.Client != "" {
		return c.Client
	}
	return Pipe
}

// multiplex is memcached.PipeConfig.Multiplex: 0 for no sharing.
func (c Config) multiplex() int {
	switch {
	case c.Multiplex > 0:
		return c.Multiplex
	case c.Multiplex < 0:
		return 0
	}
	return 1
}

func (c Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return time.Second
}

// Shared is a store New built: the counter.Store that concurrency limits,
// mitigation flags and global limits' local pools use, and the allower of
// each limit counting in it. Safe for concurrent use. Close releases its
// connections; it must not be used after that.
type Shared struct {
	store      counter.Store
	newAllower func(counter.Limit) (counter.Allower, error)
	close      func() error
}

// Store returns the store: *memcached.PipeStore, *memcached.Store,
// *memstore.Store or *redis.Store.
func (s *Shared) Store() counter.Store { return s.store }

// NewAllower returns the allower of l counting in the store:
// counter.New over memcached or memory, one Lua script per decision over
// Redis.
func (s *Shared) NewAllower(l counter.Limit) (counter.Allower, error) { return s.newAllower(l) }

// Close releases the store's connections (none for the in-process one).
func (s *Shared) Close() error { return s.close() }

// New builds the store cfg names. It does not dial: a store that is down
// fails the first calls, not New. A Config it cannot build is an error
// wrapping ErrConfig.
func New(cfg Config) (*Shared, error) {
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative Timeout %v", ErrConfig, cfg.Timeout)
	}
	if cfg.Redis != "" {
		return newRedis(cfg)
	}
	client := cfg.client()
	if client != Pipe && client != Gomemcache {
		return nil, fmt.Errorf("%w: client %q: want %q or %q", ErrConfig, cfg.Client, Pipe, Gomemcache)
	}
	switch {
	case len(cfg.Memcached) == 0:
		return over(memstore.New(), func() error { return nil }), nil
	case client == Gomemcache:
		c := memcached.NewClient(memcached.Config{Servers: cfg.Memcached, Timeout: cfg.timeout()})
		return over(memcached.NewStore(c), c.Close), nil
	case len(cfg.Memcached) > 1:
		return nil, fmt.Errorf("%w: client %q speaks to one address (the host's mcproxy), got %d; put mcproxy in front of the shards, or use %q to hash over them", ErrConfig, Pipe, len(cfg.Memcached), Gomemcache)
	}
	p := memcached.NewPipeStore(memcached.PipeConfig{Addr: cfg.Memcached[0], Timeout: cfg.timeout(), Multiplex: cfg.multiplex()})
	return over(p, p.Close), nil
}

// over is the Shared of a store the algorithms of counter count in.
func over(st counter.Store, close func() error) *Shared {
	return &Shared{store: st, close: close, newAllower: func(l counter.Limit) (counter.Allower, error) { return counter.New(st, l) }}
}

// newRedis is the Shared of cfg.Redis.
func newRedis(cfg Config) (*Shared, error) {
	addrs, err := redis.ParseURL(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	rs, err := redis.New(redis.Config{Addrs: addrs, Timeout: cfg.timeout(), ServerTime: cfg.RedisServerTime})
	if err != nil {
		return nil, err
	}
	return &Shared{store: rs, close: rs.Close, newAllower: func(l counter.Limit) (counter.Allower, error) { return rs.NewAllower(l) }}, nil
}

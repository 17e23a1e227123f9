// Package redis is poplimit's other store: a Redis Cluster running one
// atomic Lua script per decision (the design document's Tier 3), behind the
// same counter.Allower contract as counter.New over memcached, with the same
// answers.
//
// Every decision is one EVALSHA on the master owning the identity's hash
// slot (the script is loaded once per node: EVAL on NOSCRIPT). The script reads the sub-windows (or the token bucket's
// theoretical arrival time), decides and writes, atomically on the key's
// owner: fixed window, sliding window (any precision) and token bucket
// (GCRA) are all exact under any number of workers, with no
// compare-and-swap race to lose. Keys are counter.Key's scheme (the same
// names as on memcached); every key of an identity shares its {hash tag},
// so a compound rule of one identity (AllowAll) is one script call in one
// slot, never CROSSSLOT.
//
// Time: by default the worker's now (the Allower contract); with
// Config.ServerTime the script takes now from redis.call('TIME'), the key
// owner's clock, so skew between workers adds no error. Durations in a
// Result are then measured from the shard's now.
//
// MOVED/ASK redirects (resharding) and failover (a replica promoted) are
// handled by go-redis's ClusterClient; errors while a master is down are
// returned as store errors, for pop's breaker and fail modes.
//
// Limits: the script computes in Lua doubles, so a limit whose quantity ×
// window in ms, or whose token bucket tolerance in ns, exceeds 2^53 is
// refused with counter.ErrBadLimit (2^53 ns is 104 days).
package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/poplimit/poplimit/counter"
)

// ErrBadURL: a store URL is not redis://host:port[,host:port…].
var ErrBadURL = errors.New("redis: bad store URL")

// ErrReply: the script's reply is not what it returns (a bug or a foreign
// script under the same SHA).
var ErrReply = errors.New("redis: unexpected script reply")

//go:embed decide.lua
var decideSrc string

// decideScript is loaded once per node (the first EVAL) and run by EVALSHA.
var decideScript = goredis.NewScript(decideSrc)

// maxExact is the largest integer a Lua double holds exactly.
const maxExact = 1 << 53

// Config configures a Store. Zero means default.
type Config struct {
	// Addrs are seed nodes of the cluster (host:port); at least one.
	Addrs []string
	// Timeout bounds each network read and write; default 1 s. A
	// decision's ctx deadline bounds it too.
	Timeout time.Duration
	// PoolSize is the connection pool per node; default go-redis's
	// (5 × GOMAXPROCS).
	PoolSize int
	// ServerTime takes now from redis.call('TIME') in the script instead of
	// the now passed to AllowN.
	ServerTime bool
	// NoPipeline turns off go-redis's autopipelining: by default the
	// decisions in flight at once to one node are written together and
	// their replies read in order (fewer syscalls on both sides: about
	// twice the decisions/s of popbench load).
	NoPipeline bool
}

func (c Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return time.Second
}

// processor runs one command: the cluster client or its autopipeliner.
type processor interface {
	Process(ctx context.Context, cmd goredis.Cmder) error
}

// Store is a connection to one Redis Cluster. It is safe for concurrent
// use; Close releases its connections.
type Store struct {
	c *goredis.ClusterClient
	// sc runs the scripts: the autopipeliner, or c itself.
	sc  processor
	cfg Config
}

// New returns a Store over the cluster reachable at cfg.Addrs. It does not
// dial: the first decision discovers the slot map.
func New(cfg Config) (*Store, error) {
	if len(cfg.Addrs) == 0 {
		return nil, fmt.Errorf("%w: no address", ErrBadURL)
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs:        cfg.Addrs,
		DialTimeout:  cfg.timeout(),
		ReadTimeout:  cfg.timeout(),
		WriteTimeout: cfg.timeout(),
		PoolSize:     cfg.PoolSize,
		// A redirect during resharding or failover is followed, bounded.
		MaxRedirects: 8,
	})
	s := &Store{c: c, sc: c, cfg: cfg}
	if !cfg.NoPipeline {
		ap, err := c.AutoPipeline()
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("redis: autopipeline: %w", err)
		}
		s.sc = ap
	}
	return s, nil
}

// ParseURL returns the seed addresses of redis://host:port[,host:port…].
func ParseURL(s string) ([]string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "redis" || u.Host == "" || u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("%w: %q (want redis://host:port[,host:port…])", ErrBadURL, s)
	}
	var addrs []string
	for _, a := range strings.Split(u.Host, ",") {
		host, port, err := splitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrBadURL, s, err)
		}
		addrs = append(addrs, host+":"+port)
	}
	return addrs, nil
}

func splitHostPort(a string) (string, string, error) {
	i := strings.LastIndexByte(a, ':')
	if i <= 0 || i == len(a)-1 {
		return "", "", fmt.Errorf("address %q needs host:port", a)
	}
	if p, err := strconv.Atoi(a[i+1:]); err != nil || p < 1 || p > 65535 {
		return "", "", fmt.Errorf("address %q: bad port", a)
	}
	return a[:i], a[i+1:], nil
}

// Close releases the connections.
func (s *Store) Close() error { return s.c.Close() }

// Client returns the underlying cluster client (for tests and tools).
func (s *Store) Client() *goredis.ClusterClient { return s.c }

// Limiter enforces one limit on a Store: a counter.Allower.
type Limiter struct {
	s *Store
	r counter.Remote
	// fields are the limit's 9 script fields with the units and undo
	// flag left to fill (indexes 2 and 4).
	fields [fieldsPerLimit]any
}

var _ counter.Allower = (*Limiter)(nil)

// NewAllower returns the Allower of l on s; the error wraps
// counter.ErrBadLimit or counter.ErrBadPrecision.
func (s *Store) NewAllower(l counter.Limit) (*Limiter, error) {
	r, err := counter.NewRemote(l)
	if err != nil {
		return nil, err
	}
	lim := &Limiter{s: s, r: r}
	refund := "0"
	switch l.OnReject {
	case counter.Refund:
		refund = "1"
	case counter.CountFirst:
		refund = "2"
	}
	if l.Algorithm == counter.TokenBucket {
		t, tau, burst := r.Bucket()
		if tau >= maxExact/2 {
			return nil, fmt.Errorf("%w: token bucket tolerance %v above the Redis store's 2^52 ns", counter.ErrBadLimit, time.Duration(tau))
		}
		lim.fields = [fieldsPerLimit]any{"b", r.Suffix(), 0, refund, "0", t, tau, burst, 0}
		return lim, nil
	}
	sub, n, ttl := r.Window()
	if l.Quantity*l.Window.Milliseconds() >= maxExact || l.Quantity*sub*int64(n+1) >= maxExact {
		return nil, fmt.Errorf("%w: quantity × window in ms above the Redis store's 2^53", counter.ErrBadLimit)
	}
	alg := "s"
	if l.Algorithm == counter.FixedWindow {
		alg = "f"
	}
	lim.fields = [fieldsPerLimit]any{alg, r.Suffix(), 0, refund, "0", l.Quantity, sub, n, ttl.Milliseconds()}
	return lim, nil
}

// Limit implements counter.Allower.
func (lim *Limiter) Limit() counter.Limit { return lim.r.Limit() }

// AllowN implements counter.Allower: one script call.
func (lim *Limiter) AllowN(ctx context.Context, key string, now time.Time, n int64) (counter.Result, error) {
	if n < 1 {
		return counter.Result{}, counter.ErrBadCost
	}
	var rs [1]counter.Result
	if err := lim.s.allowAll(ctx, now, n, []counter.Check{{Allower: lim, Key: key}}, rs[:]); err != nil {
		return counter.Result{}, err
	}
	return rs[0], nil
}

var _ counter.Peeker = (*Limiter)(nil)

// Peek implements counter.Peeker in one script call that writes nothing:
// a window limit is allowed while its count (a sliding window's estimate)
// does not exceed the quantity; a token bucket while one unit is
// available.
func (lim *Limiter) Peek(ctx context.Context, key string, now time.Time) (counter.Result, error) {
	if err := counter.CheckKey(key); err != nil {
		return counter.Result{}, err
	}
	f := lim.fields
	f[2] = 0
	rep, err := lim.s.run(ctx, key, now, f[:])
	if err != nil {
		return counter.Result{}, err
	}
	v := rep.vals
	if len(v) < 2 {
		return counter.Result{}, fmt.Errorf("%w: short reply", ErrReply)
	}
	allowed := v[0] == 1
	if lim.r.Limit().Algorithm == counter.TokenBucket {
		return lim.r.BucketResult(rep.now.UnixNano()+v[1], rep.now, 1, allowed), nil
	}
	return lim.r.WindowResult(v[1:], rep.now, 0, allowed)
}

// Undo implements counter.Allower: it gives n units admitted at now back
// (a window: the current sub-window's count, not below 0; a token bucket:
// its tat, never past full).
func (lim *Limiter) Undo(ctx context.Context, key string, now time.Time, n int64) error {
	if n < 1 {
		return counter.ErrBadCost
	}
	if err := counter.CheckKey(key); err != nil {
		return err
	}
	f := lim.fields
	f[2], f[4] = n, "1"
	_, err := lim.s.run(ctx, key, now, f[:])
	return err
}

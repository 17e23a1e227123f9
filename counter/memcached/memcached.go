// Package memcached holds the counter.Store clients that speak to memcached
// (usually through the host's mcproxy): Store over gomemcache (NewClient
// gives it poplimit's timeouts and pool size), and PipeStore, which speaks
// the text protocol itself so that it pipelines and implements
// counter.Batcher (one round trip per window decision); its multiplexed
// mode (PipeConfig.Multiplex) is in pipemux.go; its reply reader,
// ReadValues, in reply.go. Package counter/store builds either (or an
// in-process or Redis store) from one Config with poplimit's defaults:
// that is how pop.Open and the daemons get theirs; these constructors are
// for the finer knobs (Wire, MuxInFlight, MaxIdleConns).
//
// Both return counter's sentinels (counter.ErrNotFound, ErrNotStored,
// ErrCASConflict) for memcached's answers, and retry once on a fresh
// connection a call that failed because the server closed a pooled one.
//
// memcached imports counter (for the Store contract) and gomemcache, and
// its sockets are FastConns.
package memcached

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"syscall"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/proxy/fastconn"
)

// Config configures NewClient. Zero means default.
type Config struct {
	// Servers are the host:port addresses: usually the host's mcproxy, or
	// memcached shards directly (gomemcache then hashes keys itself, which
	// ignores hash tags). Required.
	Servers []string
	// Timeout bounds each socket read, write and dial; default 100ms
	// (gomemcache's 500ms stalls a request far too long).
	Timeout time.Duration
	// MaxIdleConns is the number of idle connections kept per server;
	// default 256 (gomemcache's 2 causes connection churn under load).
	MaxIdleConns int
	// Wire, when set, counts the client's network round trips (one per
	// request: gomemcache neither pipelines nor batches); nil counts none.
	Wire *WireCounter
}

func (c Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 100 * time.Millisecond
}

func (c Config) maxIdleConns() int {
	if c.MaxIdleConns > 0 {
		return c.MaxIdleConns
	}
	return 256
}

// NewClient returns a gomemcache client with poplimit's defaults.
func NewClient(cfg Config) *memcache.Client {
	c := memcache.New(cfg.Servers...)
	c.Timeout = cfg.timeout()
	c.MaxIdleConns = cfg.maxIdleConns()
	c.DialContext = dialFast
	if cfg.Wire != nil {
		c.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := dialFast(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return cfg.Wire.wrap(nc), nil
		}
	}
	return c
}

// connGone reports whether err says the server closed the connection
// (EOF, reset, broken pipe): the signature of a pooled connection that
// outlived a server or proxy restart. Such a call is retried once on a
// fresh connection. If the server had in fact applied the command and
// died before replying, the retry counts it twice: the safe direction for
// a limiter (stricter, never more admissive), and a crash in that window
// is far rarer than a restart.
func connGone(err error) bool {
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}

// dialFast dials as gomemcache does by default (its Timeout bounds ctx)
// and returns a FastConn.
func dialFast(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return fastconn.New(nc), nil
}

// Store is the Store over memcached (or mcproxy) through
// gomemcache. It is safe for concurrent use.
//
// A call that fails because the server closed the connection (see
// connGone: a pooled connection that outlived a server or proxy restart)
// is retried once, after dropping the client's idle connections (they
// outlived the restart too), so the retry dials.
//
// gomemcache takes no context: ctx is checked before each call (a done
// context fails fast), and the client's Timeout bounds the call itself.
type Store struct {
	c *memcache.Client
}

var _ counter.Store = (*Store)(nil)

// NewStore wraps c (see NewClient for sensible settings).
func NewStore(c *memcache.Client) *Store { return &Store{c: c} }

// dropIdle closes the client's idle connections after one was found
// closed by the server; the client stays usable and dials anew.
func (m *Store) dropIdle() { _ = m.c.Close() }

// Client returns the underlying client.
func (m *Store) Client() *memcache.Client { return m.c }

// mapErr turns gomemcache's sentinels into the Store's.
func mapErr(verb string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, memcache.ErrCacheMiss):
		return counter.ErrNotFound
	case errors.Is(err, memcache.ErrNotStored):
		return counter.ErrNotStored
	case errors.Is(err, memcache.ErrCASConflict):
		return counter.ErrCASConflict
	}
	return fmt.Errorf("memcached: %s: %w", verb, err)
}

// expiration converts a TTL into memcached's exptime at the current time;
// see expirationAt.
func expiration(ttl time.Duration) int32 { return expirationAt(ttl, time.Now()) }

// expirationAt converts a TTL into memcached's exptime as of now: whole
// seconds, rounded up. Up to 30 days it is relative; beyond, memcached
// wants an absolute Unix time, which is clamped to math.MaxInt32 so that
// every positive TTL yields a legal, positive exptime (never one that
// wraps negative and expires the item at once). ttl ≤ 0 gives 0 (no
// expiry).
func expirationAt(ttl time.Duration, now time.Time) int32 {
	if ttl <= 0 {
		return 0
	}
	secs := int64((ttl-1)/time.Second) + 1 // rounded up, without overflow
	const thirtyDays = 30 * 24 * 3600
	if secs <= thirtyDays {
		return int32(secs)
	}
	abs := now.Unix() + secs // ≤ 9.3e9 + now: no int64 overflow
	if abs > math.MaxInt32 || abs <= thirtyDays {
		return math.MaxInt32
	}
	return int32(abs)
}

// Add implements Store.
func (m *Store) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	it := &memcache.Item{Key: key, Value: value, Expiration: expiration(ttl)}
	err := m.c.Add(it)
	if connGone(err) {
		m.dropIdle()
		err = m.c.Add(it)
	}
	return mapErr("add", err)
}

// Incr implements Store.
func (m *Store) Incr(ctx context.Context, key string, delta uint64) (uint64, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	v, err := m.c.Increment(key, delta)
	if connGone(err) {
		m.dropIdle()
		v, err = m.c.Increment(key, delta)
	}
	return v, mapErr("incr", err)
}

// Decr implements Store.
func (m *Store) Decr(ctx context.Context, key string, delta uint64) (uint64, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	v, err := m.c.Decrement(key, delta)
	if connGone(err) {
		m.dropIdle()
		v, err = m.c.Decrement(key, delta)
	}
	return v, mapErr("decr", err)
}

// GetMulti implements Store.
func (m *Store) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	items, err := m.c.GetMulti(keys)
	if connGone(err) {
		m.dropIdle()
		items, err = m.c.GetMulti(keys)
	}
	if err != nil {
		return nil, mapErr("get", err)
	}
	out := make(map[string][]byte, len(items))
	for k, it := range items {
		out[k] = it.Value
	}
	return out, nil
}

// Gets implements Store. The token is the *memcache.Item gomemcache needs
// for its cas.
func (m *Store) Gets(ctx context.Context, key string) ([]byte, counter.CASToken, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, nil, err
	}
	it, err := m.c.Get(key)
	if connGone(err) {
		m.dropIdle()
		it, err = m.c.Get(key)
	}
	if err != nil {
		return nil, nil, mapErr("gets", err)
	}
	return it.Value, it, nil
}

// CompareAndSwap implements Store.
func (m *Store) CompareAndSwap(ctx context.Context, key string, value []byte, cas counter.CASToken, ttl time.Duration) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	it, ok := cas.(*memcache.Item)
	if !ok || it.Key != key {
		return fmt.Errorf("%w: foreign CAS token %T", counter.ErrCASConflict, cas)
	}
	it.Value = value
	it.Expiration = expiration(ttl)
	err := m.c.CompareAndSwap(it)
	if connGone(err) {
		m.dropIdle()
		err = m.c.CompareAndSwap(it)
	}
	return mapErr("cas", err)
}

// ctxErr fails a call whose context is already done, before any I/O.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memcached: store call: %w", err)
	}
	return nil
}

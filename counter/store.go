package counter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Store errors. Implementations return exactly these (possibly wrapped) for
// the conditions below; any other error means the store could not answer.
var (
	// ErrNotFound: the key does not exist (or has expired).
	ErrNotFound = errors.New("counter: key not found")
	// ErrNotStored: Add found the key already present.
	ErrNotStored = errors.New("counter: not stored")
	// ErrCASConflict: CompareAndSwap found the item modified since Gets.
	ErrCASConflict = errors.New("counter: compare-and-swap conflict")
)

// CASToken is the opaque version Store.Gets hands out and
// Store.CompareAndSwap checks. Only the Store that issued it understands it.
type CASToken any

// Store is the handful of memcached verbs the algorithms need. Each method
// is one store round trip. Implementations are safe for concurrent use and
// give memcached's semantics:
//
//   - counters are unsigned decimal ASCII values; Incr and Decr are atomic,
//     Decr stops at 0, neither changes the TTL;
//   - Add is atomic create-if-absent;
//   - ttl is the item's lifetime from now (rounded up to whole seconds by
//     memcached); ttl ≤ 0 means no expiry;
//   - an expired item behaves exactly like a missing one.
type Store interface {
	// Add stores value under key only if key is absent; ErrNotStored if not.
	Add(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// Incr adds delta to the counter under key and returns the new value;
	// ErrNotFound if key is absent.
	Incr(ctx context.Context, key string, delta uint64) (uint64, error)
	// Decr subtracts delta (stopping at 0) and returns the new value;
	// ErrNotFound if key is absent.
	Decr(ctx context.Context, key string, delta uint64) (uint64, error)
	// GetMulti returns the values of the keys present; absent keys are
	// simply missing from the map. One round trip when all keys share a
	// hash tag (they land on one shard).
	GetMulti(ctx context.Context, keys []string) (map[string][]byte, error)
	// Gets returns the value under key and its version; ErrNotFound if
	// absent.
	Gets(ctx context.Context, key string) ([]byte, CASToken, error)
	// CompareAndSwap replaces the value under key if it is still at the
	// version cas; ErrCASConflict if it changed, ErrNotFound if it vanished.
	CompareAndSwap(ctx context.Context, key string, value []byte, cas CASToken, ttl time.Duration) error
}

// StoreStats counts the calls made through a CountingStore. Every call is
// one round trip.
type StoreStats struct {
	Add, Incr, Decr, GetMulti, Gets, CAS int64
	// Batch counts Batcher.GetMultiIncr calls (one round trip each).
	Batch int64
	// Errors counts calls that returned an error other than ErrNotFound,
	// ErrNotStored and ErrCASConflict.
	Errors int64
}

// RoundTrips is the total number of calls.
func (s StoreStats) RoundTrips() int64 {
	return s.Add + s.Incr + s.Decr + s.GetMulti + s.Gets + s.CAS + s.Batch
}

// Sub returns s − o, for measuring an interval.
func (s StoreStats) Sub(o StoreStats) StoreStats {
	return StoreStats{Add: s.Add - o.Add, Incr: s.Incr - o.Incr, Decr: s.Decr - o.Decr,
		GetMulti: s.GetMulti - o.GetMulti, Gets: s.Gets - o.Gets, CAS: s.CAS - o.CAS,
		Batch: s.Batch - o.Batch, Errors: s.Errors - o.Errors}
}

// CountingStore wraps a Store and counts its round trips, so callers and
// benchmarks can report store round trips per decision. Safe for concurrent
// use; counting costs one atomic add per call.
type CountingStore struct {
	Store                                             Store
	add, incr, decr, getMulti, gets, cas, batch, errs atomic.Int64
}

var _ Store = (*CountingStore)(nil)

// NewCountingStore wraps s.
func NewCountingStore(s Store) *CountingStore { return &CountingStore{Store: s} }

// Stats returns the counts so far.
func (c *CountingStore) Stats() StoreStats {
	return StoreStats{Add: c.add.Load(), Incr: c.incr.Load(), Decr: c.decr.Load(),
		GetMulti: c.getMulti.Load(), Gets: c.gets.Load(), CAS: c.cas.Load(),
		Batch: c.batch.Load(), Errors: c.errs.Load()}
}

func (c *CountingStore) note(err error) {
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotStored) && !errors.Is(err, ErrCASConflict) {
		c.errs.Add(1)
	}
}

// Add implements Store.
func (c *CountingStore) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	c.add.Add(1)
	err := c.Store.Add(ctx, key, value, ttl)
	c.note(err)
	return err
}

// Incr implements Store.
func (c *CountingStore) Incr(ctx context.Context, key string, delta uint64) (uint64, error) {
	c.incr.Add(1)
	v, err := c.Store.Incr(ctx, key, delta)
	c.note(err)
	return v, err
}

// Decr implements Store.
func (c *CountingStore) Decr(ctx context.Context, key string, delta uint64) (uint64, error) {
	c.decr.Add(1)
	v, err := c.Store.Decr(ctx, key, delta)
	c.note(err)
	return v, err
}

// GetMulti implements Store.
func (c *CountingStore) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	c.getMulti.Add(1)
	m, err := c.Store.GetMulti(ctx, keys)
	c.note(err)
	return m, err
}

// Gets implements Store.
func (c *CountingStore) Gets(ctx context.Context, key string) ([]byte, CASToken, error) {
	c.gets.Add(1)
	v, t, err := c.Store.Gets(ctx, key)
	c.note(err)
	return v, t, err
}

// CompareAndSwap implements Store.
func (c *CountingStore) CompareAndSwap(ctx context.Context, key string, value []byte, cas CASToken, ttl time.Duration) error {
	c.cas.Add(1)
	err := c.Store.CompareAndSwap(ctx, key, value, cas, ttl)
	c.note(err)
	return err
}

// GetMultiIncr implements Batcher when the wrapped store does; otherwise it
// returns ErrNotSupported without counting.
func (c *CountingStore) GetMultiIncr(ctx context.Context, keys []string, incrKey string, delta uint64, ttl time.Duration) (map[string][]byte, uint64, error) {
	b, ok := c.Store.(Batcher)
	if !ok {
		return nil, 0, ErrNotSupported
	}
	c.batch.Add(1)
	m, v, err := b.GetMultiIncr(ctx, keys, incrKey, delta, ttl)
	c.note(err)
	return m, v, err
}

// Batcher is an optional Store extension: a read of closed sub-windows and
// the increment-or-create of the current one in ONE round trip. Limiter
// uses it, when the store has it, for a window its worker has not seen
// yet, so that a cold key costs one round trip instead of two.
type Batcher interface {
	// GetMultiIncr returns the values of the keys present among keys and
	// adds delta to the counter incrKey, creating it at 0 with ttl first if
	// absent; it returns the counter's new value. ErrNotSupported if the
	// store cannot do it in one round trip.
	GetMultiIncr(ctx context.Context, keys []string, incrKey string, delta uint64, ttl time.Duration) (map[string][]byte, uint64, error)
}

// ErrNotSupported: the store cannot batch (see Batcher).
var ErrNotSupported = errors.New("counter: operation not supported by store")

// parseCount parses a decimal counter value written by the algorithms.
func parseCount(b []byte) (int64, error) {
	// memcached pads a counter that shrank on decr with trailing spaces.
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: %q", ErrCorrupt, b)
	}
	return v, nil
}

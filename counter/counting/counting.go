// Package counting wraps a counter.Store and counts its round trips, so
// benchmarks and tests can report store operations per decision
// (b.ReportMetric) without the algorithms counting anything themselves.
//
// It imports only counter.
package counting

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// Stats counts the calls made through a Store. Every call is
// one round trip.
type Stats struct {
	Add, Incr, Decr, GetMulti, Gets, CAS int64
	// Batch counts counter.Batcher.GetMultiIncr calls (one round trip each).
	Batch int64
	// Errors counts calls that returned an error other than counter.ErrNotFound,
	// counter.ErrNotStored and counter.ErrCASConflict.
	Errors int64
}

// RoundTrips is the total number of calls.
func (s Stats) RoundTrips() int64 {
	return s.Add + s.Incr + s.Decr + s.GetMulti + s.Gets + s.CAS + s.Batch
}

// Sub returns s − o, for measuring an interval.
func (s Stats) Sub(o Stats) Stats {
	return Stats{Add: s.Add - o.Add, Incr: s.Incr - o.Incr, Decr: s.Decr - o.Decr,
		GetMulti: s.GetMulti - o.GetMulti, Gets: s.Gets - o.Gets, CAS: s.CAS - o.CAS,
		Batch: s.Batch - o.Batch, Errors: s.Errors - o.Errors}
}

// Store wraps a counter.Store and counts its round trips, so callers and
// benchmarks can report store round trips per decision. Safe for concurrent
// use; counting costs one atomic add per call.
type Store struct {
	counter.Store
	add, incr, decr, getMulti, gets, cas, batch, errs atomic.Int64
}

var (
	_ counter.Store   = (*Store)(nil)
	_ counter.Batcher = (*Store)(nil)
)

// New wraps s.
func New(s counter.Store) *Store { return &Store{Store: s} }

// Stats returns the counts so far.
func (c *Store) Stats() Stats {
	return Stats{Add: c.add.Load(), Incr: c.incr.Load(), Decr: c.decr.Load(),
		GetMulti: c.getMulti.Load(), Gets: c.gets.Load(), CAS: c.cas.Load(),
		Batch: c.batch.Load(), Errors: c.errs.Load()}
}

func (c *Store) note(err error) {
	if err != nil && !errors.Is(err, counter.ErrNotFound) && !errors.Is(err, counter.ErrNotStored) && !errors.Is(err, counter.ErrCASConflict) {
		c.errs.Add(1)
	}
}

// Add implements counter.Store.
func (c *Store) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	c.add.Add(1)
	err := c.Store.Add(ctx, key, value, ttl)
	c.note(err)
	return err
}

// Incr implements counter.Store.
func (c *Store) Incr(ctx context.Context, key string, delta uint64) (uint64, error) {
	c.incr.Add(1)
	v, err := c.Store.Incr(ctx, key, delta)
	c.note(err)
	return v, err
}

// Decr implements counter.Store.
func (c *Store) Decr(ctx context.Context, key string, delta uint64) (uint64, error) {
	c.decr.Add(1)
	v, err := c.Store.Decr(ctx, key, delta)
	c.note(err)
	return v, err
}

// GetMulti implements counter.Store.
func (c *Store) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	c.getMulti.Add(1)
	m, err := c.Store.GetMulti(ctx, keys)
	c.note(err)
	return m, err
}

// Gets implements counter.Store.
func (c *Store) Gets(ctx context.Context, key string) ([]byte, counter.CASToken, error) {
	c.gets.Add(1)
	v, t, err := c.Store.Gets(ctx, key)
	c.note(err)
	return v, t, err
}

// CompareAndSwap implements counter.Store.
func (c *Store) CompareAndSwap(ctx context.Context, key string, value []byte, cas counter.CASToken, ttl time.Duration) error {
	c.cas.Add(1)
	err := c.Store.CompareAndSwap(ctx, key, value, cas, ttl)
	c.note(err)
	return err
}

// GetMultiIncr implements counter.Batcher when the wrapped store does; otherwise it
// returns counter.ErrNotSupported without counting.
func (c *Store) GetMultiIncr(ctx context.Context, keys []string, incrKey string, delta uint64, ttl time.Duration) (map[string][]byte, uint64, error) {
	b, ok := c.Store.(counter.Batcher)
	if !ok {
		return nil, 0, counter.ErrNotSupported
	}
	c.batch.Add(1)
	m, v, err := b.GetMultiIncr(ctx, keys, incrKey, delta, ttl)
	c.note(err)
	return m, v, err
}

// Package memstore is an in-process counter.Store with memcached's
// semantics: for tests, single-process use and the demo.
package memstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/poplimit/poplimit/counter"
)

// Store is an in-process counter.Store with memcached's semantics, TTLs
// included: for tests, for single-process use and as a fallback. It is safe
// for concurrent use; its zero value is not usable, call New.
// Expired items are dropped lazily on access and by a periodic sweep of
// each shard amortised over writes, so idle keys do not accumulate.
type Store struct {
	now    func() time.Time
	shards [memShards]memShard
}

const memShards = 32

type memShard struct {
	mu     sync.Mutex
	items  map[string]*memItem
	writes int
	cas    uint64
}

type memItem struct {
	value   []byte
	cas     uint64
	expires int64 // unix nanoseconds; 0 = never
}

var (
	_ counter.Store   = (*Store)(nil)
	_ counter.Batcher = (*Store)(nil)
)

// New returns an empty store whose TTLs follow the wall clock.
func New() *Store { return NewClock(time.Now) }

// NewClock returns an empty store whose TTLs follow now (for
// tests that step through instants).
func NewClock(now func() time.Time) *Store {
	m := &Store{now: now}
	for i := range m.shards {
		m.shards[i].items = make(map[string]*memItem)
	}
	return m
}

// size returns the number of live items.
func (m *Store) size() int {
	now := m.now().UnixNano()
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for _, it := range s.items {
			if it.live(now) {
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

func (it *memItem) live(now int64) bool { return it.expires == 0 || now < it.expires }

func (m *Store) shard(key string) *memShard {
	return &m.shards[xxhash.Sum64String(key)%memShards]
}

func expiry(now int64, ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	// memcached keeps whole seconds.
	secs := (ttl + time.Second - 1) / time.Second
	return now + int64(secs*time.Second)
}

// get returns the live item under key, dropping it if expired. s.mu held.
func (s *memShard) get(key string, now int64) *memItem {
	it := s.items[key]
	if it == nil {
		return nil
	}
	if !it.live(now) {
		delete(s.items, key)
		return nil
	}
	return it
}

// wrote accounts a write and sweeps expired items every so often. s.mu held.
func (s *memShard) wrote(now int64) {
	s.writes++
	if s.writes < 1024 || s.writes < len(s.items)/4 {
		return
	}
	s.writes = 0
	for k, it := range s.items {
		if !it.live(now) {
			delete(s.items, k)
		}
	}
}

func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("counter: store call: %w", err)
	}
	return nil
}

// Add implements counter.Store.
func (m *Store) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	now := m.now().UnixNano()
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.get(key, now) != nil {
		return counter.ErrNotStored
	}
	s.cas++
	s.items[key] = &memItem{value: append([]byte(nil), value...), cas: s.cas, expires: expiry(now, ttl)}
	s.wrote(now)
	return nil
}

func (m *Store) incrDecr(ctx context.Context, key string, delta uint64, incr bool) (uint64, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	now := m.now().UnixNano()
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.get(key, now)
	if it == nil {
		return 0, counter.ErrNotFound
	}
	v, err := strconv.ParseUint(string(it.value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: cannot increment or decrement non-numeric value", counter.ErrCorrupt)
	}
	switch {
	case incr:
		v += delta // wraps at 2^64 like memcached
	case delta > v:
		v = 0
	default:
		v -= delta
	}
	it.value = strconv.AppendUint(it.value[:0], v, 10)
	s.cas++
	it.cas = s.cas
	return v, nil
}

// Incr implements counter.Store.
func (m *Store) Incr(ctx context.Context, key string, delta uint64) (uint64, error) {
	return m.incrDecr(ctx, key, delta, true)
}

// Decr implements counter.Store.
func (m *Store) Decr(ctx context.Context, key string, delta uint64) (uint64, error) {
	return m.incrDecr(ctx, key, delta, false)
}

// GetMulti implements counter.Store.
func (m *Store) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	now := m.now().UnixNano()
	out := make(map[string][]byte, len(keys))
	for _, k := range keys {
		s := m.shard(k)
		s.mu.Lock()
		if it := s.get(k, now); it != nil {
			out[k] = append([]byte(nil), it.value...)
		}
		s.mu.Unlock()
	}
	return out, nil
}

// Gets implements counter.Store.
func (m *Store) Gets(ctx context.Context, key string) ([]byte, counter.CASToken, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, nil, err
	}
	now := m.now().UnixNano()
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.get(key, now)
	if it == nil {
		return nil, nil, counter.ErrNotFound
	}
	return append([]byte(nil), it.value...), it.cas, nil
}

// CompareAndSwap implements counter.Store.
func (m *Store) CompareAndSwap(ctx context.Context, key string, value []byte, cas counter.CASToken, ttl time.Duration) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	want, ok := cas.(uint64)
	if !ok {
		return fmt.Errorf("%w: foreign CAS token %T", counter.ErrCASConflict, cas)
	}
	now := m.now().UnixNano()
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.get(key, now)
	if it == nil {
		return counter.ErrNotFound
	}
	if it.cas != want {
		return counter.ErrCASConflict
	}
	s.cas++
	it.value = append(it.value[:0], value...)
	it.cas = s.cas
	it.expires = expiry(now, ttl)
	s.wrote(now)
	return nil
}

// GetMultiIncr implements counter.Batcher (one round trip: in process, trivially).
func (m *Store) GetMultiIncr(ctx context.Context, keys []string, incrKey string, delta uint64, ttl time.Duration) (map[string][]byte, uint64, error) {
	vals, err := m.GetMulti(ctx, keys)
	if err != nil {
		return nil, 0, err
	}
	if err := m.Add(ctx, incrKey, []byte("0"), ttl); err != nil && err != counter.ErrNotStored {
		return nil, 0, err
	}
	v, err := m.Incr(ctx, incrKey, delta)
	if err == counter.ErrNotFound {
		return nil, 0, fmt.Errorf("%w: %s vanished after add", counter.ErrContention, incrKey)
	}
	return vals, v, err
}

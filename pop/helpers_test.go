package pop

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
)

var errDown = errors.New("test: store down")

// flakyStore is a counter.Store that can be switched off (every call fails
// at once) or made to hang until its context ends, and counts calls and
// records the keys it saw.
type flakyStore struct {
	counter.Store
	down  atomic.Bool
	hang  atomic.Bool
	calls atomic.Int64
	mu    sync.Mutex
	keys  map[string]bool
}

func newFlakyStore(clock func() time.Time) *flakyStore {
	return &flakyStore{Store: memstore.NewClock(clock), keys: map[string]bool{}}
}

func (f *flakyStore) enter(ctx context.Context, keys ...string) error {
	f.calls.Add(1)
	f.mu.Lock()
	for _, k := range keys {
		f.keys[k] = true
	}
	f.mu.Unlock()
	if f.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if f.down.Load() {
		return errDown
	}
	return nil
}

func (f *flakyStore) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := f.enter(ctx, key); err != nil {
		return err
	}
	return f.Store.Add(ctx, key, value, ttl)
}

func (f *flakyStore) Incr(ctx context.Context, key string, delta uint64) (uint64, error) {
	if err := f.enter(ctx, key); err != nil {
		return 0, err
	}
	return f.Store.Incr(ctx, key, delta)
}

func (f *flakyStore) Decr(ctx context.Context, key string, delta uint64) (uint64, error) {
	if err := f.enter(ctx, key); err != nil {
		return 0, err
	}
	return f.Store.Decr(ctx, key, delta)
}

func (f *flakyStore) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	if err := f.enter(ctx, keys...); err != nil {
		return nil, err
	}
	return f.Store.GetMulti(ctx, keys)
}

func (f *flakyStore) Gets(ctx context.Context, key string) ([]byte, counter.CASToken, error) {
	if err := f.enter(ctx, key); err != nil {
		return nil, nil, err
	}
	return f.Store.Gets(ctx, key)
}

func (f *flakyStore) CompareAndSwap(ctx context.Context, key string, value []byte, cas counter.CASToken, ttl time.Duration) error {
	if err := f.enter(ctx, key); err != nil {
		return err
	}
	return f.Store.CompareAndSwap(ctx, key, value, cas, ttl)
}

// testClock is a settable clock for the memory store's TTLs.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *testClock) Now() time.Time               { return time.Unix(0, c.ns.Load()) }
func (c *testClock) Set(t time.Time)              { c.ns.Store(t.UnixNano()) }
func (c *testClock) Add(d time.Duration)          { c.ns.Add(int64(d)) }
func (c *testClock) At(d time.Duration) time.Time { return c.Now().Add(d) }

// t0 is a fixed instant on a whole day, so every window starts there.
var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// storeConfig returns a Config whose shared limiters use store.
func storeConfig(store counter.Store) Config {
	return Config{
		NewShared: func(l counter.Limit) (counter.Allower, error) { return counter.New(store, l) },
		NewLocal:  func(l counter.Limit) (counter.Allower, error) { return counter.NewLocal(l) },
		Logger:    slog.New(slog.DiscardHandler),
	}
}

func newTestLimiter(t testing.TB, cfg Config, doc string) *Limiter {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LoadBytes("test.yml", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	return l
}

// req builds a request from 192.0.2.1 (untrusted peer) with optional
// header pairs.
func req(method, target string, hdr ...string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

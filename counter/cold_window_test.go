package counter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
)

// slowStore is a Store without Batcher whose every call takes delay: it
// records the most calls in flight at once.
type slowStore struct {
	counter.Store
	delay         time.Duration
	inFlight, max atomic.Int32
}

func (s *slowStore) enter() func() {
	n := s.inFlight.Add(1)
	for m := s.max.Load(); n > m && !s.max.CompareAndSwap(m, n); m = s.max.Load() {
	}
	time.Sleep(s.delay)
	return func() { s.inFlight.Add(-1) }
}

func (s *slowStore) Add(ctx context.Context, k string, v []byte, ttl time.Duration) error {
	defer s.enter()()
	return s.Store.Add(ctx, k, v, ttl)
}

func (s *slowStore) Incr(ctx context.Context, k string, d uint64) (uint64, error) {
	defer s.enter()()
	return s.Store.Incr(ctx, k, d)
}

func (s *slowStore) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	defer s.enter()()
	return s.Store.GetMulti(ctx, keys)
}

// With a store that cannot batch (gomemcache), a sliding window's cold
// window reads the previous window while it counts in the current one: the
// two calls overlap, and the decision is the same as with one connection.
func TestSlidingColdWindowReadsConcurrently(t *testing.T) {
	mem := memstore.New()
	slow := &slowStore{Store: mem, delay: 20 * time.Millisecond}
	lim, err := counter.New(slow, counter.Limit{Name: "s", Algorithm: counter.SlidingWindow, Quantity: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := counter.New(memstore.New(), counter.Limit{Name: "s", Algorithm: counter.SlidingWindow, Quantity: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)
	for i, at := range []time.Duration{0, 100 * time.Millisecond, 1200 * time.Millisecond, 1300 * time.Millisecond, 2500 * time.Millisecond} {
		got, err := lim.AllowN(ctx, "k", t0.Add(at), 4)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.AllowN(ctx, "k", t0.Add(at), 4)
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining {
			t.Errorf("decision %d: %+v, want %+v", i, got, want)
		}
	}
	if m := slow.max.Load(); m != 2 {
		t.Errorf("at most %d store calls in flight; want 2 (previous window read alongside the count)", m)
	}
}

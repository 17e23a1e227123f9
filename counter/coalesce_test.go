package counter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// delayStore delays every store call, so that concurrent decisions for one
// key overlap and coalesce.
type delayStore struct {
	counter.Store
	delay time.Duration
	calls atomic.Int64
}

func (s *delayStore) wait() { s.calls.Add(1); time.Sleep(s.delay) }

func (s *delayStore) Incr(ctx context.Context, k string, d uint64) (uint64, error) {
	s.wait()
	return s.Store.Incr(ctx, k, d)
}

func (s *delayStore) Gets(ctx context.Context, k string) ([]byte, counter.CASToken, error) {
	s.wait()
	return s.Store.Gets(ctx, k)
}

func (s *delayStore) Add(ctx context.Context, k string, v []byte, ttl time.Duration) error {
	s.wait()
	return s.Store.Add(ctx, k, v, ttl)
}

// delayBatcher is delayStore for a Batcher.
type delayBatcher struct{ *delayStore }

func (s delayBatcher) GetMultiIncr(ctx context.Context, keys []string, k string, d uint64, ttl time.Duration) (map[string][]byte, uint64, error) {
	s.wait()
	return s.Store.(counter.Batcher).GetMultiIncr(ctx, keys, k, d, ttl)
}

func slowed(st counter.Store) (counter.Store, *delayStore) {
	s := &delayStore{Store: st, delay: 2 * time.Millisecond}
	if _, ok := st.(counter.Batcher); ok {
		return delayBatcher{s}, s
	}
	return s, s
}

// TestCoalescingExact: 64 goroutines burst 5× the allowance at one key
// through a slowed store, so decisions coalesce. Every exact algorithm
// admits exactly the allowance, with far fewer store calls than
// decisions; then the count left in the store is checked: Count mode keeps
// every request counted, Refund mode exactly the admitted ones (giving k
// units back admits exactly k more).
func TestCoalescingExact(t *testing.T) {
	for _, b := range backends(t) {
		if b.store == nil {
			continue
		}
		for _, el := range exactLimits {
			t.Run(b.name+"/"+el.name, func(t *testing.T) {
				st, slow := slowed(b.store())
				lim, err := counter.New(st, el.limit)
				if err != nil {
					t.Fatal(err)
				}
				key := uniqueKey(t)
				q := el.limit.Quantity
				total := 5 * q
				got, cont, err := burst(lim, key, t0, 64, int(total))
				if err != nil {
					t.Fatal(err)
				}
				if got != q {
					t.Fatalf("admitted %d, want exactly %d", got, q)
				}
				if lim.Coalesced() == 0 {
					t.Fatalf("no decision coalesced (%d store calls for %d decisions)", slow.calls.Load(), total)
				}
				t.Logf("coalesced %d of %d decisions, %d store calls, contention retried %d", lim.Coalesced(), total, slow.calls.Load(), cont)
				if el.limit.Algorithm == counter.TokenBucket {
					return // Count-mode debt is capped (GCRA), not a count
				}
				// Windows: the stored count is total (Count) or q (Refund).
				back := int64(3)
				if el.limit.OnReject == counter.Count {
					back += total - q
				}
				if err := lim.Undo(ctx, key, t0, back); err != nil {
					t.Fatal(err)
				}
				admitted := 0
				for i := 0; i < 6; i++ {
					r, err := lim.AllowN(ctx, key, t0, 1)
					if err != nil {
						t.Fatal(err)
					}
					if r.Allowed {
						admitted++
					}
				}
				if admitted != 3 {
					t.Fatalf("after giving back %d units, %d of 6 admitted, want 3: the batch's count is off", back, admitted)
				}
			})
		}
	}
}

// gateStore blocks every Add, Incr and Gets until release is closed.
type gateStore struct {
	counter.Store
	entered chan struct{}
	release chan struct{}
}

func (g *gateStore) Incr(ctx context.Context, k string, d uint64) (uint64, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Store.Incr(ctx, k, d)
}

func (g *gateStore) Add(ctx context.Context, k string, v []byte, ttl time.Duration) error {
	g.entered <- struct{}{}
	<-g.release
	return g.Store.Add(ctx, k, v, ttl)
}

func (g *gateStore) Gets(ctx context.Context, k string) ([]byte, counter.CASToken, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Store.Gets(ctx, k)
}

// TestCoalescingWaiterCancel: while the leader's call is held in flight,
// waiters queue; those whose context ends before their batch starts leave
// with ctx's error and are not counted; the others are decided exactly.
func TestCoalescingWaiterCancel(t *testing.T) {
	for _, l := range []counter.Limit{
		{Algorithm: counter.FixedWindow, Quantity: 10, Window: time.Minute},
		{Algorithm: counter.TokenBucket, Quantity: 10, Window: time.Hour},
	} {
		t.Run(fmt.Sprint(l.Algorithm), func(t *testing.T) {
			g := &gateStore{Store: noBatch{frozenMemoryStore()}, entered: make(chan struct{}, 256), release: make(chan struct{})}
			lim, err := counter.New(g, l)
			if err != nil {
				t.Fatal(err)
			}
			key := uniqueKey(t)
			type out struct {
				r   counter.Result
				err error
			}
			leader := make(chan out, 1)
			go func() { r, err := lim.AllowN(ctx, key, t0, 1); leader <- out{r, err} }()
			<-g.entered // the leader's call is in flight
			cctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var canceled, admitted atomic.Int64
			for i := 0; i < 8; i++ {
				c := ctx
				if i%2 == 0 {
					c = cctx
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := lim.AllowN(c, key, t0, 2)
					switch {
					case errors.Is(err, context.Canceled):
						canceled.Add(1)
					case err != nil:
						t.Error(err)
					case r.Allowed:
						admitted.Add(1)
					}
				}()
			}
			for lim.Coalesced() < 8 {
				time.Sleep(time.Millisecond)
			}
			cancel()
			for canceled.Load() < 4 {
				time.Sleep(time.Millisecond)
			}
			close(g.release) // leader lands, the batch of 4 goes
			wg.Wait()
			if o := <-leader; o.err != nil || !o.r.Allowed {
				t.Fatalf("leader: %+v %v", o.r, o.err)
			}
			// 1 (leader) + 4×2 = 9 of 10 units: all four admitted, and one
			// unit left, which proves the canceled waiters were not counted.
			if admitted.Load() != 4 || canceled.Load() != 4 {
				t.Fatalf("admitted %d canceled %d, want 4 and 4", admitted.Load(), canceled.Load())
			}
			r, err := lim.AllowN(ctx, key, t0, 1)
			if err != nil || !r.Allowed {
				t.Fatalf("last unit: %+v %v", r, err)
			}
			if r, _ := lim.AllowN(ctx, key, t0, 1); r.Allowed {
				t.Fatal("11th unit admitted")
			}
		})
	}
}

// TestCoalescingSerialOrder: a batch decides as one-by-one requests in
// arrival order. A sliding window with a closed sub-window count and
// requests of mixed cost: each waiter's Remaining is what the serial
// computation gives.
func TestCoalescingSerialOrder(t *testing.T) {
	l := counter.Limit{Algorithm: counter.FixedWindow, Quantity: 10, Window: time.Minute, OnReject: counter.Refund}
	g := &gateStore{Store: noBatch{frozenMemoryStore()}, entered: make(chan struct{}, 256), release: make(chan struct{})}
	lim, err := counter.New(g, l)
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	done := make(chan struct{})
	go func() { lim.AllowN(ctx, key, t0, 1); close(done) }()
	<-g.entered
	// Costs queue in this order: 4 (count 5), 6 (11: rejected, refunded),
	// 3 (8), 2 (10), 1 (11: rejected).
	costs := []int64{4, 6, 3, 2, 1}
	want := []struct {
		allowed   bool
		remaining int64
	}{{true, 5}, {false, 5}, {true, 2}, {true, 0}, {false, 0}}
	res := make([]counter.Result, len(costs))
	var wg sync.WaitGroup
	for i, c := range costs {
		wg.Add(1)
		go func() { defer wg.Done(); res[i], _ = lim.AllowN(ctx, key, t0, c) }()
		for lim.Coalesced() < int64(i+1) {
			time.Sleep(time.Millisecond)
		}
	}
	go func() {
		for range g.entered {
		}
	}()
	close(g.release)
	wg.Wait()
	<-done
	for i, w := range want {
		if res[i].Allowed != w.allowed || res[i].Remaining != w.remaining {
			t.Errorf("waiter %d (cost %d): allowed %v remaining %d, want %v %d", i, costs[i], res[i].Allowed, res[i].Remaining, w.allowed, w.remaining)
		}
	}
}

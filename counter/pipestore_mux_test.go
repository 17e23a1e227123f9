package counter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
)

// TestPipeMuxSemantics: the multiplexed PipeStore answers every Store call
// (the TestStoreSemantics walk) and the Batcher call like the pooled one.
func TestPipeMuxSemantics(t *testing.T) {
	mc := fixture.Memcached(t, 1)
	st := memcached.NewPipeStore(memcached.PipeConfig{Addr: mc[0].Addr, Timeout: time.Second, Multiplex: 2})
	t.Cleanup(func() { st.Close() })
	k := storeSemantics(t, st)
	other := uniqueKey(t, "other")
	vals, n, err := st.GetMultiIncr(ctx, []string{k, other}, uniqueKey(t, "cur"), 3, time.Minute)
	if err != nil || n != 3 || string(vals[k]) != "42" || len(vals) != 1 {
		t.Fatalf("getmultiincr = %q %d %v", vals, n, err)
	}
}

// TestPipeMuxOrder: concurrent calls multiplexed over shared connections
// through mcproxy and 3 shards each get their own reply: every goroutine
// increments its own key and must see 1, 2, 3… Then a limiter over the
// multiplexed store admits exactly its limit.
func TestPipeMuxOrder(t *testing.T) {
	shards := fixture.Memcached(t, 3)
	addr, via := throughMcproxy(t, shards)
	t.Log(via)
	st := memcached.NewPipeStore(memcached.PipeConfig{Addr: addr, Timeout: 10 * time.Second, Multiplex: 2})
	t.Cleanup(func() { st.Close() })
	const goroutines, calls = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := uniqueKey(t, "g"+strconv.Itoa(g))
			if err := st.Add(ctx, k, []byte("0"), time.Minute); err != nil {
				errs <- err
				return
			}
			for i := 1; i <= calls; i++ {
				v, err := st.Incr(ctx, k, 1)
				if err != nil || v != uint64(i) {
					errs <- fmt.Errorf("goroutine %d call %d: %d, %v", g, i, v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	lim, err := counter.New(st, counter.Limit{Quantity: 200, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t, "limited")
	now := time.Now()
	var admitted atomic.Int64
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 400/goroutines; i++ {
				res, err := lim.AllowN(ctx, key, now, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 200 {
		t.Errorf("admitted %d of 400 over the multiplexed store, want 200", got)
	}
}

// TestPipeMuxTimeout: a stalled server fails the calls in flight within
// the timeout; the next calls get a fresh connection and never read the
// stale replies; a cancelled context fails fast.
func TestPipeMuxTimeout(t *testing.T) {
	mc := fixture.Memcached(t, 1)
	st := memcached.NewPipeStore(memcached.PipeConfig{Addr: mc[0].Addr, Timeout: 200 * ms, Multiplex: 1})
	t.Cleanup(func() { st.Close() })
	k := uniqueKey(t)
	if err := st.Add(ctx, k, []byte("1"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := mc[0].Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	fails := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.Incr(ctx, k, 1)
			fails <- err
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := mc[0].Resume(); err != nil {
		t.Fatal(err)
	}
	close(fails)
	for err := range fails {
		if err == nil || errors.Is(err, counter.ErrNotFound) {
			t.Errorf("paused memcached: err = %v", err)
		}
	}
	if elapsed > 3*time.Second {
		t.Errorf("errors after %v, timeout 200ms", elapsed)
	}
	var last uint64
	for i := 0; i < 3; i++ {
		v, err := st.Incr(ctx, k, 1)
		if err != nil {
			t.Fatalf("after resume: %v", err)
		}
		if v <= last || v < 2 {
			t.Fatalf("after resume: value %d after %d (a stale reply?)", v, last)
		}
		last = v
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := st.Incr(cctx, k, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

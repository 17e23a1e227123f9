package counter_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/counting"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/counter/memstore"
)

// TestStoreSemantics runs one suite against every Store: the memory store
// must behave like memcached.
func TestStoreSemantics(t *testing.T) {
	for _, b := range backends(t) {
		if b.store == nil {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			st := b.store()
			k := storeSemantics(t, st)
			if v, err := st.Incr(ctx, k, 1); err != nil || v != 43 {
				t.Fatalf("after cas incr = %d, %v", v, err)
			}
		})
	}
}

// storeSemantics walks a fresh key through the Store calls every store must
// answer like memcached (incr/decr incl. clamping at 0, add, getmulti, gets,
// cas and stale cas) and returns the key, left holding "42".
func storeSemantics(t *testing.T, st counter.Store) string {
	t.Helper()
	k := uniqueKey(t)
	if _, err := st.Incr(ctx, k, 1); !errors.Is(err, counter.ErrNotFound) {
		t.Fatalf("incr missing: %v", err)
	}
	if err := st.Add(ctx, k, []byte("5"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Add(ctx, k, []byte("7"), time.Minute); !errors.Is(err, counter.ErrNotStored) {
		t.Fatalf("second add: %v", err)
	}
	if v, err := st.Incr(ctx, k, 10); err != nil || v != 15 {
		t.Fatalf("incr = %d, %v", v, err)
	}
	if v, err := st.Decr(ctx, k, 6); err != nil || v != 9 {
		t.Fatalf("decr = %d, %v", v, err)
	}
	if v, err := st.Decr(ctx, k, 100); err != nil || v != 0 {
		t.Fatalf("decr below 0 = %d, %v", v, err)
	}
	if v, err := st.Incr(ctx, k, 0); err != nil || v != 0 {
		t.Fatalf("incr 0 = %d, %v", v, err)
	}
	other := uniqueKey(t, "other")
	got, err := st.GetMulti(ctx, []string{k, other})
	if err != nil || len(got) != 1 {
		t.Fatalf("getmulti = %q, %v", got, err)
	}
	if v, _ := strconv.Atoi(string(trim(got[k]))); v != 0 {
		t.Fatalf("getmulti value %q", got[k])
	}
	if _, _, err := st.Gets(ctx, other); !errors.Is(err, counter.ErrNotFound) {
		t.Fatalf("gets missing: %v", err)
	}
	v, tok, err := st.Gets(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	_, tok2, _ := st.Gets(ctx, k)
	if err := st.CompareAndSwap(ctx, k, []byte("42"), tok, time.Minute); err != nil {
		t.Fatalf("cas: %v (value %q)", err, v)
	}
	if err := st.CompareAndSwap(ctx, k, []byte("43"), tok2, time.Minute); !errors.Is(err, counter.ErrCASConflict) {
		t.Fatalf("stale cas: %v", err)
	}
	return k
}

func trim(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

// TestMemcachedTTL checks a window key really expires in memcached (TTL
// whole seconds): polls for at most 4 s.
func TestMemcachedTTL(t *testing.T) {
	var st counter.Store
	for _, b := range backends(t) {
		if b.name == "memcached" {
			st = b.store()
		}
	}
	if st == nil {
		fixture.SkipOrFail(t, procs.ErrNoMemcached)
	}
	k := uniqueKey(t)
	if err := st.Add(ctx, k, []byte("1"), time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(4 * time.Second)
	for {
		if _, err := st.Incr(ctx, k, 0); errors.Is(err, counter.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("key with 1s TTL still present after 4s")
		}
		time.Sleep(100 * ms)
	}
}

// noBatch hides the Batcher of a store: the path of memcached.Store (gomemcache).
type noBatch struct{ counter.Store }

func TestCountingStore(t *testing.T) {
	tests := []struct {
		name             string
		store            counter.Store
		first, newWindow counting.Stats
	}{
		// Batcher: one round trip per decision, the first of a window
		// included.
		{"batcher", frozenMemoryStore(), counting.Stats{Batch: 1, Incr: 9}, counting.Stats{Batch: 1}},
		// Without: the closed window is read once, the new one added.
		{"no batcher", noBatch{frozenMemoryStore()}, counting.Stats{GetMulti: 1, Add: 1, Incr: 9}, counting.Stats{GetMulti: 1, Add: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := counting.New(tc.store)
			lim, err := counter.New(cs, counter.Limit{Quantity: 100, Window: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			key := counter.Key("ip", "198.51.100.1")
			for i := 0; i < 10; i++ {
				if _, err := lim.AllowN(ctx, key, t0.Add(time.Duration(i)*time.Second), 1); err != nil {
					t.Fatal(err)
				}
			}
			s := cs.Stats()
			if s != tc.first {
				t.Fatalf("stats %+v, want %+v", s, tc.first)
			}
			if _, err := lim.AllowN(ctx, key, t0.Add(time.Minute), 1); err != nil {
				t.Fatal(err)
			}
			if d := cs.Stats().Sub(s); d != tc.newWindow {
				t.Fatalf("new window stats %+v, want %+v", d, tc.newWindow)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		l    counter.Limit
		want error
	}{
		{"zero", counter.Limit{}, counter.ErrBadLimit},
		{"no window", counter.Limit{Quantity: 1}, counter.ErrBadLimit},
		{"sub-ms window", counter.Limit{Quantity: 1, Window: 1500 * time.Microsecond}, counter.ErrBadPrecision},
		{"negative burst", counter.Limit{Quantity: 1, Window: time.Second, Burst: -1}, counter.ErrBadLimit},
		{"bad algorithm", counter.Limit{Quantity: 1, Window: time.Second, Algorithm: 9}, counter.ErrBadLimit},
		{"precision indivisible", counter.Limit{Quantity: 1, Window: time.Second, Precision: 7}, counter.ErrBadPrecision},
		{"precision too high", counter.Limit{Quantity: 1, Window: time.Hour, Precision: 5000}, counter.ErrBadPrecision},
		{"huge", counter.Limit{Quantity: 1 << 40, Window: 300 * 24 * time.Hour}, counter.ErrBadLimit},
		{"ok precision 60", counter.Limit{Quantity: 1, Window: time.Minute, Precision: 60}, nil},
		{"ok bucket ns", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 3, Window: time.Second}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := counter.New(memstore.New(), tc.l)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("New(%v) = %v, want %v", tc.l, err, tc.want)
			}
			_, err = counter.NewLocal(tc.l)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("NewLocal(%v) = %v, want %v", tc.l, err, tc.want)
			}
		})
	}
	lo, _ := counter.NewLocal(counter.Limit{Quantity: 1, Window: time.Second})
	if _, err := lo.AllowN(ctx, "k", t0, 0); !errors.Is(err, counter.ErrBadCost) {
		t.Fatalf("n=0: %v", err)
	}
	lim, _ := counter.New(memstore.New(), counter.Limit{Quantity: 1, Window: time.Second})
	if _, err := lim.AllowN(ctx, "bad key", t0, 1); !errors.Is(err, counter.ErrBadKey) {
		t.Fatalf("bad key: %v", err)
	}
}

// TestStoreTimeout: a memcached that stops answering (SIGSTOP) turns into
// an error within the configured timeout, and the store works again once
// it resumes (no poisoned pooled connection).
func TestStoreTimeout(t *testing.T) {
	mc := fixture.Memcached(t, 1)
	stores := map[string]counter.Store{
		"gomemcache": memcached.NewStore(memcached.NewClient(memcached.Config{
			Servers: []string{mc[0].Addr}, Timeout: 200 * ms})),
		"pipe": memcached.NewPipeStore(memcached.PipeConfig{Addr: mc[0].Addr, Timeout: 200 * ms}),
	}
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			k := uniqueKey(t)
			if err := st.Add(ctx, k, []byte("1"), time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := mc[0].Pause(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := st.Incr(ctx, k, 1)
			elapsed := time.Since(start)
			if rerr := mc[0].Resume(); rerr != nil {
				t.Fatal(rerr)
			}
			if err == nil || errors.Is(err, counter.ErrNotFound) {
				t.Fatalf("paused memcached: err = %v", err)
			}
			if elapsed > 3*time.Second {
				t.Fatalf("error after %v, timeout 200ms", elapsed)
			}
			// The stalled reply may still arrive on the old connection;
			// a new call must not read it.
			for i := 0; i < 3; i++ {
				v, err := st.Incr(ctx, k, 1)
				if err != nil {
					t.Fatalf("after resume: %v", err)
				}
				if v < 2 {
					t.Fatalf("after resume: value %d", v)
				}
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := st.Incr(cctx, k, 1); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled context: %v", err)
			}
		})
	}
}

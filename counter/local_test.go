package counter_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

func TestUndo(t *testing.T) {
	limits := []counter.Limit{
		{Quantity: 5, Window: time.Minute},
		{Quantity: 5, Window: time.Minute, Precision: 6},
		{Algorithm: counter.FixedWindow, Quantity: 5, Window: time.Minute},
		{Algorithm: counter.TokenBucket, Quantity: 5, Window: time.Minute},
	}
	for _, b := range backends(t) {
		for _, l := range limits {
			t.Run(b.name+"/"+l.String(), func(t *testing.T) {
				a := b.allower(t, l)
				key := uniqueKey(t)
				now := t0.Add(10 * time.Second)
				for i := 0; i < 5; i++ {
					if r, err := a.AllowN(ctx, key, now, 1); err != nil || !r.Allowed {
						t.Fatalf("request %d: %+v %v", i, r, err)
					}
				}
				if err := a.Undo(ctx, key, now, 2); err != nil {
					t.Fatal(err)
				}
				r, err := a.AllowN(ctx, key, now, 2)
				if err != nil || !r.Allowed || r.Remaining != 0 {
					t.Fatalf("after undo of 2: %+v %v", r, err)
				}
				if r, _ := a.AllowN(ctx, key, now, 1); r.Allowed {
					t.Fatalf("undo gave back more than 2: %+v", r)
				}
			})
		}
	}
}

func TestLocalSweep(t *testing.T) {
	for _, l := range []counter.Limit{
		{Quantity: 5, Window: time.Minute},
		{Quantity: 5, Window: time.Minute, Precision: 4},
		{Algorithm: counter.FixedWindow, Quantity: 5, Window: time.Minute},
		{Algorithm: counter.TokenBucket, Quantity: 5, Window: time.Minute},
	} {
		t.Run(l.String(), func(t *testing.T) {
			a, _ := counter.NewLocal(l)
			lo := localOf{a}
			for i := 0; i < 100; i++ {
				lo.AllowN(ctx, counter.Key("k", string(rune('a'+i%26)), string(rune('a'+i/26))), t0, 1)
			}
			lo.AllowN(ctx, "late", t0.Add(90*time.Second), 1)
			lo.Sweep(t0.Add(time.Second))
			if lo.Len() != 101 {
				t.Fatalf("swept live keys: %d left", lo.Len())
			}
			// At 2m1s the keys of t0 are irrelevant; the key of 1m30s
			// still weighs in a sliding window only (fixed window 1 is
			// over; the bucket refilled at 1m42s).
			lo.Sweep(t0.Add(121 * time.Second))
			want := 0
			if l.Algorithm == counter.SlidingWindow {
				want = 1
			}
			if lo.Len() != want {
				t.Fatalf("after sweep: %d keys, want %d", lo.Len(), want)
			}
		})
	}
}

func TestLimiterCacheSweep(t *testing.T) {
	lim, _ := counter.New(frozenMemoryStore(), counter.Limit{Quantity: 5, Window: time.Second})
	for i := 0; i < 50; i++ {
		lim.AllowN(ctx, counter.Key("k", string(rune('a'+i))), t0, 1)
	}
	if lim.CachedKeys() != 50 {
		t.Fatalf("cached %d", lim.CachedKeys())
	}
	lim.Sweep(t0.Add(time.Second))
	if lim.CachedKeys() != 50 {
		t.Fatalf("swept keys still in the window: %d left", lim.CachedKeys())
	}
	lim.Sweep(t0.Add(3 * time.Second))
	if lim.CachedKeys() != 0 {
		t.Fatalf("after sweep: %d cached", lim.CachedKeys())
	}
}

// TestGrace: a worker whose clock runs ahead reads the previous window
// just after it closed; a lagging worker then adds to it. With a grace the
// late units are seen; without, the cached count misses them.
func TestGrace(t *testing.T) {
	for _, tc := range []struct {
		name          string
		grace         time.Duration
		wantRemaining int64
	}{
		{"no grace caches at once", 0, 3},
		{"grace 100ms re-reads", 100 * ms, 1},
	} {
		for _, st := range []struct {
			name  string
			store func() counter.Store
		}{{"batch", frozenMemoryStore}, {"nobatch", func() counter.Store { return noBatch{frozenMemoryStore()} }}} {
			t.Run(tc.name+"/"+st.name, func(t *testing.T) {
				store := st.store()
				l := counter.Limit{Quantity: 10, Window: time.Minute}
				ahead, _ := counter.NewWithConfig(store, l, counter.Config{Grace: tc.grace})
				lagging, _ := counter.New(store, l)
				key := counter.Key("ip", "192.0.2.1")
				if r, _ := lagging.AllowN(ctx, key, t0.Add(59*time.Second), 5); !r.Allowed {
					t.Fatal("setup rejected")
				}
				if r, _ := ahead.AllowN(ctx, key, t0.Add(time.Minute), 1); r.Remaining != 4 {
					t.Fatalf("first read: %+v", r)
				}
				if r, _ := lagging.AllowN(ctx, key, t0.Add(59950*ms), 2); !r.Allowed {
					t.Fatal("late units rejected")
				}
				r, err := ahead.AllowN(ctx, key, t0.Add(60050*ms), 1)
				if err != nil || r.Remaining != tc.wantRemaining {
					t.Fatalf("got %+v %v, want remaining %d", r, err, tc.wantRemaining)
				}
			})
		}
	}
}

// TestLimiterCacheBound checks that MaxCachedKeys bounds the cache even
// when every cached key is still active (nothing idle to sweep).
func TestLimiterCacheBound(t *testing.T) {
	tests := []struct {
		maxKeys, keys, bound int
	}{
		{64, 20_000, 64},
		{1, 500, 64},     // one per shard at least
		{100, 5000, 128}, // rounded up to a multiple of 64 shards
		{1 << 20, 300, 300},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.maxKeys), func(t *testing.T) {
			lim, err := counter.NewWithConfig(frozenMemoryStore(),
				counter.Limit{Quantity: 5, Window: time.Second},
				counter.Config{MaxCachedKeys: tt.maxKeys})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < tt.keys; i++ {
				if _, err := lim.AllowN(ctx, counter.Key("k", strconv.Itoa(i)), t0, 1); err != nil {
					t.Fatal(err)
				}
				if n := lim.CachedKeys(); n > tt.bound {
					t.Fatalf("after %d keys: %d cached, bound %d", i+1, n, tt.bound)
				}
			}
			if tt.keys <= tt.bound && lim.CachedKeys() != tt.keys {
				t.Fatalf("cached %d, want all %d", lim.CachedKeys(), tt.keys)
			}
		})
	}
}

// localOf is a NewLocal limiter with its Sweep and its key count.
type localOf struct{ counter.Allower }

func (lo localOf) Sweep(now time.Time) { lo.Allower.(interface{ Sweep(time.Time) }).Sweep(now) }
func (lo localOf) Len() int            { return counter.LocalLen(lo.Allower) }

package pop

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// leasePolicy: one fixed-window limit per API key, leased or not.
func leasePolicy(lease bool, q int) string { return leasePolicyMode(lease, q, "refund") }

func leasePolicyMode(lease bool, q int, onReject string) string {
	return fmt.Sprintf(`version: 1
api_key: {header: X-API-Key}
tiers:
  t:
    limits:
      - {name: w, algorithm: fixed_window, quantity: %d, window: 1s, on_reject: %s}
policies:
  - name: p
    routes: ["/"]
    identity: [api_key]
    tier: t
    lease: {enabled: %v, horizon: 50ms}
`, q, onReject, lease)
}

// admitRun drives `workers` limiters sharing one store with a client
// sending rate req/s (spread at random over the workers) for secs seconds
// of simulated time, plus `idle` clients sending one request per second.
// It returns the admitted count per window of the busy client and the
// number of store calls.
func admitRun(t *testing.T, lease bool, onReject string, q, workers int, rate float64, secs int) (perWindow, sent []int, storeCalls int64) {
	t.Helper()
	clk := newTestClock(t0)
	store := newFlakyStore(clk.Now)
	ls := make([]*Limiter, workers)
	for i := range ls {
		cfg := storeConfig(store)
		cfg.WorkersPerPoP = workers
		ls[i] = newTestLimiter(t, cfg, leasePolicyMode(lease, q, onReject))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	perWindow = make([]int, secs)
	sent = make([]int, secs)
	step := time.Duration(float64(time.Second) / rate)
	for at := time.Duration(0); at < time.Duration(secs)*time.Second; at += step {
		now := t0.Add(at)
		clk.Set(now)
		w := ls[rng.IntN(workers)]
		sent[int(at/time.Second)]++
		if d := w.Decide(context.Background(), req("GET", "/", "X-API-Key", "busy"), now); d.Allowed {
			perWindow[int(at/time.Second)]++
		}
	}
	return perWindow, sent, store.calls.Load()
}

// TestLeasingAdmission measures over- and under-admission of leased vs
// non-leased decisions: 4 workers sharing one count, one client at 2×, 1×
// and 0.5× its 200/s fixed-window limit. Over-admission is admitted above
// the limit in a window; under-admission is what an exact counter would
// have admitted (min(sent, limit)) minus what was admitted.
func TestLeasingAdmission(t *testing.T) {
	const q, workers, secs = 200, 4, 5
	for _, tc := range []struct {
		load     float64
		onReject string
	}{{2, "refund"}, {1, "refund"}, {0.5, "refund"}, {2, "count"}, {1, "count"}} {
		load := tc.load
		for _, lease := range []bool{false, true} {
			per, sent, calls := admitRun(t, lease, tc.onReject, q, workers, load*q, secs)
			over, under, total := 0, 0, 0
			for i, n := range per {
				total += sent[i]
				over += max(0, n-q)
				under += max(0, min(sent[i], q)-n)
			}
			t.Logf("%s load %.1f× lease=%-5v: admitted per window %v (limit %d); over %d, under %d; %d store calls for %d requests",
				tc.onReject, load, lease, per, q, over, under, calls, total)
			if over != 0 {
				t.Errorf("load %.1f× lease=%v over-admitted %d (fixed window must never exceed)", load, lease, over)
			}
			if !lease && under != 0 {
				t.Errorf("load %.1f× non-leased under-admitted %d", load, under)
			}
			// Leases may strand at most one max batch per worker per window.
			if lease && under > secs*workers*(q/(4*workers)) {
				t.Errorf("load %.1f× leased under-admitted %d, more than one max batch per worker per window", load, under)
			}
		}
	}
}

// TestLeasingIdleKeysStrandNothing: a key seen once a second never leases
// more than the request itself.
func TestLeasingIdleKeysStrandNothing(t *testing.T) {
	clk := newTestClock(t0)
	store := newFlakyStore(clk.Now)
	l := newTestLimiter(t, storeConfig(store), leasePolicy(true, 100))
	for i := 0; i < 5; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		clk.Set(now)
		if d := l.Decide(context.Background(), req("GET", "/", "X-API-Key", "idle"), now); !d.Allowed || d.Binding.Result.Remaining != 99 {
			t.Fatalf("idle request %d: %+v", i, d)
		}
	}
}

func TestLeaseServesLocally(t *testing.T) {
	clk := newTestClock(t0)
	store := newFlakyStore(clk.Now)
	l := newTestLimiter(t, storeConfig(store), leasePolicy(true, 1000))
	local := 0
	for i := 0; i < 400; i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		clk.Set(now)
		d := l.Decide(context.Background(), req("GET", "/", "X-API-Key", "hot"), now)
		if !d.Allowed {
			t.Fatalf("request %d rejected: %+v", i, d)
		}
		if d.Reason == ReasonLease {
			local++
		}
	}
	if local < 200 {
		t.Fatalf("only %d of 400 requests at 1000/s served from leases", local)
	}
	for k := range store.keys {
		if strings.Contains(k, "hot") {
			t.Fatalf("clear key in store key %q", k)
		}
	}
}

// TestLeaseBatchNeverOverAdmits pins leased admission against the limit
// when a batch is bigger than what is left (or than the limit itself):
// another worker has already counted `other` requests, then one worker
// leasing at a high arrival rate asks `takes` times in the same instant.
func TestLeaseBatchNeverOverAdmits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		limit    string
		maxBatch int64 // 0: the policy's leaser; else a leaser of this max batch
		other    int64 // requests counted by another worker first
		want     int   // admitted by the leasing worker
	}{
		{"window count, batch over the limit", "{name: w, algorithm: fixed_window, quantity: 10, window: 1s}", 100, 8, 2},
		{"window count, batch over the limit, cost 2", "{name: w, algorithm: fixed_window, quantity: 10, window: 1s, cost: 2}", 100, 4, 1},
		{"window count, max batch at the limit", "{name: w, algorithm: fixed_window, quantity: 10, window: 1s}", 10, 8, 2},
		{"window refund, batch over the limit", "{name: w, algorithm: fixed_window, quantity: 10, window: 1s, on_reject: refund}", 100, 8, 2},
		{"bucket count, batch over tokens left", "{name: b, algorithm: token_bucket, quantity: 10, window: 1s, burst: 10}", 0, 5, 5},
		{"bucket refund, batch over tokens left", "{name: b, algorithm: token_bucket, quantity: 10, window: 1s, burst: 10, on_reject: refund}", 0, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newTestClock(t0)
			store := newFlakyStore(clk.Now)
			policyBatch := 8 // more than the 5 tokens left
			if tc.maxBatch > 0 {
				policyBatch = 5 // unused; within every limit's allowance ÷ cost
			}
			l := newTestLimiter(t, storeConfig(store), fmt.Sprintf(`version: 1
tiers:
  t:
    limits:
      - %s
policies:
  - name: p
    routes: ["/"]
    tier: t
    lease: {enabled: true, max_batch: %d, horizon: 50ms}
`, tc.limit, policyBatch))
			r := l.snap.Load().policies["p"].tiers["t"].limits[0]
			ctx := context.Background()
			if res, err := r.shared.AllowN(ctx, "k", t0, tc.other*r.cost); err != nil || !res.Allowed {
				t.Fatalf("other worker: %+v %v", res, err)
			}
			le := r.lease
			if tc.maxBatch > 0 {
				le = newLeaser(r.shared, r.cost, tc.maxBatch, 50*time.Millisecond, 100)
			}
			le.get("k", t0).rate = 1e6 // batches as big as allowed
			got := 0
			for range 20 {
				res, _, err := le.take(ctx, "k", t0, 1)
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					got++
				}
			}
			if got != tc.want {
				t.Errorf("admitted %d after %d counted elsewhere, want %d", got, tc.other, tc.want)
			}
		})
	}
}

// testLeaser builds a leaser holding at most maxKeys leases, enough to
// exercise get's eviction (no store).
func testLeaser(maxKeys int) *leaser {
	l := &leaser{perShard: max(1, maxKeys/leaseShards)}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*lease)
	}
	return l
}

func (l *leaser) examined() int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += l.shards[i].examined
		l.shards[i].mu.Unlock()
	}
	return n
}

// TestLeaseEvictionIsBounded: inserting a new key into a shard full of
// leases looks at no more than evictSample leases, whether they are idle
// or not, and a shard never holds more than per (all idle) or 2×per (none
// idle) leases.
func TestLeaseEvictionIsBounded(t *testing.T) {
	const maxKeys = 16 * 4096 // 4,096 per shard
	for _, tc := range []struct {
		name  string
		idle  bool
		bound int // per shard
	}{
		{"busy", false, 2 * 4096},
		{"idle", true, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLeaser(maxKeys)
			now := t0
			insert := func(k string) {
				le := l.get(k, now)
				le.mu.Lock()
				if !tc.idle {
					le.expires = now.Add(time.Hour)
				}
				le.mu.Unlock()
			}
			for i := 0; i < 3*maxKeys; i++ {
				insert(fmt.Sprint("k", i))
			}
			before := l.examined()
			const inserts = 10000
			for i := 0; i < inserts; i++ {
				insert(fmt.Sprint("n", i))
			}
			if got := l.examined() - before; got > inserts*evictSample || got == 0 {
				t.Fatalf("%d inserts into full shards examined %d leases, want 1..%d", inserts, got, inserts*evictSample)
			}
			for i := range l.shards {
				if n := len(l.shards[i].m); n > tc.bound || n < tc.bound/2 {
					t.Fatalf("shard %d holds %d leases, want %d..%d", i, n, tc.bound/2, tc.bound)
				}
			}
		})
	}
}

// TestLeaseEvictionSparesLockedLeases: a lease in use is never dropped.
func TestLeaseEvictionSparesLockedLeases(t *testing.T) {
	l := testLeaser(leaseShards) // one lease per shard
	held := l.get("held", t0)
	held.mu.Lock()
	defer held.mu.Unlock()
	s := &l.shards[0]
	for i := range l.shards {
		if _, ok := l.shards[i].m["held"]; ok {
			s = &l.shards[i]
		}
	}
	for i := 0; i < 1000; i++ {
		l.get(fmt.Sprint("k", i), t0.Add(time.Hour))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m["held"] != held {
		t.Fatal("a locked lease was evicted")
	}
}

// BenchmarkLeaseGetFullShard inserts new keys into leasers whose shards
// are full of leases that are not idle (the worst case for eviction).
func BenchmarkLeaseGetFullShard(b *testing.B) {
	b.ReportAllocs()
	const maxKeys = 100000
	l := testLeaser(maxKeys)
	keys := make([]string, 4*maxKeys)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	busy := func(k string) {
		le := l.get(k, t0)
		le.mu.Lock()
		le.expires = t0.Add(time.Hour)
		le.mu.Unlock()
	}
	for _, k := range keys[:2*maxKeys] {
		busy(k)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		busy(keys[i%len(keys)])
	}
}

package bench

import (
	"context"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestMemoryEndToEnd writes limiters through a PoP of real memcached and
// reads memcached's accounting: a fixed window is one item per limiter, a
// sliding window of precision N is N+1.
func TestMemoryEndToEnd(t *testing.T) {
	fixture.RequireMemcached(t)
	env := newTestEnv(t, false)
	rep, err := runMemory(context.Background(), env, MemoryConfig{Limiters: 500, Precisions: []int{1, 4}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"fixed0": 1, "token0": 1, "sliding1": 2, "sliding4": 5}
	for _, r := range rep.Rows {
		key := r.Algorithm + string(rune('0'+r.Precision))
		if w, ok := want[key]; !ok || r.ItemsPerLimiter < w-0.01 || r.ItemsPerLimiter > w+0.01 {
			t.Errorf("%s N=%d: %.3f items per limiter, want %v", r.Algorithm, r.Precision, r.ItemsPerLimiter, w)
		}
		if r.BytesPerItem < 40 || r.BytesPerItem > 300 || r.SlabBytesPerLimiter < r.ItemsPerLimiter*r.BytesPerItem {
			t.Errorf("%s N=%d: implausible sizes %+v", r.Algorithm, r.Precision, r)
		}
		t.Logf("%s N=%d: %.2f items/limiter, %.1f bytes/item, %.0f slab bytes/limiter, chunks %v",
			r.Algorithm, r.Precision, r.ItemsPerLimiter, r.BytesPerItem, r.SlabBytesPerLimiter, r.ChunkSizes)
	}
}

package pop

import (
	"fmt"
	"testing"
	"time"
)

func TestMitigationCacheExpiryAndBound(t *testing.T) {
	c := newMitigationCache(64)
	c.put("a", t0, t0.Add(time.Second), mitEntry{tier: "free"})
	if _, ok := c.get("a", t0.Add(999*time.Millisecond)); !ok {
		t.Fatal("entry must block before its deadline")
	}
	if _, ok := c.get("a", t0.Add(time.Second)); ok {
		t.Fatal("entry must stop blocking at its deadline")
	}
	for i := 0; i < 10000; i++ {
		c.put(fmt.Sprint("k", i), t0, t0.Add(time.Hour), mitEntry{})
	}
	if n := c.len(); n > 64 {
		t.Fatalf("cache holds %d entries, bound is 64", n)
	}
	// Expired entries go first.
	c2 := newMitigationCache(mitShards) // one entry per shard
	c2.put("old", t0, t0.Add(time.Millisecond), mitEntry{})
	sh := c2.shard("old")
	var other string
	for i := 0; ; i++ {
		if k := fmt.Sprint("x", i); c2.shard(k) == sh {
			other = k
			break
		}
	}
	c2.put(other, t0.Add(time.Second), t0.Add(time.Hour), mitEntry{})
	if _, ok := c2.get(other, t0.Add(2*time.Second)); !ok {
		t.Fatal("new entry missing")
	}
}

// TestMitigationCacheEvictionIsBounded checks that an insert into a full
// cache looks at no more than mitEvictSample entries, however big a shard
// is, and that the bound on entries holds.
func TestMitigationCacheEvictionIsBounded(t *testing.T) {
	const max = 64 * 1024 // 2,048 per shard
	c := newMitigationCache(max)
	for i := 0; i < 2*max; i++ {
		c.put(fmt.Sprint("k", i), t0, t0.Add(time.Hour), mitEntry{})
	}
	before := 0
	for i := range c.shards {
		before += c.shards[i].examined
	}
	const inserts = 10000
	for i := 0; i < inserts; i++ {
		c.put(fmt.Sprint("n", i), t0, t0.Add(time.Hour), mitEntry{})
	}
	after := 0
	for i := range c.shards {
		after += c.shards[i].examined
	}
	if got := after - before; got > inserts*mitEvictSample || got == 0 {
		t.Fatalf("%d inserts into a full cache examined %d entries, want 1..%d", inserts, got, inserts*mitEvictSample)
	}
	if n := c.len(); n != max {
		t.Fatalf("cache holds %d entries, want exactly %d", n, max)
	}
}

// TestMitigationCacheEvictsExpiredFirst: in a full shard where one entry
// per sample-size is expired, an insert always drops an expired entry
// when its sample holds one, so live entries outlast expired ones.
func TestMitigationCacheEvictsExpiredFirst(t *testing.T) {
	c := newMitigationCache(mitShards) // one entry per shard
	for i := 0; i < 1000; i++ {
		c.put(fmt.Sprint("old", i), t0, t0.Add(time.Millisecond), mitEntry{})
	}
	now := t0.Add(time.Second)
	for i := 0; i < 1000; i++ {
		k := fmt.Sprint("live", i)
		c.put(k, now, now.Add(time.Hour), mitEntry{})
		if _, ok := c.get(k, now); !ok {
			t.Fatalf("entry %s dropped right after its insert", k)
		}
	}
	// With one entry per shard every shard now holds a live entry: the
	// expired ones had the earliest deadline and went first.
	for i := range c.shards {
		for k, e := range c.shards[i].m {
			if e.until <= now.UnixNano() {
				t.Fatalf("expired entry %s kept over live ones", k)
			}
		}
	}
}

// BenchmarkMitigationPutFull inserts new keys into a full cache of 64Ki
// entries (2,048 per shard).
func BenchmarkMitigationPutFull(b *testing.B) {
	b.ReportAllocs()
	const max = 64 * 1024
	c := newMitigationCache(max)
	keys := make([]string, 2*max)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	for _, k := range keys[:max] {
		c.put(k, t0, t0.Add(time.Hour), mitEntry{})
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c.put(keys[i%len(keys)], t0, t0.Add(time.Hour), mitEntry{})
	}
}

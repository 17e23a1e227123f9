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

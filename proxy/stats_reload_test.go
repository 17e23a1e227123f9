package proxy_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/proxy"
)

// TestStatsCountersSurviveReload: a reload replaces the pool's Router;
// once the old one has drained and closed, its request_bytes,
// response_bytes and fragments stay in the totals (counters never go
// back), for a shard kept across the reload.
func TestStatsCountersSurviveReload(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 3)
	a := shardAddrs(ms)
	p := newTestProxy(t, proxy.ProxyConfig{}, []proxy.PoolSpec{spec("alpha", a[0], a[1])})
	c := dialMC(t, "tcp", p.Addr("alpha").String())
	// Keys on both shards (Twemproxy's fnv1a_64 groups similar short
	// keys: pick them by placement).
	rt := p.Server("alpha").Router()
	var keys []string
	var on [2]int
	for n := 0; on[0] < 5 || on[1] < 5; n++ {
		if n > 10000 {
			t.Fatal("no keys on both shards")
		}
		k := "k" + strconv.Itoa(n)
		if i := rt.Locate([]byte(k)); on[i] < 5 {
			on[i]++
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if rep, err := c.do("set " + k + " 0 0 1\r\nx\r\n"); err != nil || rep != "STORED\r\n" {
			t.Fatalf("set: %q %v", rep, err)
		}
	}
	if rep, err := c.do("get " + strings.Join(keys, " ") + "\r\n"); err != nil || !strings.HasSuffix(rep, "END\r\n") {
		t.Fatalf("multi-get: %q %v", rep, err)
	}
	var before statsDoc
	settle(t, func(errorf func(string, ...any)) {
		before = readStats(t, p)
		if before.server("alpha", a[0], "out_queue") != 0 || before.server("alpha", a[1], "out_queue") != 0 {
			errorf("replies still outstanding")
		}
	})
	if before.pool("alpha", "fragments") != 2 || before.server("alpha", a[0], "request_bytes") == 0 {
		t.Fatalf("before the reload: fragments %d, request_bytes %d", before.pool("alpha", "fragments"), before.server("alpha", a[0], "request_bytes"))
	}

	// Keep shard 0, replace shard 1 by shard 2; wait until the old Router
	// has drained and closed.
	if err := p.Reload([]proxy.PoolSpec{spec("alpha", a[0], a[2])}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "old shards closed", func() bool { return p.Draining() == 0 })
	after := readStats(t, p)
	for _, f := range []string{"request_bytes", "response_bytes", "requests", "responses"} {
		if b, n := before.server("alpha", a[0], f), after.server("alpha", a[0], f); n < b {
			t.Errorf("%s of the kept shard went back after the reload: %d -> %d", f, b, n)
		}
	}
	if b, n := before.pool("alpha", "fragments"), after.pool("alpha", "fragments"); n < b {
		t.Errorf("fragments went back after the reload: %d -> %d", b, n)
	}
	text := scrape(t, p)
	if got := metricValue(t, text, `mcproxy_pool_fragments_total{pool="alpha"}`); got < 2 {
		t.Errorf("mcproxy_pool_fragments_total = %v after the reload, want >= 2", got)
	}
	if got := metricValue(t, text, `mcproxy_shard_request_bytes_total{pool="alpha",shard="`+a[0]+`"}`); got < float64(before.server("alpha", a[0], "request_bytes")) {
		t.Errorf("mcproxy_shard_request_bytes_total went back to %v", got)
	}
}

package proxy_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/proxy"
)

// TestReloadWarmsShardsBeforeTraffic: a reload that adds a shard to a
// running pool opens the new Router's connections (and checks "version" on
// each) before requests switch to it: right after Reload returns, with no
// request sent since, every shard, the new one included, holds the pool's
// ServerConnections connections from the proxy; a shard that does not
// answer is no reason to reject the reload, and its warm-up failure does
// not count towards its ejection.
func TestReloadWarmsShardsBeforeTraffic(t *testing.T) {
	ms := fixture.Memcached(t, 3)
	s := spec("p", ms[0].Addr, ms[1].Addr)
	s.ServerConnections = 2
	p := newTestProxy(t, proxy.ProxyConfig{}, []proxy.PoolSpec{s})
	curr := func(addr string) uint64 { v, _ := memcachedStat(t, addr, "curr_connections"); return v }
	before := []uint64{curr(ms[0].Addr), curr(ms[1].Addr), curr(ms[2].Addr)}

	s2 := spec("p", ms[0].Addr, ms[1].Addr, ms[2].Addr)
	s2.ServerConnections = 2
	if err := p.Reload([]proxy.PoolSpec{s2}); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		// The first pool never dialled (no traffic): its Router holds no
		// connection, so every shard gains exactly the new Router's two.
		if got := curr(m.Addr); got != before[i]+2 {
			t.Errorf("shard %d: %d connections after the reload, want %d (+2 warmed)", i, got, before[i]+2)
		}
	}
	c := dialMC(t, "tcp", p.Addr("p").String())
	for k := range 30 {
		if got, err := c.do("set {k" + strings.Repeat("x", k) + "} 0 0 1\r\na\r\n"); err != nil || got != "STORED\r\n" {
			t.Fatalf("set after the reload: %q, %v", got, err)
		}
	}

	// A shard that refuses: the reload goes through (it is logged), and the
	// warm-up's failure is not one of the two that eject it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	s3 := spec("p", ms[0].Addr, ms[1].Addr, ms[2].Addr, dead)
	s3.Timeout, s3.AutoEjectHosts, s3.ServerFailureLimit = 300*time.Millisecond, true, 1
	if err := p.Reload([]proxy.PoolSpec{s3}); err != nil {
		t.Fatalf("reload with a refusing shard: %v", err)
	}
	if !p.Server("p").Router().Membership().Live(3) {
		t.Errorf("the refusing shard was ejected by its warm-up (failure limit 1)")
	}
}

package proxy_test

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poplimit/poplimit/proxy"
	"github.com/poplimit/poplimit/proxy/embedded"
	"github.com/poplimit/poplimit/shard"
)

// holdBackend keeps every call until release, then answers a miss.
type holdBackend struct {
	mu     sync.Mutex
	held   []*proxy.Call
	closed bool
}

func (h *holdBackend) Do(c *proxy.Call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, c)
}

func (h *holdBackend) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.held {
		c.Reply = append(c.Reply, "END\r\n"...)
		c.Finish(nil)
	}
	h.held = nil
}

func (h *holdBackend) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, c := range h.held {
		c.Finish(proxy.ErrBackendClosed)
	}
	h.held = nil
	return nil
}

func (h *holdBackend) state() (held int, closed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held), h.closed
}

// TestReloadFinishesInFlightOnOldShards: a request held by a shard when a
// reload replaces the shard list is answered by that shard, not failed;
// the old shard is closed only after it answered; requests read after the
// reload go to the new shards.
func TestReloadFinishesInFlightOnOldShards(t *testing.T) {
	noLeaks(t)
	hold := &holdBackend{}
	cfg := proxy.ProxyConfig{NewBackend: func(pool string, i int, s shard.Server, h proxy.BackendHooks) (proxy.Backend, error) {
		if s.Addr == "hold" {
			return hold, nil
		}
		return proxy.NewEmbeddedForTest(embedded.Config{})
	}}
	p := newTestProxy(t, cfg, []proxy.PoolSpec{spec("alpha", "hold")})
	addr := p.Addr("alpha").String()
	c := dialMC(t, "tcp", addr)
	if _, err := c.c.Write([]byte("get a\r\n")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "call held", func() bool { n, _ := hold.state(); return n == 1 })
	if err := p.Reload([]proxy.PoolSpec{spec("alpha", "mem")}); err != nil {
		t.Fatal(err)
	}
	other := dialMC(t, "tcp", addr)
	if rep, err := other.do("set b 0 0 1\r\nx\r\n"); err != nil || rep != "STORED\r\n" {
		t.Fatalf("set on the new shards: %q %v", rep, err)
	}
	if _, closed := hold.state(); closed {
		t.Fatal("old shard closed with a call in flight")
	}
	hold.release()
	if line, err := c.br.ReadString('\n'); err != nil || line != "END\r\n" {
		t.Fatalf("held get answered %q %v, want END from the old shard", line, err)
	}
	if rep, err := c.do("get b\r\n"); err != nil || rep != "VALUE b 0 1\r\nx\r\nEND\r\n" {
		t.Fatalf("same connection after the reload: %q %v", rep, err)
	}
	waitUntil(t, "old shard closed after draining", func() bool { _, closed := hold.state(); return closed })
	if strings.Contains(string(p.StatsJSON("t")), `"hold"`) {
		t.Errorf("stats still list the removed shard")
	}
}

// TestProxyShutdownAnswersInFlight: Shutdown stops accepting at once,
// answers the request a shard is still working on, then closes.
func TestProxyShutdownAnswersInFlight(t *testing.T) {
	noLeaks(t)
	hold := &holdBackend{}
	p := proxy.NewProxy(proxy.ProxyConfig{NewBackend: func(string, int, shard.Server, proxy.BackendHooks) (proxy.Backend, error) {
		return hold, nil
	}})
	if err := p.Reload([]proxy.PoolSpec{spec("alpha", "hold")}); err != nil {
		t.Fatal(err)
	}
	addr := p.Addr("alpha").String()
	c := dialMC(t, "tcp", addr)
	if _, err := c.c.Write([]byte("get a\r\n")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "call held", func() bool { n, _ := hold.state(); return n == 1 })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := contextTimeout(10 * time.Second)
		defer cancel()
		done <- p.Shutdown(ctx)
	}()
	waitUntil(t, "listener closed", func() bool {
		nc, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = nc.Close()
		}
		return err != nil
	})
	hold.release()
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(c.br)
	if err != nil || string(rest) != "END\r\n" {
		t.Fatalf("in-flight reply then close: %q %v", rest, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, closed := hold.state(); !closed {
		t.Errorf("shard not closed by Shutdown")
	}
	if err := p.Reload([]proxy.PoolSpec{spec("alpha", "hold")}); !errors.Is(err, proxy.ErrServerClosed) {
		t.Errorf("Reload after Shutdown: %v", err)
	}
}

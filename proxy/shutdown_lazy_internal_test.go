package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/shard"
)

// connStates describes every open client connection's output state, for
// a failure message.
func (s *Server) connStates() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for cc := range s.conns {
		o := &cc.out
		o.mu.Lock()
		unfinished := -1
		if o.head != nil {
			unfinished = 0
			for _, c := range o.head.calls {
				if !c.finished.Load() {
					unfinished++
				}
			}
		}
		fmt.Fprintf(&b, "conn %d: eof=%v head=%v (unfinished calls %d) busy=%v dead=%v buf=%d queued=%d held=%d stopped=%v\n",
			cc.id, o.eof, o.head != nil, unfinished, o.busy, o.dead, len(o.buf), len(cc.entries), cc.held.Load(), cc.stopped.Load())
		o.mu.Unlock()
	}
	return b.String()
}

// TestShutdownAfterLazyClientLeft: a client pipelines gets of big values
// from real memcached shards, reads nothing (the byte budget pauses it)
// and hangs up; Shutdown then ends within its deadline, every time
// (mcproxy once hung on SIGTERM after such a client).
func TestShutdownAfterLazyClientLeft(t *testing.T) {
	const value, keys, gets = 900 << 10, 8, 300
	var servers []shard.Server
	for _, m := range fixture.Memcached(t, 3) {
		servers = append(servers, shard.Server{Addr: m.Addr})
	}
	val := strings.Repeat("v", value)
	var req strings.Builder
	for i := range gets {
		fmt.Fprintf(&req, "get big%d\r\n", i%keys)
	}
	for run := range 12 {
		r, err := NewRouter(RouterConfig{Servers: servers, HashTag: shard.DefaultHashTag(), Pool: PoolConfig{Timeout: 5 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		srv, addr := listenServer(t, ServerConfig{Router: r})
		if run == 0 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for k := range keys {
				fmt.Fprintf(c, "set big%d 0 0 %d\r\n%s\r\n", k, value, val)
				if l, err := br.ReadString('\n'); l != "STORED\r\n" {
					t.Fatalf("set: %q %v", l, err)
				}
			}
			_ = c.Close()
		}
		lazy, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.WriteString(lazy, req.String()) }()
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
		_ = lazy.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		errc := make(chan error, 1)
		go func() { errc <- srv.Shutdown(ctx) }()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("run %d: Shutdown: %v; open connections:\n%s", run, err, srv.connStates())
			}
		case <-time.After(6 * time.Second):
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
			t.Fatalf("run %d: Shutdown hangs past its deadline; open connections:\n%s\ngoroutines:\n%s", run, srv.connStates(), stacks.String())
		}
		cancel()
		_ = r.Close()
	}
}

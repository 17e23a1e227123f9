package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/proxy"
	"github.com/poplimit/poplimit/proxy/embedded"
	"github.com/poplimit/poplimit/proxy/protocol"
	"github.com/poplimit/poplimit/shard"
)

// benchRoundTrips drives addr from parallel connections, each sending depth
// pipelined requests (incr on a rate-limit style key, and get) and reading
// their replies, and reports requests/s.
func benchRoundTrips(b *testing.B, addr string, depth int) {
	// Seed the counters.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	var seed bytes.Buffer
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&seed, "set rl:{user%d}:w1 0 0 1 noreply\r\n0\r\n", i)
	}
	seed.WriteString("version\r\n")
	_, _ = c.Write(seed.Bytes())
	_, _ = bufio.NewReader(c).ReadString('\n')
	c.Close()

	var id atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		w := id.Add(1)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReaderSize(c, 64<<10)
		var req []byte
		i := 0
		for pb.Next() {
			req = req[:0]
			for d := 0; d < depth; d++ {
				i++
				k := strconv.Itoa(int(w)*7919 + i%1000)
				if i%2 == 0 {
					req = append(req, "incr rl:{user"+k+"}:w1 1\r\n"...)
				} else {
					req = append(req, "get rl:{user"+k+"}:w1\r\n"...)
				}
			}
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			for d := 0; d < depth; d++ {
				line, err := br.ReadSlice('\n')
				if err != nil {
					b.Error(err)
					return
				}
				if bytes.HasPrefix(line, []byte("VALUE ")) {
					if _, err := br.ReadSlice('\n'); err != nil { // data
						b.Error(err)
						return
					}
					if _, err := br.ReadSlice('\n'); err != nil { // END
						b.Error(err)
						return
					}
				}
			}
		}
	})
	b.ReportMetric(float64(b.N*depth)/time.Since(start).Seconds(), "req/s")
	// CPU of this process (load generator and, for the in-process proxy,
	// the proxy) per request: steadier than req/s on a shared machine.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Microsecond)/float64(b.N*depth), "cpu-µs/req")
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProxy: requests through the proxy over three real memcached
// shards, and through nutcracker over the same shards when installed;
// "direct" is one memcached without a proxy, for scale.
func BenchmarkProxy(b *testing.B) {
	ms := fixture.Memcached(b, 3)
	p := startProxy(b, shardAddrs(ms), func(rc *proxy.RouterConfig) {
		rc.Pool.Connections = 2
	})
	nc := startNutcracker(b, shardAddrs(ms))
	// conns is the number of client connections: GOMAXPROCS × parallelism.
	for _, conns := range []int{16, 64} {
		for _, depth := range []int{1, 16} {
			suffix := "/conns=" + strconv.Itoa(conns) + "/depth=" + strconv.Itoa(depth)
			par := max(1, conns/runtime.GOMAXPROCS(0))
			b.Run("proxy"+suffix, func(b *testing.B) {
				b.SetParallelism(par)
				benchRoundTrips(b, p.addr, depth)
			})
			if nc != "" {
				b.Run("nutcracker"+suffix, func(b *testing.B) {
					b.SetParallelism(par)
					benchRoundTrips(b, nc, depth)
				})
			}
			b.Run("direct"+suffix, func(b *testing.B) {
				b.SetParallelism(par)
				benchRoundTrips(b, ms[0].Addr, depth)
			})
		}
	}
}

// startNutcracker runs Debian's nutcracker (Twemproxy 0.5.0) over addrs
// with an equivalent pool (ketama, one connection per shard); "" when it is
// not installed.
func startNutcracker(b *testing.B, addrs []string) string {
	if !procs.NutcrackerInstalled() {
		return ""
	}
	pool := procs.TwemproxyPool{Name: "p", Hash: "fnv1a_64", HashTag: "{}", TimeoutMS: 400, ServerConnections: 2}
	for _, a := range addrs {
		pool.Servers = append(pool.Servers, a+":1")
	}
	return fixture.Nutcracker(b, pool).Addr
}

// BenchmarkProxyEmbedded: the same load on in-process memory shards (the
// proxy's own cost without memcached).
func BenchmarkProxyEmbedded(b *testing.B) {
	p := startProxy(b, []string{"m0", "m1", "m2"}, func(rc *proxy.RouterConfig) {
		rc.NewBackend = func(int, shard.Server, proxy.BackendHooks) (proxy.Backend, error) {
			return proxy.NewEmbeddedForTest(embedded.Config{})
		}
	})
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	benchRoundTrips(b, p.addr, 16)
}

// BenchmarkPool: Pool.Do of incr against one real memcached from parallel
// goroutines (one Call each, reused), the backend path without a client
// socket: allocations per request and requests per write batch.
func BenchmarkPool(b *testing.B) {
	ms := fixture.Memcached(b, 1)
	p, err := proxy.NewPool(proxy.PoolConfig{Addr: ms[0].Addr, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.SetParallelism(32)
	var id atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := proxy.NewCall()
		c.Conn = id.Add(1)
		req := &protocol.Request{Cmd: protocol.CmdIncr, Keys: [][]byte{[]byte("bench:pool:" + strconv.FormatUint(c.Conn, 10))}, Delta: 1}
		for pb.Next() {
			c.Req, c.Reply, c.Err, c.Start = req, c.Reply[:0], nil, time.Time{}
			p.Do(c)
			c.Wait()
			if c.Err != nil {
				b.Error(c.Err)
				return
			}
		}
	})
}

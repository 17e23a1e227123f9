package proxycmp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// sumCounters returns the sum of the numeric values of keys prefix0..n-1
// held by the memcached at addr.
func sumCounters(t *testing.T, addr, prefix string, n int) int64 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	var sum int64
	for lo := 0; lo < n; lo += 100 {
		var b strings.Builder
		b.WriteString("get")
		for k := lo; k < min(lo+100, n); k++ {
			fmt.Fprintf(&b, " %s%d", prefix, k)
		}
		b.WriteString("\r\n")
		if _, err := c.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if line == "END\r\n" {
				break
			}
			data, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			v, err := strconv.ParseInt(strings.TrimSpace(data), 10, 64)
			if err != nil {
				t.Fatalf("value of %q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

func TestRunProxyLoadAgainstMemcached(t *testing.T) {
	m := fixture.Memcached(t, 1)[0]
	ctx := context.Background()

	t.Run("incr counts every op exactly once", func(t *testing.T) {
		res, err := RunProxyLoad(ctx, ProxyLoadConfig{
			Addr: m.Addr, Mix: mixIncr, Conns: 4, Duration: 300 * time.Millisecond,
			Keys: 50, KeyPrefix: "incr:", CPUPids: []int{m.Pid()},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Ops == 0 || res.Errors != 0 {
			t.Fatalf("ops %d errors %d (%s)", res.Ops, res.Errors, res.FirstError)
		}
		if got := sumCounters(t, m.Addr, "incr:", 50); got != res.Ops {
			t.Errorf("memcached counted %d increments, driver reported %d ops", got, res.Ops)
		}
		if res.Latency.Count != res.Ops || res.Latency.P50 <= 0 || res.Latency.P99 < res.Latency.P50 {
			t.Errorf("latency %+v for %d ops", res.Latency, res.Ops)
		}
		if len(res.CPUSeconds) != 1 || res.CPUSeconds[0] < 0 {
			t.Errorf("cpu seconds %v", res.CPUSeconds)
		}
	})

	t.Run("getset after preload always hits", func(t *testing.T) {
		res, err := RunProxyLoad(ctx, ProxyLoadConfig{
			Addr: m.Addr, Mix: mixGetSet, Conns: 4, Duration: 200 * time.Millisecond,
			Keys: 500, KeyPrefix: "gs:",
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Ops == 0 || res.Errors != 0 || res.Misses != 0 || res.Hits == 0 || res.Hits >= res.Ops {
			t.Fatalf("ops %d errors %d hits %d misses %d (%s)", res.Ops, res.Errors, res.Hits, res.Misses, res.FirstError)
		}
	})

	t.Run("get after preload always hits; set stores", func(t *testing.T) {
		for _, mix := range []string{mixGet, mixSet} {
			res, err := RunProxyLoad(ctx, ProxyLoadConfig{
				Addr: m.Addr, Mix: mix, Conns: 2, Duration: 200 * time.Millisecond,
				Keys: 500, KeyPrefix: "gs:",
			})
			if err != nil {
				t.Fatal(err)
			}
			wantHits := res.Ops
			if mix == mixSet {
				wantHits = 0
			}
			if res.Ops == 0 || res.Errors != 0 || res.Misses != 0 || res.Hits != wantHits {
				t.Fatalf("%s: ops %d errors %d hits %d misses %d (%s)", mix, res.Ops, res.Errors, res.Hits, res.Misses, res.FirstError)
			}
		}
	})

	t.Run("system calls counted over the timed phase", func(t *testing.T) {
		if _, err := exec.LookPath("perf"); err != nil {
			t.Skip("perf not installed")
		}
		res, err := RunProxyLoad(ctx, ProxyLoadConfig{
			Addr: m.Addr, Mix: mixIncr, Conns: 2, Duration: 200 * time.Millisecond,
			KeyPrefix: "sc:", SyscallPids: []int{m.Pid()},
		})
		if err != nil {
			if errors.Is(err, errNoPerf) {
				t.Skip(err)
			}
			t.Fatal(err)
		}
		// memcached reads and writes each request at least once.
		if len(res.Syscalls) != 1 || res.Syscalls[0] < 2*float64(res.Ops) || len(res.Switches) != 1 {
			t.Fatalf("syscalls %v switches %v for %d ops", res.Syscalls, res.Switches, res.Ops)
		}
	})

	t.Run("mget reads four keys per op", func(t *testing.T) {
		res, err := RunProxyLoad(ctx, ProxyLoadConfig{
			Addr: m.Addr, Mix: mixMGet, Conns: 2, Duration: 200 * time.Millisecond,
			Keys: 500, KeyPrefix: "gs:", NoPreload: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Ops == 0 || res.Errors != 0 || res.Hits != 4*res.Ops || res.Misses != 0 {
			t.Fatalf("ops %d errors %d hits %d misses %d", res.Ops, res.Errors, res.Hits, res.Misses)
		}
	})

	t.Run("misses without preload", func(t *testing.T) {
		res, err := RunProxyLoad(ctx, ProxyLoadConfig{
			Addr: m.Addr, Mix: mixMGet, Conns: 1, Duration: 100 * time.Millisecond,
			Keys: 500, KeyPrefix: "absent:", NoPreload: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Ops == 0 || res.Hits != 0 || res.Misses != 4*res.Ops {
			t.Fatalf("ops %d hits %d misses %d", res.Ops, res.Hits, res.Misses)
		}
	})

	t.Run("error replies are counted and the connection kept", func(t *testing.T) {
		// gs: keys hold 16-byte non-numeric values: incr answers CLIENT_ERROR.
		res, err := RunProxyLoad(ctx, ProxyLoadConfig{
			Addr: m.Addr, Mix: mixIncr, Conns: 2, Duration: 100 * time.Millisecond,
			Keys: 500, KeyPrefix: "gs:",
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Ops != 0 || res.Errors < 10 || !strings.Contains(res.FirstError, "CLIENT_ERROR") {
			t.Fatalf("ops %d errors %d first %q", res.Ops, res.Errors, res.FirstError)
		}
	})
}

func TestRunProxyLoadConfigErrors(t *testing.T) {
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  ProxyLoadConfig
	}{
		{"unknown mix", ProxyLoadConfig{Addr: "127.0.0.1:1", Mix: "scan"}},
		{"no address", ProxyLoadConfig{}},
		{"nothing listening", ProxyLoadConfig{Addr: "127.0.0.1:" + strconv.Itoa(port), Duration: time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := RunProxyLoad(context.Background(), tc.cfg); !errors.Is(err, errProxyLoad) {
				t.Errorf("err = %v, want ErrProxyLoad", err)
			}
		})
	}
}

func TestParseValueLine(t *testing.T) {
	tests := []struct {
		name, line string
		want       int
		ok         bool
	}{
		{"get", "VALUE k 0 16\r\n", 16, true},
		{"gets with cas", "VALUE k 5 3 99\r\n", 3, true},
		{"zero length", "VALUE k 0 0\r\n", 0, true},
		{"missing length", "VALUE k 0\r\n", 0, false},
		{"too many fields", "VALUE k 0 1 2 3\r\n", 0, false},
		{"negative", "VALUE k 0 -1\r\n", 0, false},
		{"no CRLF", "VALUE k 0 1\n", 0, false},
		{"not a value", "END\r\n", 0, false},
		{"huge", "VALUE k 0 99999999999\r\n", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseValueLine([]byte(tc.line))
			if got != tc.want || ok != tc.ok {
				t.Errorf("parseValueLine(%q) = %d, %v; want %d, %v", tc.line, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzParseValueLine(f *testing.F) {
	for _, s := range []string{"VALUE k 0 16\r\n", "VALUE k 5 3 99\r\n", "VALUE  k  0  1 \r\n", "END\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		n, ok := parseValueLine(line)
		if ok && (n < 0 || n > 1<<31-1) {
			t.Fatalf("%q -> %d", line, n)
		}
	})
}

// BenchmarkLoadConnOps measures the driver's own cost per operation against
// one real memcached (one connection, no concurrency): it must stay cheap,
// since it shares the cores with the proxy under test.
func BenchmarkLoadConnOps(b *testing.B) {
	m := fixture.Memcached(b, 1)[0]
	cfg := ProxyLoadConfig{Addr: m.Addr, Keys: 1000}
	if err := preloadKeys(context.Background(), cfg); err != nil {
		b.Fatal(err)
	}
	for _, mix := range []string{mixIncr, mixGetSet, mixMGet} {
		b.Run(mix, func(b *testing.B) {
			c, err := net.Dial("tcp", m.Addr)
			if err != nil {
				b.Fatal(err)
			}
			kcfg := cfg
			if mix == mixIncr {
				kcfg.KeyPrefix = "counter:" // preloaded values are not numeric
			}
			l := newLoadConn(c, kcfg, 1)
			defer l.close()
			op := map[string]func() error{mixIncr: l.incr, mixGetSet: l.getset, mixMGet: l.mget}[mix]
			b.ReportAllocs()
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

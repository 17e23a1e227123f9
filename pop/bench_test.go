package pop_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/counting"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop"
)

// benchDoc: one sliding-window limit per API key; quantity set per
// benchmark (huge = every decision admitted and counted in the store).
const benchDoc = `version: 1
headers: both
api_key: {header: X-API-Key}
tiers:
  t: {limits: [{name: burst, algorithm: sliding_window, quantity: %d, window: 1s}]}
policies:
  - {name: api, routes: ["/"], identity: [api_key, route], tier: t, lease: {enabled: %v}}
`

func benchLimiter(b *testing.B, store counter.Store, quantity int) *pop.Limiter {
	return benchLimiterLease(b, store, quantity, false)
}

func benchLimiterLease(b *testing.B, store counter.Store, quantity int, lease bool) *pop.Limiter {
	return benchLimiterCfg(b, store, quantity, lease, nil)
}

func benchLimiterCfg(b *testing.B, store counter.Store, quantity int, lease bool, m *pop.Metrics) *pop.Limiter {
	b.Helper()
	l, err := pop.New(pop.Config{
		NewShared: func(lim counter.Limit) (counter.Allower, error) { return counter.New(store, lim) },
		NewLocal:  func(lim counter.Limit) (counter.Allower, error) { return counter.NewLocal(lim) },
		// Generous, so that on a loaded machine no decision falls back
		// (a fail-open decision is not a store decision and would inflate
		// decisions/s); store-failures/op reports any that still do.
		StoreDeadline: time.Second,
		Logger:        slog.New(slog.DiscardHandler),
		Metrics:       m,
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.LoadBytes("bench.yml", []byte(fmt.Sprintf(benchDoc, quantity, lease))); err != nil {
		b.Fatal(err)
	}
	return l
}

// requests pre-builds n requests with Zipf-distributed API keys over keys
// identities.
func requests(n, keys int, seed uint64) []*http.Request {
	rng := rand.New(rand.NewPCG(seed, 7))
	z := rand.NewZipf(rng, 1.1, 1, uint64(keys-1))
	out := make([]*http.Request, n)
	u := &url.URL{Path: "/items"}
	for i := range out {
		out[i] = &http.Request{
			Method: "GET", URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: "edge.test",
			RemoteAddr: "192.0.2.1:1000",
			Header:     http.Header{"X-Api-Key": {fmt.Sprintf("key-%d", z.Uint64())}},
		}
	}
	return out
}

type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

// BenchmarkMiddleware: the limiter's overhead over a bare handler, with
// the in-process store (no network), all decisions admitted.
func BenchmarkMiddleware(b *testing.B) {
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	l := benchLimiter(b, memstore.New(), 1<<30)
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"limited", l.Middleware(bare)}} {
		b.Run(bc.name, func(b *testing.B) {
			reqs := requests(4096, 10000, 1)
			w := &nopWriter{h: http.Header{}}
			b.ReportAllocs()
			cpu := cpuTime([]int{os.Getpid()})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clear(w.h)
				bc.h.ServeHTTP(w, reqs[i%len(reqs)])
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkDecide: allocations and time of one decision (in-process
// store), admitted, and rejected from the mitigation cache.
func BenchmarkDecide(b *testing.B) {
	for _, bc := range []struct {
		name     string
		quantity int
		metrics  bool
	}{{"admitted", 1 << 30, false}, {"admitted-metrics", 1 << 30, true}, {"mitigated", 1, false}} {
		b.Run(bc.name, func(b *testing.B) {
			var m *pop.Metrics
			if bc.metrics {
				var err error
				if m, err = pop.NewMetrics(prometheus.NewRegistry()); err != nil {
					b.Fatal(err)
				}
			}
			l := benchLimiterCfg(b, memstore.New(), bc.quantity, false, m)
			reqs := requests(1024, 100, 2)
			now := time.Now()
			for _, r := range reqs { // block every identity once
				l.Decide(context.Background(), r, now)
				l.Decide(context.Background(), r, now)
			}
			b.ReportAllocs()
			cpu := cpuTime([]int{os.Getpid()})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l.Decide(context.Background(), reqs[i%len(reqs)], now)
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkFullPath: decisions through library → memcached client
// (gomemcache; counter's pipelining PipeStore, one connection per call or
// multiplexing 2 shared connections) → mcproxy → 3 memcached
// shards, Zipf identities, 64 goroutines in one process. Reports
// decisions/s and p50/p99 decision latency (HDR, every decision). The
// cpu-µs/decision is the CPU time (user+system) of the benchmark process
// (library, gomemcache, load generator), mcproxy and the three memcached
// per decision, also reported per process: steadier than throughput on a
// shared machine (2 cores ÷ that figure bounds decisions/s).
// store-ops/decision counts store operations (counting.Store), and
// roundtrips/decision the network round trips (writes on the client's
// connections, memcached.WireCounter): gomemcache makes one per
// operation, PipeStore one per call (a window decision's get+add+incr go
// together), and a multiplexed PipeStore one per batch of concurrent
// calls. The
// "admitted" case counts every decision in the store; "admitted-leased"
// serves hot identities from token leases; "blocked" clients are served
// from the mitigation cache. POPLIMIT_BENCH_KEYS sets the number of Zipf
// identities (default 100,000; e.g. 100 to see the full path with every
// window warm, one round trip per decision).
func BenchmarkFullPath(b *testing.B) {
	_, mcBin := binaries(b)
	ms := fixture.Memcached(b, 3)
	px := startMcproxy(b, mcBin, "", ms)
	var wires [4]memcached.WireCounter
	for i, sc := range []struct {
		name  string
		store counter.Store
	}{
		{"gomemcache", memcached.NewStore(memcached.NewClient(memcached.Config{Servers: []string{px.addr}, Timeout: time.Second, Wire: &wires[0]}))},
		{"pipe", memcached.NewPipeStore(memcached.PipeConfig{Addr: px.addr, Timeout: time.Second, Wire: &wires[1]})},
		{"pipe-mux", memcached.NewPipeStore(memcached.PipeConfig{Addr: px.addr, Timeout: time.Second, Multiplex: 2, Wire: &wires[2]})},
		// The multiplexed connections writing whatever is queued at once,
		// never holding a call back (before MuxInFlight): the A of pipe-mux.
		{"pipe-mux-eager", memcached.NewPipeStore(memcached.PipeConfig{Addr: px.addr, Timeout: time.Second, Multiplex: 2, MuxInFlight: 1 << 20, Wire: &wires[3]})},
	} {
		b.Run(sc.name, func(b *testing.B) { fullPath(b, counting.New(sc.store), &wires[i], px, ms) })
	}
}

// fullPath runs the cases over store; wire counts the network round trips
// of its client (writes on its connections, each carrying one or more
// store operations).
func fullPath(b *testing.B, store *counting.Store, wire *memcached.WireCounter, px *proc, ms []*procs.Memcached) {
	for _, bc := range []struct {
		name     string
		quantity int
		lease    bool
		raw      bool // counter alone, no pop: the baseline pop adds to
	}{{"counter-only", 1 << 30, false, true}, {"admitted", 1 << 30, false, false}, {"admitted-leased", 1 << 30, true, false}, {"blocked", 1, false, false}} {
		b.Run(bc.name, func(b *testing.B) {
			l := benchLimiterLease(b, store, bc.quantity, bc.lease)
			var raw counter.Allower
			if bc.raw {
				var err error
				if raw, err = counter.New(store, counter.Limit{Name: "burst", Quantity: int64(bc.quantity), Window: time.Second}); err != nil {
					b.Fatal(err)
				}
			}
			hist := hdrhistogram.New(1, 10_000_000, 3) // µs
			var errs atomic.Int64
			par := 64 / max(1, runtimeProcs())
			pools := make(chan []*http.Request, par*runtimeProcs())
			hists := make(chan *hdrhistogram.Histogram, cap(pools))
			for i := 0; i < cap(pools); i++ {
				reqs := requests(512, benchKeys(), uint64(i))
				if bc.quantity == 1 { // block every identity of the pool
					for _, r := range reqs {
						l.Decide(context.Background(), r, time.Now())
						l.Decide(context.Background(), r, time.Now())
					}
				}
				pools <- reqs
				hists <- hdrhistogram.New(1, 10_000_000, 3)
			}
			used := make(chan *hdrhistogram.Histogram, cap(pools))
			b.SetParallelism(par)
			self, proxy := []int{os.Getpid()}, []int{px.Pid()}
			var shards []int
			for _, m := range ms {
				shards = append(shards, m.Pid())
			}
			cpuSelf, cpuProxy, cpuShards := cpuTime(self), cpuTime(proxy), cpuTime(shards)
			stats0, wire0 := store.Stats(), wire.Writes()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				reqs := <-pools
				h := <-hists
				i := 0
				for pb.Next() {
					t0 := time.Now()
					r := reqs[i%len(reqs)]
					if raw != nil {
						if _, err := raw.AllowN(context.Background(), counter.Key("raw", r.Header.Get("X-Api-Key")), t0, 1); err != nil {
							errs.Add(1)
						}
					} else if d := l.Decide(context.Background(), r, t0); d.Reason == pop.ReasonFailOpen {
						errs.Add(1)
					}
					h.RecordValue(max(1, time.Since(t0).Microseconds()))
					i++
				}
				used <- h
			})
			el := time.Since(start)
			perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			dSelf, dProxy, dShards := cpuTime(self)-cpuSelf, cpuTime(proxy)-cpuProxy, cpuTime(shards)-cpuShards
			b.ReportMetric(perOp(dSelf+dProxy+dShards), "cpu-µs/decision")
			b.ReportMetric(perOp(dSelf), "cpu-µs-lib/decision")
			b.ReportMetric(perOp(dProxy), "cpu-µs-mcproxy/decision")
			b.ReportMetric(perOp(dShards), "cpu-µs-memcached/decision")
			close(used)
			for h := range used {
				hist.Merge(h)
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
			// A store operation (counting.Store) is one request; a round
			// trip is one write on a connection and the read of its
			// replies, carrying every request ready to go together.
			b.ReportMetric(float64(store.Stats().Sub(stats0).RoundTrips())/float64(b.N), "store-ops/decision")
			b.ReportMetric(float64(wire.Writes()-wire0)/float64(b.N), "roundtrips/decision")
			b.ReportMetric(float64(hist.ValueAtQuantile(50)), "p50-µs")
			b.ReportMetric(float64(hist.ValueAtQuantile(99)), "p99-µs")
			b.ReportMetric(float64(errs.Load())/float64(b.N), "store-failures/op")
		})
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// cpuTime sums the user+system CPU time of pids (procs.ReadStat);
// processes that cannot be read are skipped.
func cpuTime(pids []int) time.Duration {
	var d time.Duration
	for _, pid := range pids {
		if st, err := procs.ReadStat(pid); err == nil {
			d += st.CPU
		}
	}
	return d
}

// reportCPU reports this process's CPU time per op since cpu0 (10ms
// resolution: run for a second or more). On a shared machine it is steadier
// than ns/op, which counts time spent waiting for a core.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.StopTimer()
	d := cpuTime([]int{os.Getpid()}) - cpu0
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// benchKeys is the identities of BenchmarkFullPath (POPLIMIT_BENCH_KEYS).
func benchKeys() int {
	if v, err := strconv.Atoi(os.Getenv("POPLIMIT_BENCH_KEYS")); err == nil && v > 0 {
		return v
	}
	return 100000
}

package counter_test

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/counting"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/counter/memstore"
)

var benchLimits = []struct {
	name  string
	limit counter.Limit
}{
	{"sliding", counter.Limit{Quantity: 1000, Window: time.Second}},
	{"sliding-p12", counter.Limit{Quantity: 1200, Window: 1200 * ms, Precision: 12}},
	{"fixed", counter.Limit{Algorithm: counter.FixedWindow, Quantity: 1000, Window: time.Second}},
	{"bucket", counter.Limit{Algorithm: counter.TokenBucket, Quantity: 1000, Window: time.Second}},
}

// BenchmarkLocalAllowN is x/time/rate's BenchmarkAllowN for the in-process
// limiters: one key, time advancing 1 µs per call.
func BenchmarkLocalAllowN(b *testing.B) {
	for _, bl := range benchLimits {
		b.Run(bl.name, func(b *testing.B) {
			lo, err := counter.NewLocal(bl.limit)
			if err != nil {
				b.Fatal(err)
			}
			key := counter.Key("ip", "203.0.113.7")
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_, _ = lo.AllowN(ctx, key, t0.Add(time.Duration(i)*time.Microsecond), 1)
			}
		})
	}
}

// BenchmarkXRateAllowN is the reference the in-process limiters are
// compared with, measured in the same run (the machine is shared, so only
// ratios within one run mean anything): x/time/rate's single Limiter,
// time advancing 1 µs per call. x/time/rate holds one key; the local
// limiters add a sharded map lookup per call.
func BenchmarkXRateAllowN(b *testing.B) {
	l := rate.NewLimiter(1000, 1000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = l.AllowN(t0.Add(time.Duration(i)*time.Microsecond), 1)
	}
}

// BenchmarkLocalAllowNParallel: many goroutines, 1024 keys.
func BenchmarkLocalAllowNParallel(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = counter.Key("ip", strconv.Itoa(i))
	}
	for _, bl := range benchLimits {
		b.Run(bl.name, func(b *testing.B) {
			lo, _ := counter.NewLocal(bl.limit)
			var seq atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)) * 7919
				for pb.Next() {
					i++
					_, _ = lo.AllowN(ctx, keys[i&1023], t0.Add(time.Duration(i)*time.Microsecond), 1)
				}
			})
		})
	}
}

// zipfKeys draws a Zipf (s = 1.1) sequence over n keys: a few hot keys
// and a long cold tail.
func zipfKeys(n, count int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = counter.Key("ip", "10."+strconv.Itoa(i))
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, uint64(n-1))
	seq := make([]string, count)
	for i := range seq {
		seq[i] = keys[z.Uint64()]
	}
	return seq
}

// BenchmarkRoundTrips measures store round trips per decision on a Zipf
// workload (100k keys, s = 1.1: a few hot keys, a long cold tail) with 4
// workers (Limiters, each with its own cache) sharing one store, requests
// dealt round-robin, 1 s windows and D decisions per window over the PoP
// (what matters is decisions per window, not the window length: D=50k is
// 50k/s with 1 s windows or 833/s with 1 min windows). One window of
// warm-up is not counted. The store is the in-process one: the same round
// trips as memcached (see BenchmarkMemcached for real latency); "batch" is
// PipeStore's one-round-trip first decision of a window (Batcher),
// "nobatch" gomemcache (memcached.Store).
func BenchmarkRoundTrips(b *testing.B) {
	const keys = 100_000
	seq := zipfKeys(keys, 1<<20)
	for _, perWindow := range []int{50_000, 500_000} {
		for _, batch := range []bool{true, false} {
			for _, bl := range benchLimits {
				name := "D=" + strconv.Itoa(perWindow/1000) + "k/batch/" + bl.name
				if !batch {
					name = "D=" + strconv.Itoa(perWindow/1000) + "k/nobatch/" + bl.name
				}
				b.Run(name, func(b *testing.B) {
					l := bl.limit
					l.Window = time.Second
					if l.Precision > 1 {
						l.Precision = 10
					}
					var now time.Time // virtual: TTLs follow it
					var st counter.Store = memstore.NewClock(func() time.Time { return now })
					if !batch {
						st = noBatch{st}
					}
					cs := counting.New(st)
					var workers [4]*counter.Limiter
					for i := range workers {
						workers[i], _ = counter.New(cs, l)
					}
					step := time.Second / time.Duration(perWindow)
					i := 0
					decide := func() {
						now = t0.Add(time.Duration(i) * step)
						if _, err := workers[i&3].AllowN(ctx, seq[i&(1<<20-1)], now, 1); err != nil {
							b.Fatal(err)
						}
						i++
					}
					for i < perWindow {
						decide()
					}
					before, first := cs.Stats(), i
					b.ReportAllocs()
					for b.Loop() {
						decide()
					}
					d := cs.Stats().Sub(before)
					b.ReportMetric(float64(d.RoundTrips())/float64(i-first), "roundtrips/decision")
					b.ReportMetric(float64(d.GetMulti)/float64(i-first), "getmulti/decision")
				})
			}
		}
	}
}

// BenchmarkMemcached: the store-backed limiters against a real memcached
// on loopback, 16 goroutines over a Zipf key sequence, wall-clock time.
func BenchmarkMemcached(b *testing.B) {
	mc := fixture.Memcached(b, 1)
	seq := zipfKeys(10_000, 1<<16)
	for _, client := range []string{"gomemcache", "pipe"} {
		for _, bl := range benchLimits {
			b.Run(client+"/"+bl.name, func(b *testing.B) {
				var st counter.Store = memcached.NewStore(memcached.NewClient(memcached.Config{
					Servers: []string{mc[0].Addr}, Timeout: time.Second}))
				if client == "pipe" {
					st = memcached.NewPipeStore(memcached.PipeConfig{Addr: mc[0].Addr, Timeout: time.Second})
				}
				cs := counting.New(st)
				lim, _ := counter.New(cs, bl.limit)
				var seqN, decisions atomic.Int64
				b.SetParallelism(8) // 8 × GOMAXPROCS goroutines
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := int(seqN.Add(1)) * 7919
					n := int64(0)
					for pb.Next() {
						i++
						if _, err := lim.AllowN(ctx, seq[i&(1<<16-1)], time.Now(), 1); err != nil {
							b.Error(err)
							return
						}
						n++
					}
					decisions.Add(n)
				})
				b.ReportMetric(float64(cs.Stats().RoundTrips())/float64(decisions.Load()), "roundtrips/decision")
			})
		}
	}
}

// BenchmarkBucketContention: every goroutine hits ONE key of a token bucket
// over real memcached (gets/cas): the attack case Cloudflare worried
// about. Reports cas retries and ErrContention failures per decision.
func BenchmarkBucketContention(b *testing.B) {
	mc := fixture.Memcached(b, 1)
	for _, par := range []int{1, 4, 16} {
		b.Run("goroutines="+strconv.Itoa(par*runtime.GOMAXPROCS(0)), func(b *testing.B) {
			st := memcached.NewStore(memcached.NewClient(memcached.Config{
				Servers: []string{mc[0].Addr}, Timeout: time.Second}))
			lim, _ := counter.New(st, counter.Limit{Algorithm: counter.TokenBucket, Quantity: 1_000_000, Window: time.Second})
			key := counter.Key("hot", strconv.Itoa(par))
			b.SetParallelism(par)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, _ = lim.AllowN(ctx, key, time.Now(), 1)
				}
			})
			s := lim.BucketStats()
			b.ReportMetric(float64(s.Retries)/float64(s.Ops), "retries/decision")
			b.ReportMetric(float64(s.Failures)/float64(s.Ops), "failures/decision")
		})
	}
}

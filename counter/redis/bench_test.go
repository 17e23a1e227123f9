package redis_test

import (
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// BenchmarkAllowN is the Redis Cluster decision from 64 goroutines (the
// autopipeliner batches them), over 1,000 identities, fixed window and
// sliding window: ns/op and allocs/op of the client side, and cpu-µs/op,
// the test process's own CPU time (user + system) per decision.
func BenchmarkAllowN(b *testing.B) {
	st := store(b, false)
	for _, l := range []counter.Limit{
		{Algorithm: counter.FixedWindow, Quantity: 1 << 30, Window: time.Minute},
		{Quantity: 1 << 30, Window: time.Minute, Precision: 4},
	} {
		b.Run(l.String(), func(b *testing.B) {
			a := allower(b, st, l)
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = counter.Key("bench", strconv.Itoa(i))
			}
			var next atomic.Int64
			now := time.Now()
			b.ReportAllocs()
			b.SetParallelism(32)
			cpu0 := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := a.AllowN(ctx, keys[next.Add(1)%int64(len(keys))], now, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

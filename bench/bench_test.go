package bench

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkLatencyRecord measures one histogram record (on every request).
func BenchmarkLatencyRecord(b *testing.B) {
	b.ReportAllocs()
	l := NewLatency()
	for i := 0; i < b.N; i++ {
		l.Record(time.Duration(i%5000) * time.Microsecond)
	}
}

// BenchmarkGenerate measures building the demo's trace.
func BenchmarkGenerate(b *testing.B) {
	b.ReportAllocs()
	var n int
	for i := 0; i < b.N; i++ {
		tr, err := Generate(WorkloadConfig{Seed: uint64(i + 1), Duration: 20 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		n = len(tr.Requests)
	}
	b.ReportMetric(float64(n), "requests/trace")
}

// BenchmarkInprocDecide measures an in-process worker's decision over the
// in-memory store (the floor under every PoP measurement).
func BenchmarkInprocDecide(b *testing.B) {
	b.ReportAllocs()
	in, err := NewInproc([]Route{{Path: "/api", Quantity: 1000, Window: time.Second}}, InprocConfig{Workers: 4})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := in.Decide(b.Context(), i, "c"+strconv.Itoa(i%100), "/api", now.Add(time.Duration(i)*time.Microsecond)); err != nil {
				b.Fatal(err)
			}
		}
	})
	st := in.StoreStats()
	b.ReportMetric(float64(st.RoundTrips())/float64(b.N), "roundtrips/decision")
}

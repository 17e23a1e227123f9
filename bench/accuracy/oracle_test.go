package accuracy

import (
	"strconv"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench"
)

func TestSlidingLogSteps(t *testing.T) {
	ms := time.Millisecond
	type step struct {
		at   time.Duration
		n    int64
		want bool
	}
	cases := []struct {
		name     string
		countAll bool
		steps    []step
	}{
		{"count all keeps an abuser blocked", true, []step{
			{0, 2, true}, {100 * ms, 1, true}, {200 * ms, 1, false},
			{999 * ms, 1, false},
			{1000 * ms, 1, false}, // the one at 0 expired, 4 still counted
			{1100 * ms, 1, false},
			{1999 * ms, 1, true}, // (999ms, 1999ms] holds 1000 and 1100
			{2050 * ms, 1, true},
			{2060 * ms, 1, false}, // 1100, 1999, 2050
			{2200 * ms, 1, false}, // 1999, 2050, 2060: the rejected one counts
			{3100 * ms, 1, true},  // only 2200
		}},
		{"refund counts only admitted", false, []step{
			{0, 2, true}, {100 * ms, 1, true}, {200 * ms, 1, false},
			{999 * ms, 1, false},
			{1000 * ms, 2, true}, // the 2 at 0 left the window (0 ≤ 1000−1000)
			{1050 * ms, 1, false},
			{1100 * ms, 1, true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newSlidingLog(3, time.Second, c.countAll)
			for i, s := range c.steps {
				if got := l.allow("k", s.at, s.n); got != s.want {
					t.Fatalf("step %d at %v n=%d: allowed=%v want %v", i, s.at, s.n, got, s.want)
				}
			}
			if l.count("other", 0) != 0 {
				t.Fatal("keys not independent")
			}
		})
	}
}

func TestFixedWindowExcess(t *testing.T) {
	s := time.Second
	at := []time.Duration{0, s / 2, s - 1, s, s + 1, 3 * s}
	if got := fixedWindowExcess(at, 3, s); got != 0 {
		t.Fatalf("excess %d, want 0", got)
	}
	if got := fixedWindowExcess(at, 2, s); got != 1 {
		t.Fatalf("excess %d, want 1", got)
	}
}

func TestTokenBucketExcess(t *testing.T) {
	s := time.Second
	// burst 2, 1 token per second.
	ok := []time.Duration{0, 0, s, 2 * s, 4 * s, 4 * s}
	if got := tokenBucketExcess(ok, 1, 2, s, 0); got != 0 {
		t.Fatalf("excess %d, want 0", got)
	}
	bad := []time.Duration{0, 0, 0, s / 2}
	if got := tokenBucketExcess(bad, 1, 2, s, 0); got != 2 {
		t.Fatalf("excess %d, want 2", got)
	}
	// A slack of half a second is one more token (2·slack): the third at 0
	// passes, the one at s/2 still finds half a token.
	if got := tokenBucketExcess(bad, 1, 2, s, s/2); got != 1 {
		t.Fatalf("with slack excess %d, want 1", got)
	}
	if got := tokenBucketExcess(bad, 1, 2, s, s); got != 0 {
		t.Fatalf("with slack excess %d, want 0", got)
	}
}

func TestLatencySummary(t *testing.T) {
	l, o := bench.NewLatency(), bench.NewLatency()
	for i := 1; i <= 1000; i++ {
		l.Record(time.Duration(i) * time.Microsecond)
	}
	o.Record(time.Second)
	l.Merge(o)
	s := l.Summary()
	if s.Count != 1001 {
		t.Fatalf("count %d", s.Count)
	}
	if s.P50 < 0.49 || s.P50 > 0.51 {
		t.Fatalf("p50 %vms", s.P50)
	}
	if s.Max < 999 || s.Max > 1001 {
		t.Fatalf("max %vms", s.Max)
	}
	cdf := l.CDF()
	for i := 1; i < len(cdf); i++ {
		if cdf[i].Value < cdf[i-1].Value || cdf[i].Fraction < cdf[i-1].Fraction {
			t.Fatalf("cdf not monotone at %d: %+v", i, cdf)
		}
	}
	if bench.NewLatency().CDF() != nil {
		t.Fatal("empty cdf not nil")
	}
}

// BenchmarkSlidingLog measures the oracle: it scores every request of a
// trace, so it must stay cheap next to the system under test.
func BenchmarkSlidingLog(b *testing.B) {
	b.ReportAllocs()
	l := newSlidingLog(100, time.Minute, true)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.allow(keys[i%len(keys)], time.Duration(i)*time.Millisecond, 1)
	}
}

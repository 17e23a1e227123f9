package counter_test

import (
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// nearLimitSpec is issue 7's near-limit trace: every source offers 0.5–1.5×
// its limit (60 s window, limit 100, count-all), with bursty arrivals.
func nearLimitSpec(seed uint64, sources int) traceSpec {
	return traceSpec{
		Seed: seed, Sources: sources,
		AbusiveFraction: 1, AbusiveMinMultiple: 0.5, AbusiveMaxMultiple: 1.5,
		Quantity: 100, WindowMs: 60_000, DurationMs: 8 * 60_000,
		OnMeanMs: 20_000, OffMeanMs: 10_000,
	}
}

// TestPrecisionErrorFallsNearLimit is a property test against the exact
// sliding log: on every seeded near-limit trace, more sub-windows never give
// more wrong decisions, from the two-counter form (N=1) through 4 and 12 to
// 60 sub-windows, and 60 is strictly better than 1. (A seed loop rather than
// rapid: each case replays a whole trace, and the count must stay small
// under the race detector.)
func TestPrecisionErrorFallsNearLimit(t *testing.T) {
	sources, seeds := 60, uint64(20)
	if raceEnabled {
		sources, seeds = 20, 3
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		s := nearLimitSpec(seed*0x9e3779b97f4a7c15, sources)
		tr := s.generate()
		var prev float64 = 101
		var first float64
		for _, n := range []int{1, 4, 12, 60} {
			lo, err := counter.NewLocal(counter.Limit{Quantity: s.Quantity, Window: time.Duration(s.WindowMs) * ms, Precision: n})
			if err != nil {
				t.Fatal(err)
			}
			acc := replay(t, lo, s, tr)
			w := acc.wrongPct()
			if n == 1 {
				first = w
			}
			if w > prev {
				t.Fatalf("seed %d: precision %d gives %.3f%% wrong, more than the previous precision's %.3f%%", seed, n, w, prev)
			}
			prev = w
		}
		if prev >= first {
			t.Fatalf("seed %d: precision 60 (%.3f%%) not better than precision 1 (%.3f%%)", seed, prev, first)
		}
		if seed == 1 {
			t.Logf("near-limit trace, %d sources: %.3f%% wrong at N=1, %.3f%% at N=60", sources, first, prev)
		}
	}
}

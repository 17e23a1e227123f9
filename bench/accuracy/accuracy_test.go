package accuracy

import (
	"context"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

func TestSlidingExcess(t *testing.T) {
	s := time.Second
	cases := []struct {
		name string
		at   []time.Duration
		want int64
	}{
		{"under", []time.Duration{0, s / 2, s, 3 * s / 2}, 0},
		{"one too many", []time.Duration{0, s / 4, s / 2}, 1},
		{"excess not counted", []time.Duration{0, s / 4, s / 2, s + s/8}, 1}, // (s/8, s+s/8] counts s/4 only
		{"unsorted", []time.Duration{s / 2, 0, s / 4}, 1},
	}
	for _, c := range cases {
		if got := slidingExcess(c.at, 2, s); got != c.want {
			t.Errorf("%s: excess %d, want %d", c.name, got, c.want)
		}
	}
}

func TestGenerateAccuracyTraces(t *testing.T) {
	for _, name := range accuracyTraces {
		tr, err := generateAccuracy(accuracyTraceConfig{Name: name, Sources: 50, Duration: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Clients) != 50 || len(tr.Requests) == 0 {
			t.Fatalf("%s: %d clients %d requests", name, len(tr.Clients), len(tr.Requests))
		}
		if name == traceBursts {
			tail := 0
			for _, r := range tr.Requests {
				if r.At%time.Minute >= 54*time.Second {
					tail++
				}
			}
			// Half the traffic in bursts plus a tenth of the even half.
			if share := float64(tail) / float64(len(tr.Requests)); share < 0.5 || share > 0.6 {
				t.Fatalf("bursts: %.2f of requests in the windows' last tenth, want 0.55", share)
			}
		}
	}
	if _, err := generateAccuracy(accuracyTraceConfig{Name: "nope"}); err == nil {
		t.Fatal("unknown trace accepted")
	}
}

// TestAccuracyInMemory runs the scoring end to end over the in-memory
// store: exact algorithms never over-admit, the sliding window's error
// falls as precision grows on the near-limit trace, and 4 workers agree
// with 1.
func TestAccuracyInMemory(t *testing.T) {
	ctx := context.Background()
	tr, err := generateAccuracy(accuracyTraceConfig{Name: traceNear, Sources: 40, Duration: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wrong := map[int]float64{}
	for _, p := range []int{1, 12} {
		ref, err := measureAccuracy(ctx, traceNear, tr, accuracyConfig{Workers: 1, Precision: p})
		if err != nil {
			t.Fatal(err)
		}
		four, err := measureAccuracy(ctx, traceNear, tr, accuracyConfig{Workers: 4, Precision: p})
		if err != nil {
			t.Fatal(err)
		}
		four.compare(ref)
		if four.AgreementPct < 99.99 {
			t.Errorf("precision %d: 4 workers agree with 1 on %.3f%%", p, four.AgreementPct)
		}
		if ref.Wrong == 0 || ref.FalsePositives+ref.FalseNegatives != ref.Wrong {
			t.Errorf("precision %d: implausible %+v", p, ref)
		}
		wrong[p] = ref.WrongPct
		t.Logf("precision %d: wrong %.3f%% fp %d fn %d rate error %.2f%% rt/decision %.2f",
			p, ref.WrongPct, ref.FalsePositives, ref.FalseNegatives, ref.MeanRateError, ref.RoundTrips)
	}
	if wrong[12] >= wrong[1] {
		t.Errorf("precision 12 wrong %.3f%% not below precision 1's %.3f%%", wrong[12], wrong[1])
	}
	for _, alg := range []counter.Algorithm{counter.FixedWindow, counter.TokenBucket} {
		r, err := measureAccuracy(ctx, traceNear, tr, accuracyConfig{Workers: 4, Algorithm: alg})
		if err != nil {
			t.Fatal(err)
		}
		if r.OverAdmission != 0 || r.Errors != 0 {
			t.Errorf("%s: over-admission %d errors %d", r.Algorithm, r.OverAdmission, r.Errors)
		}
	}
}

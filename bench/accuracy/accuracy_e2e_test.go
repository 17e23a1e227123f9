package accuracy

import (
	"context"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/benchtest"

	"github.com/poplimit/poplimit/counter"
)

func TestAccuracyEndToEnd(t *testing.T) {
	env := benchtest.Env(t, false)
	rep, err := runAccuracy(context.Background(), env, AccuracySuiteConfig{
		TraceFiles: []string{traceNear}, Precisions: []int{1, 4},
		Algorithms: []counter.Algorithm{counter.SlidingWindow, counter.FixedWindow, counter.TokenBucket},
		Skews:      []time.Duration{2 * time.Second}, Sources: 20, Duration: 4 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	j := benchtest.JSON(t, rep)
	rows := j["rows"].([]any)
	if len(rows) != 2+1+2 {
		t.Fatalf("%d rows", len(rows))
	}
	wrong := map[string]map[float64]float64{}
	for _, r := range rows {
		row := r.(map[string]any)
		alg, trace := row["algorithm"].(string), row["trace"].(string)
		// A loaded machine may time a few store calls out; they are
		// counted apart, not scored.
		if benchtest.Num(t, row, "errors")*200 > benchtest.Num(t, row, "requests") || benchtest.Num(t, row, "requests") < 1000 {
			t.Errorf("%v", row)
		}
		if rt := benchtest.Num(t, row, "roundtrips_per_decision"); rt < 0.9 || rt > 3 {
			t.Errorf("%s %s: %v round trips per decision", trace, alg, rt)
		}
		if w := benchtest.Num(t, row, "wrong_pct"); w < 0 || w > 100 ||
			benchtest.Num(t, row, "wrong") != benchtest.Num(t, row, "false_positives")+benchtest.Num(t, row, "false_negatives") {
			t.Errorf("inconsistent %v", row)
		}
		skew := benchtest.Num(t, row, "skew_ms")
		if skew == 0 {
			if a := benchtest.Num(t, row, "agreement_pct"); a < 99.99 {
				t.Errorf("%s %s N=%v: PoP agrees with in-process run on %.3f%%", trace, alg, row["precision"], a)
			}
		}
		switch alg {
		case "fixed", "token":
			if oa := benchtest.Num(t, row, "over_admission"); oa != 0 {
				t.Errorf("%s %s: over-admission %v through the PoP", trace, alg, oa)
			}
		case "sliding":
			if skew == 0 {
				if wrong[trace] == nil {
					wrong[trace] = map[float64]float64{}
				}
				wrong[trace][benchtest.Num(t, row, "precision")] = benchtest.Num(t, row, "wrong_pct")
			}
		}
	}
	for trace, w := range wrong {
		if w[4] >= w[1] {
			t.Errorf("%s: precision 4 wrong %.3f%% not below precision 1's %.3f%%", trace, w[4], w[1])
		}
	}
}

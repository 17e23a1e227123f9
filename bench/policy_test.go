package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// TestPolicyYAMLParses checks the policy edges get is valid for the pop
// package, for every algorithm.
func TestPolicyYAMLParses(t *testing.T) {
	routes := []Route{{Path: "/api", Quantity: 20, Window: time.Second},
		{Path: "/login", Quantity: 5, Window: time.Minute, FailClosed: true}}
	for _, alg := range []counter.Algorithm{counter.SlidingWindow, counter.FixedWindow, counter.TokenBucket} {
		y := PolicyYAML(routes, alg, 4)
		f, err := policy.Parse("bench.yml", y)
		if err != nil {
			t.Fatalf("%s:\n%s\n%v", AlgorithmName(alg), y, err)
		}
		if len(f.Policies) != 2 || f.Policies[1].FailMode != policy.FailClosed {
			t.Fatalf("policies %+v", f.Policies)
		}
		if !strings.Contains(string(y), "GET /login") {
			t.Fatal("route missing")
		}
	}
}

package soak

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/benchtest"
)

// TestSoakShort: the soak's short form through a whole launched PoP
// (3 shards, mcproxy, 4 edges, the upstream): half the measured capacity
// for 8s, zero errors, zero fail-open decisions, and no process's fds or
// goroutines grew by more than a small absolute slack after the warm-up
// (a leak per request would be thousands).
// RSS is reported, not asserted: 8 s is too short for it to settle.
func TestSoakShort(t *testing.T) {
	env := benchtest.Env(t, true)
	res, err := runSoak(context.Background(), env, SoakConfig{Duration: 8 * time.Second, CapacityRun: 2 * time.Second,
		Warmup: 2 * time.Second, Interval: 500 * time.Millisecond,
		// 20/s per identity: the Zipf head is limited even at the rate a
		// race-instrumented PoP on a loaded host sustains (~300/s).
		Quantity: 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range res.Tables() {
		var sb strings.Builder
		tb.Text(&sb)
		t.Log(sb.String())
	}
	if res.Capacity <= 0 || res.Rate <= 0 || res.Requests < int64(res.Rate*4) {
		t.Fatalf("capacity %.0f/s, rate %.0f/s, %d requests in 8s", res.Capacity, res.Rate, res.Requests)
	}
	if res.Admitted == 0 || res.Rejected == 0 {
		t.Errorf("admitted %d, rejected %d: the Zipf head should be limited and the tail admitted", res.Admitted, res.Rejected)
	}
	if res.Errors != 0 || res.Counters.FailOpen != 0 || res.Counters.Unreadable != 0 {
		t.Errorf("errors %d (503 %d, failed %d), fail-open %d, unreadable edges %d", res.Errors, res.Unavailable, res.Failed,
			res.Counters.FailOpen, res.Counters.Unreadable)
	}
	if want := 3 + 1 + 4 + 1; len(res.Processes) != want {
		t.Fatalf("%d processes sampled, want %d", len(res.Processes), want)
	}
	// A sample taken under load holds the requests in flight: up to a few
	// goroutines per sender on an edge. A leak of one per request would
	// be thousands over the run.
	const slack, goroutineSlack = 12, 48
	for _, p := range res.Processes {
		if p.RSSKB.Start <= 0 || p.FDs.Start <= 0 {
			t.Errorf("%s: RSS %d kB, %d fds: not read", p.Name, p.RSSKB.Start, p.FDs.Start)
		}
		hasGoroutines := !strings.HasPrefix(p.Name, "shard-") || strings.Contains(p.Name, "embedded")
		if strings.Contains(p.Name, "embedded") {
			hasGoroutines = false // an embedded shard is not given an admin listener
		}
		if hasGoroutines && p.Goroutines.Start <= 0 {
			t.Errorf("%s: goroutines not read", p.Name)
		}
		if !p.Judged {
			continue
		}
		if p.FDs.End > p.FDs.Start+slack || p.Goroutines.End > p.Goroutines.Start+goroutineSlack {
			t.Errorf("%s: fds %d -> %d, goroutines %d -> %d after the warm-up", p.Name, p.FDs.Start, p.FDs.End, p.Goroutines.Start, p.Goroutines.End)
		}
	}
	j := benchtest.JSON(t, res)
	if _, ok := j["pass"].(bool); !ok || benchtest.Num(t, j, "rate_per_s") <= 0 || len(j["samples"].([]any)) < 10 {
		t.Errorf("JSON: pass %v, rate %v, %d samples", j["pass"], j["rate_per_s"], len(j["samples"].([]any)))
	}
}

package pop_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture"
)

// envInt reads a positive integer from the environment, else def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

// TestIntegrationBurstNeverFailsOpen: with default flags everywhere (4 edges, one
// mcproxy, 3 memcached), 1,000 requests from 256 and from 32 connections
// at one key limited to 100/minute: fixed window and token bucket admit
// exactly the allowance (the bucket's includes what it refilled during the
// burst), sliding window at most one more, zero fail-open decisions, zero
// 503 on fail-closed routes; then a flood of distinct keys (2,000/s)
// makes zero fail-open decisions. POPLIMIT_BURST_ROUNDS (default 1) and
// POPLIMIT_FLOOD_SECONDS (default 3) set the
// length; `popbench faults --scenarios burst` runs the full form.
func TestIntegrationBurstNeverFailsOpen(t *testing.T) {
	edgeBin, mcBin := binaries(t)
	fixture.RequireMemcached(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := bench.NewEnv(ctx, bench.EnvConfig{Edge: true, Bins: &bench.Binaries{MCProxy: mcBin, Edge: edgeBin}, Store: bench.StoreMemcached})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	rep, err := bench.RunBurst(ctx, env, bench.BurstConfig{
		Rounds:   envInt(t, "POPLIMIT_BURST_ROUNDS", 1),
		FloodFor: time.Duration(envInt(t, "POPLIMIT_FLOOD_SECONDS", 3)) * time.Second,
		Log:      t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range rep.Bursts {
		what := b.Algorithm + "/" + b.FailMode + " conns " + strconv.Itoa(b.Conns)
		switch b.Algorithm {
		case "sliding_window":
			if b.Admitted > b.Limit+1 {
				t.Errorf("%s: admitted %d, want at most %d", what, b.Admitted, b.Limit+1)
			}
		default:
			if b.Admitted < b.Limit || b.Admitted > b.Allowance {
				t.Errorf("%s: admitted %d, want %d (allowance %d)", what, b.Admitted, b.Limit, b.Allowance)
			}
		}
		if b.FailOpen != 0 || b.Status503 != 0 || b.Other != 0 {
			t.Errorf("%s: %d fail-open decisions, %d answers 503, %d errors; want none", what, b.FailOpen, b.Status503, b.Other)
		}
	}
	if f := rep.Flood; f != nil && (f.FailOpen != 0 || f.Status503 != 0 || f.Other != 0) {
		t.Errorf("flood: %d fail-open decisions, %d answers 503, %d errors of %d; want none", f.FailOpen, f.Status503, f.Other, f.Sent)
	}
}

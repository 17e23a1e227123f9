package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestRunOpenSendsTheSchedule: every intended request is sent exactly
// once, whatever the machine's speed (the grace period is long), and each
// is either on time (the worker slept for it) or queued.
func TestRunOpenSendsTheSchedule(t *testing.T) {
	var calls atomic.Int64
	s := openSchedule{Rate: 2000, Duration: 100 * time.Millisecond, Workers: 4, Keys: 100, ZipfS: 1.1, Seed: 1, Grace: time.Minute}
	c, err := runOpen(context.Background(), s, func(context.Context, int, uint64) error { calls.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent != 200 || calls.Load() != 200 || c.Unsent != 0 || c.Errors != 0 {
		t.Fatalf("sent %d calls %d unsent %d errors %d, want 200 200 0 0", c.Sent, calls.Load(), c.Unsent, c.Errors)
	}
	if got := c.Lateness.Count() + c.Queued; got != 200 {
		t.Errorf("lateness samples %d + queued %d = %d, want 200", c.Lateness.Count(), c.Queued, got)
	}
	if c.Latency.Count() != 200 || c.Service.Count() != 200 {
		t.Errorf("latency %d service %d samples, want 200", c.Latency.Count(), c.Service.Count())
	}
}

// TestRunOpenNoCoordinatedOmission: one worker whose first request takes
// 30 ms. The requests intended meanwhile are not skipped: they go late,
// counted as queued, and their latency runs from their intended time, so
// it exceeds their (instant) service time.
func TestRunOpenNoCoordinatedOmission(t *testing.T) {
	var first atomic.Bool
	op := func(context.Context, int, uint64) error {
		if first.CompareAndSwap(false, true) {
			time.Sleep(30 * time.Millisecond)
			return errors.New("slow")
		}
		return nil
	}
	s := openSchedule{Rate: 1000, Duration: 50 * time.Millisecond, Workers: 1, Keys: 10, ZipfS: 1.1, Seed: 1, Grace: time.Minute}
	c, err := runOpen(context.Background(), s, op)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent != 50 || c.Errors != 1 {
		t.Fatalf("sent %d errors %d, want 50 and 1", c.Sent, c.Errors)
	}
	// Requests 1..28 were intended before the first one ended (≥ 30 ms
	// after request 0's intended time).
	if c.Queued < 28 {
		t.Errorf("queued %d, want ≥ 28", c.Queued)
	}
	// Request 1 (intended 1 ms after request 0) waited ≥ 29 ms.
	if c.Latency.Count() < 2 || c.Latency.Quantile(100-100.0/50) < 29*time.Millisecond {
		t.Errorf("second-highest latency %v, want ≥ 29ms", c.Latency.Quantile(100-100.0/50))
	}
}

// TestRunOpenGraceCutsTheRest: a path that never answers in time leaves
// the rest of the schedule unsent (counted), and the run ends.
func TestRunOpenGraceCutsTheRest(t *testing.T) {
	op := func(ctx context.Context, _ int, _ uint64) error {
		time.Sleep(40 * time.Millisecond)
		return nil
	}
	s := openSchedule{Rate: 1000, Duration: 20 * time.Millisecond, Workers: 2, Keys: 10, ZipfS: 1.1, Seed: 1, Grace: 10 * time.Millisecond}
	c, err := runOpen(context.Background(), s, op)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent+c.Unsent != 20 || c.Unsent == 0 {
		t.Errorf("sent %d + unsent %d, want 20 with some unsent", c.Sent, c.Unsent)
	}
}

// TestRunOpenLoopTiny runs every path through real memcached, nutcracker,
// mcproxy and rls at one low rate for a short time.
func TestRunOpenLoopTiny(t *testing.T) {
	fixture.RequireMemcached(t)
	fixture.RequireNutcracker(t)
	rep, err := RunOpenLoop(context.Background(), OpenLoopConfig{
		Rates: []float64{200}, Duration: 200 * time.Millisecond, Rounds: 2, Workers: 4, Keys: 100,
		CapacityDuration: 200 * time.Millisecond, McproxyBin: fixture.Binary(t, "mcproxy"), RLSBin: fixture.Binary(t, "rls"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Capacity <= 0 || rep.RLSCapacity <= 0 {
		t.Errorf("capacity %v, rls's own %v", rep.Capacity, rep.RLSCapacity)
	}
	if want := 2 * len(AllOpenPaths); len(rep.Runs) != want {
		t.Fatalf("%d runs, want %d", len(rep.Runs), want)
	}
	for i, r := range rep.Runs { // interleaved: every path once per round
		if r.Path != AllOpenPaths[i%len(AllOpenPaths)] || r.Round != 1+i/len(AllOpenPaths) {
			t.Errorf("run %d is %s round %d", i, r.Path, r.Round)
		}
	}
	if len(rep.Summary) != len(AllOpenPaths) {
		t.Fatalf("%d summaries", len(rep.Summary))
	}
	for _, s := range rep.Summary {
		if s.Sent+s.Unsent != 80 || s.Errors != 0 {
			t.Errorf("%s: sent %d unsent %d errors %d, want 80 requests, no error", s.Path, s.Sent, s.Unsent, s.Errors)
		}
		if s.P99Ratio <= 0 {
			t.Errorf("%s: p99 ratio to the floor %v", s.Path, s.P99Ratio)
		}
		if s.Path != PathGenerator && s.Path != PathFloor && s.Proxy.UserUS+s.Proxy.SystemUS+s.Proxy.Voluntary == 0 {
			t.Errorf("%s: nothing charged to the proxy: %+v", s.Path, s.Proxy)
		}
		if served := s.Server.UserUS + s.Server.SystemUS + s.Server.Voluntary; (s.Path == PathRLS) != (served > 0) {
			t.Errorf("%s: charged to the server %+v", s.Path, s.Server)
		}
	}
	if len(rep.Notes) != 4 {
		t.Errorf("notes %q, want the four target checks", rep.Notes)
	}
	if len(rep.Tables()) != 4 {
		t.Error("tables")
	}
}

// TestRunOpenLoopBadConfig: bad rates and paths are errors before anything
// starts.
func TestRunOpenLoopBadConfig(t *testing.T) {
	if _, err := RunOpenLoop(context.Background(), OpenLoopConfig{Rates: []float64{-1}}); !errors.Is(err, ErrOpenLoop) {
		t.Errorf("negative rate: %v", err)
	}
	if _, err := RunOpenLoop(context.Background(), OpenLoopConfig{Paths: []string{"nope"}}); !errors.Is(err, ErrOpenLoop) {
		t.Error("unknown path: no error")
	}
}

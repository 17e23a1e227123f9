package daemon

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

// unknown is the machine's idle cores when MachineIdle is nil.
var unknown = math.Inf(1)

// TestProcsGovernorStep: the Ps double after two busy intervals (not
// one), stop at Max, halve only after LowerAfter quiet intervals in a
// row (a busy one in between starts the count again), and never go
// under one.
func TestProcsGovernorStep(t *testing.T) {
	g := newProcsGovernor(ProcsConfig{Max: 6, Raise: 0.8, Lower: 0.45}.withDefaults())
	steps := []struct {
		cores float64
		want  int
	}{
		{0.9, 1}, // one busy interval: not yet
		{0.5, 1}, // the run of busy intervals ends
		{0.9, 1},
		{0.95, 2}, // two in a row: double
		{1.5, 2},  // under 0.8 × 2
		{1.7, 2},
		{1.7, 4},
		{3.5, 4},
		{3.3, 6}, // capped at Max, not 8
		{5.9, 6},
		{5.9, 6},
	}
	for i, s := range steps {
		if got := g.step(s.cores, unknown); got != s.want {
			t.Fatalf("step %d (%.2f cores): %d Ps, want %d", i, s.cores, got, s.want)
		}
	}
	// Halving from 6 needs < 0.45 × 3 = 1.35 cores for 20 intervals.
	for i := range 19 {
		if got := g.step(1.0, unknown); got != 6 {
			t.Fatalf("quiet interval %d: %d Ps, want 6 still", i, got)
		}
	}
	if got := g.step(1.4, unknown); got != 6 { // not quiet enough: the count restarts
		t.Fatalf("1.4 cores: %d Ps, want 6", got)
	}
	for range 19 {
		g.step(1.0, unknown)
	}
	if got := g.step(1.0, unknown); got != 3 {
		t.Fatalf("after 20 quiet intervals: %d Ps, want 3", got)
	}
	for range 20 {
		g.step(0.1, unknown)
	}
	if got := g.procs; got != 1 {
		t.Fatalf("after 20 idle intervals at 3: %d Ps, want 1", got)
	}
	for range 100 {
		if got := g.step(0, unknown); got != 1 {
			t.Fatalf("idle at 1: %d Ps", got)
		}
	}
}

// TestGovernProcs runs the loop on a fake CPU clock: the process starts
// on one P, goes to Max while its CPU use says busy, back to one when
// idle, and the loop returns when ctx ends. The fake clocks advance per
// call, so the outcome does not depend on real time.
func TestGovernProcs(t *testing.T) {
	var mu sync.Mutex
	var now time.Time
	var cpu, idle time.Duration
	busy := 1.9 // cores used per interval
	var set []int
	changed := make(chan int, 64)
	cfg := ProcsConfig{
		Max:        2,
		Interval:   time.Millisecond,
		LowerAfter: 3,
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(10 * time.Millisecond)
			cpu += time.Duration(busy * float64(10*time.Millisecond))
			idle += 10 * time.Millisecond // one core free
			return now
		},
		MachineIdle: func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return idle
		},
		CPU: func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return cpu
		},
		SetProcs: func(n int) {
			mu.Lock()
			set = append(set, n)
			mu.Unlock()
			changed <- n
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := GovernProcs(ctx, cfg)
	wait := func(want int) {
		t.Helper()
		select {
		case n := <-changed:
			if n != want {
				t.Fatalf("GOMAXPROCS set to %d, want %d (so far %v)", n, want, set)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("GOMAXPROCS never set to %d (so far %v)", want, set)
		}
	}
	wait(1) // the start
	wait(2) // busy
	mu.Lock()
	busy = 0.05
	mu.Unlock()
	wait(1)
	cancel()
	<-done
}

// TestGovernProcsOff: with one P allowed, nothing is set, and the
// returned channel is closed at once.
func TestGovernProcsOff(t *testing.T) {
	set := false
	<-GovernProcs(context.Background(), ProcsConfig{Max: 1, SetProcs: func(int) { set = true }}) // closed at once
	if set {
		t.Fatal("GovernProcs set GOMAXPROCS with Max 1")
	}
}

// TestProcsGovernorDefaults: with the default thresholds a light or
// moderate load (0.6 of a core) stays on one P, a load near saturation
// (0.75) gets two and keeps them while it uses more than 0.6 of a core,
// and only a load under 0.6 cores for 2 s gives one back.
func TestProcsGovernorDefaults(t *testing.T) {
	g := newProcsGovernor(ProcsConfig{Max: 2}.withDefaults())
	for range 50 {
		if got := g.step(0.6, unknown); got != 1 {
			t.Fatalf("0.6 cores: %d Ps, want 1", got)
		}
	}
	g.step(0.75, unknown)
	if got := g.step(0.75, unknown); got != 2 {
		t.Fatalf("0.75 cores twice: %d Ps, want 2", got)
	}
	for range 50 {
		if got := g.step(0.65, unknown); got != 2 {
			t.Fatalf("0.65 cores at 2 Ps: %d Ps, want 2", got)
		}
	}
	for range 19 {
		g.step(0.55, unknown)
	}
	if got := g.step(0.55, unknown); got != 1 {
		t.Fatalf("0.55 cores for 20 intervals at 2 Ps: %d Ps, want 1", got)
	}
}

// TestProcsGovernorNeedsAnIdleCore: a busy process gets a second P only
// while the machine has Room idle cores to run it, or while its Ps are
// saturated; a busy interval without either breaks the run of two that
// doubling needs.
func TestProcsGovernorNeedsAnIdleCore(t *testing.T) {
	g := newProcsGovernor(ProcsConfig{Max: 4}.withDefaults())
	for range 50 {
		if got := g.step(0.9, 0.1); got != 1 {
			t.Fatalf("0.9 cores busy, 0.1 idle on the machine: %d Ps, want 1", got)
		}
	}
	g.step(0.9, 1.0)
	if got := g.step(0.9, 0.2); got != 1 {
		t.Fatalf("the second busy interval had no idle core: %d Ps, want 1", got)
	}
	g.step(0.9, 1.0)
	if got := g.step(0.9, 0.6); got != 2 {
		t.Fatalf("two busy intervals with an idle core: %d Ps, want 2", got)
	}
	for range 50 { // busy on two with no room: stays, neither up nor down
		if got := g.step(1.8, 0); got != 2 {
			t.Fatalf("1.8 cores busy, none idle: %d Ps, want 2", got)
		}
	}
	g.step(1.95, 0) // saturated: doubles without an idle core
	if got := g.step(1.97, 0); got != 4 {
		t.Fatalf("two saturated intervals: %d Ps, want 4", got)
	}
}

// TestMachineIdleAdvances: where the machine's idle time can be read, it
// never goes back and grows while a core sleeps.
func TestMachineIdleAdvances(t *testing.T) {
	idle := machineIdle()
	if idle == nil {
		t.Skip("no machine idle time on this system")
	}
	a := idle()
	time.Sleep(200 * time.Millisecond)
	if b := idle(); b < a {
		t.Fatalf("idle time went back: %v then %v", a, b)
	}
}

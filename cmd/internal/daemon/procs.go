package daemon

import (
	"context"
	"log/slog"
	"math"
	"runtime"
	"time"
)

// GOMAXPROCS that follows the load (the --procs 0 default of mcproxy and edge).
//
// GovernProcs runs the process on one P while it is lightly or moderately
// loaded, doubling the Ps (up to Max) once they are more than Raise busy
// while the machine has Room idle cores for them (or they are saturated),
// and halving them again once the load would fit in half of them under
// Lower busy. Why: one P costs fewer thread wake-ups per request, until
// it is busy enough that requests queue behind each other; and a P no
// core is free to run adds wake-ups, not throughput. The defaults'
// measurements are in bench/RESULTS.md ("Figures behind code defaults").

// ProcsConfig configures GovernProcs. Zero means default.
type ProcsConfig struct {
	// Max is the most Ps it sets; default runtime.GOMAXPROCS(0) when
	// GovernProcs starts (one per core, or the cgroup's CPU limit).
	Max int
	// Interval is the time between two samples of the process's CPU time;
	// default 100 ms.
	Interval time.Duration
	// Raise: when the process used more than this share of its Ps' time
	// over two consecutive intervals, the Ps double (at most Max).
	// Default 0.7: one P is cheaper per request (fewer thread wake-ups)
	// until it nears saturation.
	Raise float64
	// Room: the Ps double only while the machine's cores were idle at
	// least this much (in cores, over the interval), or while the process
	// used more than Saturated of its Ps' time: a P that is never idle
	// queues requests whatever the machine does. Defaults 0.5 and 0.95.
	Room, Saturated float64
	// Lower: when, for LowerAfter consecutive intervals, the process used
	// less than this share of half its Ps' time, the Ps halve (at least
	// one). Default 0.6: under Raise, so a load that halves them is under
	// Raise on the Ps left and the count does not swing back and forth.
	Lower float64
	// LowerAfter is the number of intervals under Lower before the Ps
	// halve; default 20 (2 s at the default Interval).
	LowerAfter int
	// CPU returns the CPU time, user and system, the process used so far;
	// default getrusage(RUSAGE_SELF) (nil where that does not exist:
	// GovernProcs then leaves GOMAXPROCS alone).
	CPU func() time.Duration
	// MachineIdle returns the idle time of all the machine's cores so far;
	// default /proc/uptime's idle time where it exists (nil elsewhere:
	// the Ps then double on the process's CPU use alone).
	MachineIdle func() time.Duration
	// SetProcs sets the number of Ps; default runtime.GOMAXPROCS.
	SetProcs func(n int)
	// Now is the clock of the intervals; default time.Now.
	Now func() time.Time
	// Logger receives one debug line per change; default slog.Default().
	Logger *slog.Logger
}

func (c ProcsConfig) withDefaults() ProcsConfig {
	if c.Max <= 0 {
		c.Max = runtime.GOMAXPROCS(0)
	}
	if c.Interval <= 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.Raise <= 0 {
		c.Raise = 0.7
	}
	if c.Room <= 0 {
		c.Room = 0.5
	}
	if c.Saturated <= 0 {
		c.Saturated = 0.95
	}
	if c.Lower <= 0 {
		c.Lower = 0.6
	}
	if c.LowerAfter <= 0 {
		c.LowerAfter = 20
	}
	if c.CPU == nil {
		c.CPU = processCPU
	}
	if c.MachineIdle == nil {
		c.MachineIdle = machineIdle()
	}
	if c.SetProcs == nil {
		c.SetProcs = func(n int) { runtime.GOMAXPROCS(n) }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// GovernProcs sets GOMAXPROCS to 1 before it returns, then, on a
// goroutine of its own, to what the process's CPU use calls for (see
// ProcsConfig) every Interval until ctx ends, leaving the last count set.
// The returned channel is closed once that goroutine has exited. With Max
// 1, or without a CPU clock, it changes nothing and the channel is closed
// already.
func GovernProcs(ctx context.Context, cfg ProcsConfig) <-chan struct{} {
	cfg = cfg.withDefaults()
	done := make(chan struct{})
	if cfg.Max <= 1 || cfg.CPU == nil {
		close(done)
		return done
	}
	g := newProcsGovernor(cfg)
	cfg.SetProcs(g.procs)
	go func() {
		defer close(done)
		g.run(ctx)
	}()
	return done
}

// run samples the CPU clock every Interval and applies step's verdicts
// until ctx ends.
func (g *procsGovernor) run(ctx context.Context) {
	cfg := g.cfg
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	lastCPU, lastAt := cfg.CPU(), cfg.Now()
	var lastIdle time.Duration
	if cfg.MachineIdle != nil {
		lastIdle = cfg.MachineIdle()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cpu, at := cfg.CPU(), cfg.Now()
		wall := at.Sub(lastAt)
		if wall <= 0 {
			continue
		}
		cores := float64(cpu-lastCPU) / float64(wall)
		free := math.Inf(1)
		if cfg.MachineIdle != nil {
			idle := cfg.MachineIdle()
			free = float64(idle-lastIdle) / float64(wall)
			lastIdle = idle
		}
		lastCPU, lastAt = cpu, at
		from := g.procs
		if to := g.step(cores, free); to != from {
			cfg.SetProcs(to)
			cfg.Logger.Debug("GOMAXPROCS changed", "from", from, "to", to, "cores_used", cores, "cores_idle", free)
		}
	}
}

// procsGovernor is GovernProcs' decision, apart from clocks and the
// runtime: step takes the cores the process used over one interval.
type procsGovernor struct {
	cfg         ProcsConfig
	procs       int // the count set now
	over, under int // consecutive intervals above Raise, below Lower
}

func newProcsGovernor(cfg ProcsConfig) *procsGovernor {
	return &procsGovernor{cfg: cfg, procs: 1}
}

// step records one interval in which the process used cores CPUs and the
// machine left free CPUs idle on average (+Inf: unknown), and returns the
// count of Ps to run on from now.
func (g *procsGovernor) step(cores, free float64) int {
	p := g.procs
	if p < g.cfg.Max && cores > g.cfg.Raise*float64(p) {
		g.under = 0
		if free < g.cfg.Room && cores < g.cfg.Saturated*float64(p) {
			g.over = 0 // busy, but no core to run another P
			return p
		}
		if g.over++; g.over >= 2 {
			g.procs, g.over = min(2*p, g.cfg.Max), 0
		}
		return g.procs
	}
	g.over = 0
	half := max(p/2, 1)
	if p == 1 || cores >= g.cfg.Lower*float64(half) {
		g.under = 0
		return p
	}
	if g.under++; g.under >= g.cfg.LowerAfter {
		g.procs, g.under = half, 0
	}
	return g.procs
}

package daemon

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// The garbage collector's heap floor (StartHeapFloor; distinct from
// RunGCFloor, which forces collections of an idle daemon).
//
// With a floor the heap goal is at least the floor while the live heap is
// small, and Go's own (twice the live heap) once the live heap is above
// half the floor: memory stays bounded by max(floor, 2 × live). Why: a
// daemon with a small live heap that allocates per decision (rls) would
// otherwise sit at Go's minimum goal and collect many times a second under
// load. The default's measurement is in bench/RESULTS.md ("Figures behind
// code defaults").
//
// After every collection (a finalizer re-armed each cycle) GOGC is set so
// that the next goal is the floor: GOGC = 100 × (floor − live) / live,
// never below 100.

// DefaultHeapFloorMiB is the default of the daemons' --gc-heap-floor-mib.
const DefaultHeapFloorMiB = 16

// heapFloorPercent is the GOGC that puts the heap goal at floor for a live
// heap of live bytes: at least 100 (Go's default), at most 10,000.
func heapFloorPercent(floor, live uint64) int {
	if live == 0 || floor <= 2*live {
		return 100
	}
	p := 100 * (floor - live) / live
	return int(min(p, 10000))
}

// HeapFloor retunes GOGC after each collection (StartHeapFloor).
type HeapFloor struct {
	floor   uint64
	percent atomic.Int64 // the GOGC set last
	stopped atomic.Bool
	sample  []metrics.Sample
}

// StartHeapFloor keeps the heap goal at floor bytes or more (see above).
// It does nothing with floor 0, or when GOGC is set in the environment
// (the operator's choice wins); it returns nil then.
func StartHeapFloor(floor uint64, logger *slog.Logger) *HeapFloor {
	if floor == 0 {
		return nil
	}
	if v, ok := os.LookupEnv("GOGC"); ok {
		logger.Info("GOGC is set: --gc-heap-floor-mib is ignored", "GOGC", v)
		return nil
	}
	g := &HeapFloor{floor: floor, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	g.percent.Store(100)
	g.tune()
	g.arm()
	return g
}

// sentinel is an object made to be collected: its finalizer runs after
// the collection that found it unreachable. Large enough to stay out of
// the tiny allocator (whose blocks may never be finalized).
type sentinel struct{ _ [32]byte }

func (g *HeapFloor) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if g.stopped.Load() {
			return
		}
		g.tune()
		g.arm()
	})
}

// Stop ends the retuning after the next collection (GOGC stays as set).
func (g *HeapFloor) Stop() { g.stopped.Store(true) }

// tune sets GOGC from the live heap of the last collection.
func (g *HeapFloor) tune() {
	metrics.Read(g.sample)
	if g.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := int64(heapFloorPercent(g.floor, g.sample[0].Value.Uint64()))
	if old := g.percent.Load(); p == old || (p > old*9/10 && p < old*11/10 && p != 100) {
		return // within 10%: not worth a change
	}
	g.percent.Store(p)
	debug.SetGCPercent(int(p))
}

// Percent is the GOGC set last.
func (g *HeapFloor) Percent() int { return int(g.percent.Load()) }

package daemon

import (
	"context"
	"runtime"
	"runtime/metrics"
	"time"
)

// DefaultGCEvery is the default of RunGCFloor's every: the daemons'
// --gc-every.
const DefaultGCEvery = 10 * time.Second

// gcCycles is the runtime/metrics name of the number of completed
// collections (forced or not).
const gcCycles = "/gc/cycles/total:gc-cycles"

// RunGCFloor runs a collection whenever none has run for every, until ctx
// ends; every <= 0 returns at once.
//
// Why: a daemon such as mcproxy has a live heap of a few MB and allocates
// almost nothing per request, so at a moderate load its collections are a
// minute or more apart (the heap must double first; the runtime forces one
// only every 2 minutes). Between them the heap grows towards twice the live
// heap, and each cycle pages in a part of memory the scavenger had
// returned: the resident set climbs for several minutes (measured: mcproxy
// 19 → 25 MB over 6 minutes at 650 requests/s, its heap flat) until it
// reaches the scavenger's plateau, 110% of the collector's goal. With a
// collection at least every few seconds the heap between two collections
// is the live heap plus a few seconds of allocation: the resident set
// settles within the first cycles and stays there. Under load collections
// are more frequent than every anyway, and RunGCFloor forces none. A
// collection of a few-MB heap costs a few milliseconds of CPU (2-16 ms in
// gctrace on a loaded 2-core machine), mostly
// concurrent with the daemon's goroutines.
func RunGCFloor(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	sample := []metrics.Sample{{Name: gcCycles}}
	cycles := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last := cycles()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := cycles(); n != last {
			last = n // the runtime collected on its own since: nothing to do
			continue
		}
		runtime.GC()
		last = cycles()
	}
}

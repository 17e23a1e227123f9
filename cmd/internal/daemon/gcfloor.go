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
// Why: a daemon that allocates almost nothing per request (mcproxy)
// collects rarely, and between collections its resident set climbs back to
// the scavenger's plateau; regular collections keep it settled. Under load
// collections come more often than every anyway, and RunGCFloor forces
// none. The figures are in bench/RESULTS.md ("Figures behind code
// defaults").
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

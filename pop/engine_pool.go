package pop

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The goroutines DecideAll runs its checks on. A check's decision goes
// deep (engine → counter's coalescing → the store client's call), so a
// goroutine started for it grows its stack two or three times before it
// waits on the store, and is gone after: under load that stack copying
// and the goroutine's start were ~8% of rls's CPU. These workers live on
// with their grown stacks, each waiting for the next check.

// checkJob is one check of a DecideAll call, run by a worker.
type checkJob struct {
	l   *Limiter
	ctx context.Context
	c   *Check
	now time.Time
	out *Decision
	wg  *sync.WaitGroup
	// then is the next check of the same identity, run after this one;
	// chained marks a job run by an earlier one's worker.
	then    *checkJob
	chained bool
}

func (j *checkJob) run() {
	wg := j.wg
	for k := j; k != nil; k = k.then {
		*k.out = k.l.decideCheck(k.ctx, *k.c, k.now)
	}
	wg.Done()
}

// maxCheckWorkers bounds the workers that stay parked, waiting for a
// check, in one process (all Limiters share them): a burst needing more
// runs the extra checks on goroutines that end with them.
const maxCheckWorkers = 512

// checkWorkers hands checks to parked workers. One set per process: a
// worker holds no Limiter between jobs, and per-Limiter sets would leave
// parked goroutines behind every Limiter a program drops.
var checkWorkers = struct {
	jobs chan *checkJob // unbuffered: a send succeeds only into a parked worker
	n    atomic.Int64   // workers alive
}{jobs: make(chan *checkJob)}

// goCheck runs j on a parked worker, else on a new goroutine that becomes
// a worker when there is room for one.
func goCheck(j *checkJob) {
	select {
	case checkWorkers.jobs <- j:
		return
	default:
	}
	if checkWorkers.n.Add(1) > maxCheckWorkers {
		checkWorkers.n.Add(-1)
		go j.run()
		return
	}
	go checkWorker(j)
}

// checkWorker runs j, then every check handed to it, forever (bounded by
// maxCheckWorkers).
func checkWorker(j *checkJob) {
	for {
		j.run()
		j = nil // hold nothing of the finished call while parked
		j = <-checkWorkers.jobs
	}
}

// checkBatch is the state of one DecideAll call: one allocation for
// batches of up to len(jobs) checks.
type checkBatch struct {
	wg   sync.WaitGroup
	jobs [4]checkJob
}

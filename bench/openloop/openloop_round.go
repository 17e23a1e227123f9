package openloop

import (
	"context"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// openAcc accumulates one path's slices of one round: per-sender counts
// (reused, so a slice allocates no histogram) and the CPU charged.
type openAcc struct {
	path                         *openPath
	per                          *workerCounts
	client, proxy, shard, server procs.Usage
}

// sliceGrace is how long a slice may go on sending its late requests: a
// stall longer than a slice must not drop them (they are the slowest, the
// tail itself), but a path that cannot keep up must not hold the run
// forever; what is still unsent after it is counted in Unsent.
const sliceGrace = time.Second

// measureRound runs one round of every path at rate: cfg.Duration per
// path, sent in slices of cfg.Slice, the paths rotated slice by slice
// (rotation k starts at path k mod len(paths)). It returns one pathRun per
// path, in paths' order; seed varies the Zipf streams by round.
func measureRound(ctx context.Context, cfg OpenLoopConfig, rate float64, seed uint64, paths []*openPath) ([]*pathRun, error) {
	accs := make([]*openAcc, len(paths))
	for i, p := range paths {
		accs[i] = &openAcc{path: p, per: newWorkerCounts(cfg.Workers)}
	}
	slices := max(1, int((cfg.Duration+cfg.Slice-1)/cfg.Slice))
	for k := range slices {
		d := min(cfg.Slice, cfg.Duration-time.Duration(k)*cfg.Slice)
		for j := range accs {
			a := accs[(k+j)%len(accs)]
			s := openSchedule{Rate: rate, Duration: d, Workers: cfg.Workers, MaxWorkers: cfg.MaxWorkers, Keys: cfg.Keys,
				ZipfS: cfg.ZipfS, Seed: seed*1000 + uint64(k), Grace: sliceGrace}
			if err := a.slice(ctx, s); err != nil {
				return nil, err
			}
		}
	}
	runs := make([]*pathRun, len(accs))
	for i, a := range accs {
		runs[i] = &pathRun{Path: a.path.Name, Rate: rate, counts: a.per.merged(),
			client: a.client, proxy: a.proxy, shard: a.shard, server: a.server}
		runs[i].fill()
	}
	return runs, nil
}

// slice runs s on the path and charges it the CPU and context switches of
// this process, the path's proxy, shards and server. The other processes
// are read outside this process's own sample, so reading /proc is not
// charged to the client.
func (a *openAcc) slice(ctx context.Context, s openSchedule) error {
	p := a.path
	var proxy []int
	if p.Proxy != 0 {
		proxy = []int{p.Proxy}
	}
	px0, sh0, sv0 := procs.SampleUsage(proxy), procs.SampleUsage(p.Shards), procs.SampleUsage(p.Server)
	self0 := procs.SelfUsage()
	if err := runOpenInto(ctx, s, p.Op, a.per); err != nil {
		return err
	}
	a.client = a.client.Add(procs.SelfUsage().Sub(self0))
	a.proxy = a.proxy.Add(procs.SampleUsage(proxy).Sub(px0))
	a.shard = a.shard.Add(procs.SampleUsage(p.Shards).Sub(sh0))
	a.server = a.server.Add(procs.SampleUsage(p.Server).Sub(sv0))
	return nil
}

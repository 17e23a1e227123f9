// Package bench launches PoPs (memcached shards, mcproxy and edge workers as
// processes on free loopback ports), drives seeded workloads through them and
// holds what every benchmark shares: the launcher, workloads, latency
// histograms, reports and charts, and the scenarios small enough to need no
// package of their own (demo, load, memory, central, global, pops, burst).
// The larger benchmarks live beside it: openloop, proxycmp, soak, accuracy,
// faults and rlsbench. It is the engine of cmd/popbench; no library package
// imports it (tests may).
package bench

import "time"

// defaultTo sets *v to def when it is zero or negative: the "zero means
// default" rule of every Config in this package.
func defaultTo[T int | int64 | uint64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

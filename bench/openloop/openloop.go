// Package openloop is popbench load --open: requests sent at fixed rates
// whatever the answers (no coordinated omission) through every path from
// the bare memcached floor to a whole PoP, latency counted from the
// intended send time.
package openloop

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/proxycmp"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// OpenLoopConfig configures RunOpenLoop. Zero means default.
type OpenLoopConfig struct {
	// Rates are the offered loads in requests/s; default 25%, 50% and 75%
	// of the capacity measured first.
	Rates []float64
	// Fractions of the measured capacity when Rates is empty; default
	// 0.25, 0.5, 0.75.
	Fractions []float64
	// Duration of each run (one path at one rate in one round); default
	// 2s, sent in slices of Slice.
	Duration time.Duration
	// Slice is how long one path runs before the next takes over: each
	// round rotates through the paths Duration/Slice times (the first path
	// of each rotation shifts by one), so that machine noise lasting more
	// than a rotation (paths × Slice) falls on every path alike instead of
	// on one run;
	// default 100ms (Duration when longer).
	Slice time.Duration
	// Rounds of the interleaved sequence of paths per rate; default 5.
	// The report gives each path's p99 pooled over the rounds and the
	// median of its per-round p99 (and of its ratio to the floor's in
	// the same round).
	Rounds int
	// Workers is the number of sending goroutines each run starts with
	// (each sends the next unclaimed request of the schedule when its
	// previous one is answered, at most one at a time), and the closed
	// loop's clients; default 32. MaxWorkers is how many senders a run
	// may grow to, one more each time a request comes due with no other
	// sender free to wait for the next (as an edge serves every request
	// on its own goroutine, a request then never waits for the generator
	// while the path is slow); default Workers: a fixed pool. Growing
	// has a cost of its own on the gomemcache paths: each sender in a
	// request holds a connection, so a stall opens hundreds, and the
	// proxies' tails then measure connection churn.
	Workers, MaxWorkers int
	// Keys and ZipfS: the identity space, Zipf-drawn; default 10,000 and
	// 1.1.
	Keys  uint64
	ZipfS float64
	// Quantity per second per identity of the decision paths; default
	// 1<<30 (every decision admitted and counted in the store).
	Quantity int64
	// Paths to measure, in order; default AllOpenPaths.
	Paths []string
	// CapacityPath is the path whose closed-loop throughput is the
	// capacity (default PathPopGomemcache: a full decision whose client
	// makes one round trip per store operation, as the floor's, nutcracker's
	// and mcproxy's paths do; the pipelined pop-pipe's closed loop reaches
	// about twice that, and at half of it the floor's client alone takes one of 2 cores and the proxy paths keep
	// the whole machine 80-90% busy, so their tails measure saturation,
	// not latency at half load); CapacityDuration its run (default 2s).
	CapacityPath     string
	CapacityDuration time.Duration
	// McproxyBin is the mcproxy binary; default built from ./cmd/mcproxy.
	// McproxyArgs are extra arguments.
	McproxyBin  string
	McproxyArgs []string
	// RLSBin is the rls binary (PathRLS); default built from ./cmd/rls.
	RLSBin string
	// Progress receives one line per run; nil is silent.
	Progress io.Writer
}

func (c OpenLoopConfig) withDefaults() OpenLoopConfig {
	if len(c.Fractions) == 0 {
		c.Fractions = []float64{0.25, 0.5, 0.75}
	}
	defaultTo(&c.Duration, 2*time.Second)
	defaultTo(&c.Slice, 100*time.Millisecond)
	c.Slice = min(c.Slice, c.Duration)
	defaultTo(&c.Rounds, 5)
	defaultTo(&c.Workers, 32)
	c.MaxWorkers = max(c.MaxWorkers, c.Workers)
	defaultTo(&c.Keys, 10000)
	if c.ZipfS <= 1 {
		c.ZipfS = 1.1
	}
	defaultTo(&c.Quantity, 1<<30)
	if len(c.Paths) == 0 {
		c.Paths = allOpenPaths
	}
	if c.CapacityPath == "" {
		c.CapacityPath = pathPopGomemcache
	}
	defaultTo(&c.CapacityDuration, 2*time.Second)
	return c
}

// pathRun is one open-loop run: one path at one rate.
type pathRun struct {
	Path  string  `json:"path"`
	Rate  float64 `json:"rate"`
	Round int     `json:"round"`
	// Latency from the intended send time, Service from the actual one,
	// Lateness the generator's wake-up error (see openCounts).
	Latency  bench.Summary `json:"latency"`
	Service  bench.Summary `json:"service"`
	Lateness bench.Summary `json:"lateness"`
	Sent     int64         `json:"sent"`
	Errors   int64         `json:"errors"`
	Queued   int64         `json:"queued"`
	// Senders is the most sending goroutines in requests at once in any
	// slice of the run (the pool grows to keep one free; see MaxWorkers).
	Senders int   `json:"senders"`
	Unsent  int64 `json:"unsent"`
	// Client is this process (generator and client library), Proxy the
	// proxy's process, Shards the memcached processes, Server the
	// decision's server (rls; zero for the other paths), per request.
	Client procs.PerRequest `json:"client"`
	Proxy  procs.PerRequest `json:"proxy"`
	Shards procs.PerRequest `json:"shards"`
	Server procs.PerRequest `json:"server"`
	// Busy is the share of the machine's CPUs the path's processes
	// (this one, the generator included, the proxy, the shards, the
	// server) used while it ran: near 1 the path's latency is the run
	// queue's, not its own.
	Busy float64 `json:"machine_busy"`

	counts                       *openCounts
	client, proxy, shard, server procs.Usage
}

// OpenSummary is one path at one rate over every round: histograms
// merged, CPU summed.
type openSummary struct {
	pathRun
	// P99Ratio and P50Ratio are this path's over the floor's at the same
	// rate; AddedP99MS its p99 minus the floor's (0 without a floor).
	P50Ratio   float64 `json:"p50_ratio_to_floor"`
	P99Ratio   float64 `json:"p99_ratio_to_floor"`
	AddedP99MS float64 `json:"added_p99_ms"`
	// MedianP99MS is the median over rounds of the path's p99 in each
	// round; MedianP99Ratio of its ratio to the floor's p99 in the same
	// round, MedianAddedP99MS of its excess over it. A burst of machine
	// noise in one round moves the pooled p99 but not these.
	MedianP99MS      float64 `json:"median_p99_ms"`
	MedianP99Ratio   float64 `json:"median_p99_ratio_to_floor"`
	MedianAddedP99MS float64 `json:"median_added_p99_ms"`
}

// OpenLoopReport is RunOpenLoop's result.
type openLoopReport struct {
	Date     string  `json:"date"`
	NumCPU   int     `json:"num_cpu"`
	LoadAvg  string  `json:"load_average"`
	Capacity float64 `json:"capacity_per_s"`
	// CapacityPath is the path measured closed loop for Capacity.
	CapacityPath string `json:"capacity_path"`
	// RLSCapacity is the rls path's own closed-loop capacity, measured
	// too when it is a path but not the capacity path (a gRPC hop costs
	// more CPU per decision: the rates may be a larger share of it).
	RLSCapacity float64        `json:"rls_capacity_per_s,omitempty"`
	Workers     int            `json:"workers"`
	MaxWorkers  int            `json:"max_workers"`
	Keys        uint64         `json:"keys"`
	Seconds     float64        `json:"seconds_per_run"`
	Slice       float64        `json:"seconds_per_slice"`
	Rounds      int            `json:"rounds"`
	Paths       []pathInfo     `json:"paths"`
	Runs        []*pathRun     `json:"runs"`
	Summary     []*openSummary `json:"summary"`
	Notes       []string       `json:"notes,omitempty"`
}

// PathInfo describes a measured path.
type pathInfo struct {
	Name   string `json:"name"`
	Detail string `json:"detail"`
}

// RunOpenLoop starts 3 memcached shards, nutcracker and mcproxy over them
// (the same pool YAML), measures the capacity of cfg.CapacityPath closed
// loop, then runs every path at every rate open loop, the paths
// interleaved round by round, and summarises each path per rate with its
// ratios to the floor.
func RunOpenLoop(ctx context.Context, cfg OpenLoopConfig) (bench.Result, error) {
	r, err := runOpenLoop(ctx, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runOpenLoop is RunOpenLoop returning the report itself.
func runOpenLoop(ctx context.Context, cfg OpenLoopConfig) (*openLoopReport, error) {
	cfg = cfg.withDefaults()
	if _, err := bench.NewZipf(1, cfg.ZipfS, cfg.Keys); err != nil {
		return nil, err
	}
	for _, p := range append(cfg.Paths, cfg.CapacityPath) {
		if !slices.Contains(allOpenPaths, p) || p == pathGenerator && p == cfg.CapacityPath {
			return nil, fmt.Errorf("%w: path %q: want one of %v (the capacity path not %s)", errOpenLoop, p, allOpenPaths, pathGenerator)
		}
	}
	for _, r := range cfg.Rates {
		if r <= 0 {
			return nil, fmt.Errorf("%w: rate %v: want > 0", errOpenLoop, r)
		}
	}
	dir, err := os.MkdirTemp("", "popbench-openloop-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	t, stop, err := startOpenTargets(ctx, cfg, dir)
	if err != nil {
		return nil, err
	}
	defer stop()
	names := append([]string{}, cfg.Paths...)
	paths, err := openPaths(append(names, cfg.CapacityPath), t)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range paths {
			p.close()
		}
	}()
	capPath, paths := paths[len(paths)-1], paths[:len(paths)-1]
	rep := &openLoopReport{Date: time.Now().UTC().Format(time.RFC3339), NumCPU: runtime.NumCPU(),
		CapacityPath: cfg.CapacityPath, Workers: cfg.Workers, MaxWorkers: cfg.MaxWorkers, Keys: cfg.Keys,
		Seconds: cfg.Duration.Seconds(), Slice: cfg.Slice.Seconds(), Rounds: cfg.Rounds, LoadAvg: loadAvg()}
	for _, p := range paths {
		rep.Paths = append(rep.Paths, pathInfo{p.Name, p.Detail})
	}
	if rep.Capacity, err = runClosed(ctx, cfg.CapacityDuration, cfg.Workers, cfg.Keys, cfg.ZipfS, capPath.Op); err != nil {
		return nil, fmt.Errorf("%w: capacity of %s: no request answered", errOpenLoop, cfg.CapacityPath)
	}
	for _, p := range paths {
		if p.Name == pathRLS && cfg.CapacityPath != pathRLS {
			if rep.RLSCapacity, err = runClosed(ctx, cfg.CapacityDuration, cfg.Workers, cfg.Keys, cfg.ZipfS, p.Op); err != nil {
				return nil, fmt.Errorf("%w: capacity of %s: no request answered", errOpenLoop, pathRLS)
			}
		}
	}
	rates := cfg.Rates
	if len(rates) == 0 {
		for _, f := range cfg.Fractions {
			rates = append(rates, float64(int(f*rep.Capacity)))
		}
	}
	logf := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	logf("capacity (%s, closed loop, %d conns, %v): %.0f/s; rates %v", cfg.CapacityPath, cfg.Workers, cfg.CapacityDuration, rep.Capacity, rates)
	if rep.RLSCapacity > 0 {
		logf("capacity of %s (closed loop, %d conns, %v): %.0f/s", pathRLS, cfg.Workers, cfg.CapacityDuration, rep.RLSCapacity)
	}
	for ri, rate := range rates {
		for round := 1; round <= cfg.Rounds; round++ {
			runs, err := measureRound(ctx, cfg, rate, uint64(ri*100+round), paths)
			if err != nil {
				return nil, err
			}
			for _, run := range runs {
				run.Round = round
				rep.Runs = append(rep.Runs, run)
				logf("%-14s %6.0f/s round %d: p50 %.3f p99 %.3f p999 %.3f ms (service p99 %.3f, late p99 %.3f) errors %d queued %d unsent %d senders %d",
					run.Path, rate, round, run.Latency.P50, run.Latency.P99, run.Latency.P999, run.Service.P99,
					run.Lateness.P99, run.Errors, run.Queued, run.Unsent, run.Senders)
			}
		}
	}
	rep.summarise(rates, paths)
	rep.Notes = append(rep.Notes, rep.targets()...)
	return rep, nil
}

// fill derives the summaries and per-request figures from the raw counts.
func (r *pathRun) fill() {
	c := r.counts
	r.Latency, r.Service, r.Lateness = c.Latency.Summary(), c.Service.Summary(), c.Lateness.Summary()
	r.Sent, r.Errors, r.Queued, r.Unsent, r.Senders = c.Sent, c.Errors, c.Queued, c.Unsent, c.Senders
	r.Client, r.Proxy, r.Shards = r.client.Per(c.Sent), r.proxy.Per(c.Sent), r.shard.Per(c.Sent)
	r.Server = r.server.Per(c.Sent)
	if c.Seconds > 0 {
		cpu := r.client.Add(r.proxy).Add(r.shard).Add(r.server)
		r.Busy = (cpu.User + cpu.System).Seconds() / (c.Seconds * float64(runtime.NumCPU()))
	}
}

// startOpenTargets starts the shards, nutcracker and mcproxy; stop stops
// them.
func startOpenTargets(ctx context.Context, cfg OpenLoopConfig, dir string) (*openTargets, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	t := &openTargets{quantity: cfg.Quantity, keys: openKeys(cfg.Keys)}
	pool := procs.TwemproxyPool{Hash: "fnv1a_64", Distribution: "ketama", HashTag: "{}", TimeoutMS: 2000, ServerConnections: 1}
	for i := 0; i < 3; i++ {
		m, err := procs.StartMemcached(ctx, procs.MemcachedConfig{})
		if err != nil {
			stop()
			return nil, nil, err
		}
		stops = append(stops, m.Stop)
		t.shardPids = append(t.shardPids, m.Pid())
		pool.Servers = append(pool.Servers, m.Addr+":1")
		if i == 0 {
			t.shardAddr = m.Addr
		}
	}
	nc, err := procs.StartNutcracker(ctx, dir, pool)
	if err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, nc.Stop)
	t.ncAddr, t.ncPid = nc.Addr, nc.Pid()
	mc, _, detail, err := proxycmp.StartMcproxyAdmin(ctx, proxycmp.ProxyCompareConfig{McproxyBin: cfg.McproxyBin, McproxyArgs: cfg.McproxyArgs}, dir, pool)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("%w: mcproxy: %v", errOpenLoop, err)
	}
	stops = append(stops, func() { mc.Stop(2 * time.Second) })
	t.mcAddr, t.mcPid, t.mcDetail = mc.Addr, mc.Pid(), detail
	if slices.Contains(cfg.Paths, pathHop) || cfg.CapacityPath == pathHop {
		hop, err := startOpenHop(ctx, dir, t.shardAddr)
		if err != nil {
			stop()
			return nil, nil, err
		}
		stops = append(stops, hop.Kill)
		t.hopAddr, t.hopPid = hop.Addr, hop.Pid()
	}
	if slices.Contains(cfg.Paths, pathRLS) || cfg.CapacityPath == pathRLS {
		rls, rdetail, err := startOpenRLS(ctx, cfg.RLSBin, dir, mc.Addr)
		if err != nil {
			stop()
			return nil, nil, err
		}
		stops = append(stops, rls.Kill)
		t.rlsAddr, t.rlsPid, t.rlsDetail = rls.Addr, rls.Pid(), rdetail
	}
	return t, stop, nil
}

// loadAvg is /proc/loadavg's first three fields ("" if unreadable).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	var a, b5, c string
	fmt.Sscan(string(b), &a, &b5, &c)
	return a + " " + b5 + " " + c
}

// defaultTo sets *v to def when it is zero or negative: the "zero means
// default" rule of every Config in this package.
func defaultTo[T int | int64 | uint64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Package soak is popbench soak: a whole PoP at a fraction of its
// capacity for a long run, sampling every process's memory, goroutines and
// descriptors, and judging that none of them grows.
package soak

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/bench"

	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
)

// SoakConfig configures RunSoak. Zero means default.
type SoakConfig struct {
	// Duration of the open-loop run; default 10m.
	Duration time.Duration
	// Rate of requests per second; default half the capacity measured
	// first by a closed loop of Conns clients for CapacityRun.
	Rate float64
	// CapacityRun is the closed-loop run that measures capacity when Rate
	// is 0; default 5s (at most Duration/2).
	CapacityRun time.Duration
	// Conns is the number of closed-loop clients of the capacity run and
	// of open-loop senders (each pinned to one edge, so each holds one
	// keep-alive connection); default 32.
	Conns int
	// Warmup is excluded from the verdict: the start figures are the
	// first sample at or after it; default 10% of Duration.
	Warmup time.Duration
	// Interval between samples; default Duration/60, within 250ms–10s.
	Interval time.Duration
	// Rest is how long the traffic pauses (after the requests in flight
	// have finished) before each of the two samples at rest: one when the
	// warm-up ends, one at the end. Goroutines and fds are judged on
	// those, because under traffic they follow the work in flight (mcproxy
	// runs goroutines only for clients that are not parked), not leaks;
	// default 2s (with few clients, mcproxy parks one silent for 1–1.1 s,
	// its --park-after).
	Rest time.Duration
	// Keys is the Zipf identity space (exponent 1.1); default 10,000.
	Keys uint64
	// Quantity per Window per identity; default 100 per 1s.
	Quantity int64
	Window   time.Duration
	// Algorithm of the limit; default sliding window.
	Algorithm counter.Algorithm
	// Edges is the number of edge workers; default 4.
	Edges int
	// EdgeArgs and ProxyArgs are extra edge and mcproxy flags (none by
	// default: the soak measures the defaults).
	EdgeArgs, ProxyArgs []string
	// Pprof serves net/http/pprof on mcproxy's and every edge's admin
	// listener (their --pprof), so profiles can be taken during the run;
	// the admin URLs are logged.
	Pprof bool
	// Tolerance is the growth allowed after warm-up, in percent of the
	// start figure; default 5.
	Tolerance float64
	// Slack is the absolute growth of fds and goroutines allowed on top of
	// Tolerance: the generator's keep-alive connections to one process
	// may be reopened after an idle timeout; default 2·Conns/Edges + 4.
	Slack int64
	// Seed of the identities; default 1.
	Seed uint64
	// Progress is called with elapsed and total milliseconds.
	Progress func(done, total int)
}

func (c SoakConfig) withDefaults() SoakConfig {
	defaultTo(&c.Duration, 10*time.Minute)
	defaultTo(&c.CapacityRun, min(5*time.Second, c.Duration/2))
	defaultTo(&c.Conns, 32)
	defaultTo(&c.Warmup, c.Duration/10)
	defaultTo(&c.Interval, min(10*time.Second, max(250*time.Millisecond, c.Duration/60)))
	defaultTo(&c.Rest, 2*time.Second)
	defaultTo(&c.Keys, 10000)
	defaultTo(&c.Quantity, 100)
	defaultTo(&c.Window, time.Second)
	defaultTo(&c.Edges, 4)
	defaultTo(&c.Tolerance, 5)
	defaultTo(&c.Slack, int64(2*c.Conns/c.Edges+4))
	defaultTo(&c.Seed, 1)
	return c
}

// RunSoak launches a whole PoP (3 shards, 1 mcproxy, Edges edge workers,
// the upstream), measures its capacity unless Rate is set, then sends
// requests open loop at Rate for Duration while sampling every process's
// RSS, threads, open fds and goroutines, and counts errors (transport
// errors, statuses other than 2xx and 429) and the edges' fail-open
// decisions. The verdict: after Warmup, no judged process's RSS grew by
// more than Tolerance, nor its fds and goroutines between the two samples
// at rest (see Rest) by more than Tolerance or Slack; zero errors, zero
// fail-open decisions.
func RunSoak(ctx context.Context, env *bench.Env, cfg SoakConfig) (bench.Result, error) {
	r, err := runSoak(ctx, env, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runSoak is RunSoak returning the report itself.
func runSoak(ctx context.Context, env *bench.Env, cfg SoakConfig) (*result, error) {
	cfg = cfg.withDefaults()
	if !env.HasEdge() {
		return nil, fmt.Errorf("%w: the soak needs edge workers: %v", bench.ErrNoPoP, env.EdgeErr)
	}
	if env.Bins.MCProxy == "" {
		return nil, fmt.Errorf("%w: the soak needs mcproxy: %v", bench.ErrNoPoP, env.ProxyErr)
	}
	adminPort, err := procs.FreePort()
	if err != nil {
		return nil, err
	}
	admin := net.JoinHostPort("127.0.0.1", strconv.Itoa(adminPort))
	route := bench.Route{Path: "/api", Quantity: cfg.Quantity, Window: cfg.Window}
	proxyArgs, edgeArgs := append([]string{"--admin", admin}, cfg.ProxyArgs...), cfg.EdgeArgs
	if cfg.Pprof {
		proxyArgs, edgeArgs = append(proxyArgs, "--pprof"), append(slices.Clone(edgeArgs), "--pprof")
	}
	p, err := env.Launch(ctx, bench.PoPConfig{Name: "soak", Shards: 3, Proxies: 1, Edges: cfg.Edges, WorkersPerPoP: cfg.Edges,
		Policy: bench.PolicyYAML([]bench.Route{route}, cfg.Algorithm, 1), ProxyArgs: proxyArgs, EdgeArgs: edgeArgs})
	if err != nil {
		return nil, err
	}
	if cfg.Pprof {
		urls := []string{"http://" + admin}
		for _, e := range p.Edges {
			urls = append(urls, e.Admin)
		}
		env.Logf("soak: /debug/pprof/ on the admin listeners of mcproxy and the edges: %s", strings.Join(urls, " "))
	}
	res := &result{PoP: p.Describe(), Algorithm: bench.AlgorithmName(cfg.Algorithm), Seconds: cfg.Duration.Seconds(),
		WarmupSeconds: cfg.Warmup.Seconds(), Conns: cfg.Conns, Keys: cfg.Keys, Tolerance: cfg.Tolerance, Slack: cfg.Slack, Rate: cfg.Rate}
	procs := soakProcesses(p, map[string]string{p.Proxies[0].Addr: "http://" + admin})
	total := cfg.Duration
	if cfg.Rate <= 0 {
		total += cfg.CapacityRun
	}
	progress := func(done time.Duration) {
		if cfg.Progress != nil {
			cfg.Progress(int(done.Milliseconds()), int(total.Milliseconds()))
		}
	}
	if cfg.Rate <= 0 {
		fo0 := edgeCounters(p)
		env.Logf("soak: capacity, closed loop of %d clients for %v", cfg.Conns, cfg.CapacityRun)
		target := bench.NewHTTPTarget(p.EdgeURLs(), cfg.Conns)
		run := bench.ClosedLoop(ctx, target, route, bench.LoadConfig{Duration: cfg.CapacityRun, Conns: cfg.Conns, Keys: cfg.Keys, ZipfS: 1.1, Seed: cfg.Seed},
			0, func(f float64) { progress(time.Duration(f * float64(cfg.CapacityRun))) })
		target.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		res.Capacity, res.CapacityErrors = run.PerSecond, run.Errors
		res.CapacityFailOpen = edgeCounters(p).sub(fo0).FailOpen
		res.Rate = run.PerSecond / 2
		if res.Rate < 1 {
			return nil, fmt.Errorf("bench: soak: measured capacity %.1f/s", run.PerSecond)
		}
	}
	env.Logf("soak: %.0f requests/s open loop for %v (warm-up %v), sampling every %v", res.Rate, cfg.Duration, cfg.Warmup, cfg.Interval)
	gen := newSoakGen(p.EdgeURLs(), route, cfg, res.Rate)
	before := edgeCounters(p)
	samples := sampleWhile(ctx, procs, p, cfg, gen, func(d time.Duration) { progress(total - cfg.Duration + d) })
	gen.stop()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.Counters = edgeCounters(p).sub(before)
	gen.fill(res)
	res.judge(procs, samples, cfg)
	return res, nil
}

// counters are sums of the edges' decision metrics.
type counters struct {
	FailOpen    int64 `json:"fail_open"`
	FailClosed  int64 `json:"fail_closed"`
	FailLocal   int64 `json:"fail_local"`
	StoreErrors int64 `json:"store_errors"`
	// Unreadable counts edges whose /metrics could not be read.
	Unreadable int `json:"unreadable"`
}

func (a counters) sub(b counters) counters {
	return counters{FailOpen: a.FailOpen - b.FailOpen, FailClosed: a.FailClosed - b.FailClosed,
		FailLocal: a.FailLocal - b.FailLocal, StoreErrors: a.StoreErrors - b.StoreErrors, Unreadable: max(a.Unreadable, b.Unreadable)}
}

// edgeCounters scrapes every edge's poplimit_fallback_decisions_total (by
// mode) and poplimit_store_errors_total.
func edgeCounters(p *bench.PoP) counters {
	var c counters
	for _, e := range p.Edges {
		m, err := bench.ScrapeMetrics(e.Admin)
		if err != nil {
			c.Unreadable++
			continue
		}
		c.FailOpen += int64(m.Sum("poplimit_fallback_decisions_total", "mode", string(failOpenReason)))
		c.FailClosed += int64(m.Sum("poplimit_fallback_decisions_total", "mode", "fail_closed"))
		c.FailLocal += int64(m.Sum("poplimit_fallback_decisions_total", "mode", "fail_local"))
		c.StoreErrors += int64(m.Sum("poplimit_store_errors_total", "", ""))
	}
	return c
}

// failOpenReason is pop.ReasonFailOpen, the mode label of fail-open
// decisions (bench does not import pop for one string).
const failOpenReason = "fail_open"

// sampleWhile samples every process at once, then every Interval until
// Duration has passed since the generator started, and once more at the
// end (before the generator stops). At the first sample past the warm-up
// and after the last one it also takes a sample at rest (Rest: the
// traffic paused, nothing in flight). Each sample also records the
// generator's counts and the edges' fail-open total so far.
func sampleWhile(ctx context.Context, procs []soakProcess, p *bench.PoP, cfg SoakConfig, gen *soakGen, progress func(time.Duration)) []soakSample {
	start := time.Now()
	gen.start(ctx)
	take := func() soakSample {
		s := soakSample{At: time.Since(start).Seconds(), Requests: gen.done.Load(), Errors: gen.errors(),
			FailOpen: edgeCounters(p).FailOpen, Procs: make([]resources, len(procs))}
		for i, pr := range procs {
			s.Procs[i], _ = pr.sample() // a field that cannot be read stays -1
		}
		return s
	}
	rested := false
	atRest := func() soakSample {
		gen.quiesce(ctx, cfg.Rest)
		defer gen.resume()
		s := take()
		s.Rest = true
		return s
	}
	samples := []soakSample{take()}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	end := time.NewTimer(cfg.Duration)
	defer end.Stop()
	for {
		select {
		case <-ctx.Done():
			return samples
		case <-end.C:
			progress(cfg.Duration)
			samples = append(samples, take())
			return append(samples, atRest())
		case <-tick.C:
			if time.Since(start) < cfg.Duration-cfg.Interval/2 {
				samples = append(samples, take())
				if !rested && time.Since(start) >= cfg.Warmup {
					rested = true
					samples = append(samples, atRest())
				}
			}
			progress(time.Since(start))
		}
	}
}

// soakGen sends requests open loop: every 5ms it queues the requests due
// by then (intended send times at a fixed rate) for Conns senders, each
// pinned to one edge; a request that finds the queue full is shed and
// counted. Latency is measured from the intended time.
type soakGen struct {
	target *bench.HTTPTarget
	route  bench.Route
	cfg    SoakConfig
	rate   float64
	jobs   chan time.Time
	wg     sync.WaitGroup
	quit   chan struct{}
	done   atomic.Int64
	shed   atomic.Int64
	// paused: the pacer skips (does not queue, does not shed) the
	// requests due; inflight counts requests being sent.
	paused   atomic.Bool
	inflight atomic.Int64
	counts   [bench.NumOutcomes]atomic.Int64
	mu       sync.Mutex
	lat      *bench.Latency
	lag      time.Duration
}

func newSoakGen(urls []string, route bench.Route, cfg SoakConfig, rate float64) *soakGen {
	// No client-side idle timeout: a sender's keep-alive connection lives
	// as long as the run, so the processes' fds do not move with the
	// generator's connection churn.
	tr := &http.Transport{MaxIdleConns: cfg.Conns, MaxIdleConnsPerHost: cfg.Conns,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
	return &soakGen{target: &bench.HTTPTarget{URLs: urls, Client: &http.Client{Transport: tr, Timeout: 5 * time.Second}},
		route: route, cfg: cfg, rate: rate, jobs: make(chan time.Time, 4*cfg.Conns), quit: make(chan struct{}), lat: bench.NewLatency()}
}

func (g *soakGen) errors() int64 {
	return g.counts[bench.Failed].Load() + g.counts[bench.Unavailable].Load()
}

// start opens one connection per sender (all at once, untimed), then
// starts the senders and the pacer.
func (g *soakGen) start(ctx context.Context) {
	var warm sync.WaitGroup
	for w := 0; w < g.cfg.Conns; w++ {
		warm.Add(1)
		go func() { defer warm.Done(); g.target.Do(ctx, w, &bench.Client{ID: "warmup"}, &g.route) }()
	}
	warm.Wait()
	for w := 0; w < g.cfg.Conns; w++ {
		g.wg.Add(1)
		go g.send(w)
	}
	g.wg.Add(1)
	go g.pace(ctx)
}

func (g *soakGen) pace(ctx context.Context) {
	defer g.wg.Done()
	defer close(g.jobs)
	t0 := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var queued int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.quit:
			return
		case now := <-tick.C:
			due := int64(now.Sub(t0).Seconds() * g.rate)
			if g.paused.Load() {
				queued = due
			}
			for ; queued < due; queued++ {
				at := t0.Add(time.Duration(float64(queued) / g.rate * float64(time.Second)))
				select {
				case g.jobs <- at:
				default:
					g.shed.Add(1)
				}
			}
		}
	}
}

func (g *soakGen) send(w int) {
	defer g.wg.Done()
	z, _ := bench.NewZipf(g.cfg.Seed*1000+uint64(w), 1.1, g.cfg.Keys)
	lat := bench.NewLatency()
	var lag time.Duration
	c := &bench.Client{}
	for at := range g.jobs {
		lag = max(lag, time.Since(at))
		c.ID = "k" + strconv.FormatUint(z.Next(), 10)
		g.inflight.Add(1)
		o := g.target.Do(context.Background(), w, c, &g.route)
		g.inflight.Add(-1)
		lat.Record(time.Since(at))
		g.counts[o].Add(1)
		g.done.Add(1)
	}
	g.mu.Lock()
	g.lat.Merge(lat)
	g.lag = max(g.lag, lag)
	g.mu.Unlock()
}

// quiesce pauses the pacer, waits (at most 10 s) until no request is
// queued or in flight, then for rest.
func (g *soakGen) quiesce(ctx context.Context, rest time.Duration) {
	g.paused.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for (len(g.jobs) > 0 || g.inflight.Load() > 0) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-ctx.Done():
	case <-time.After(rest):
	}
}

// resume ends a quiesce: the pacer queues again at the same rate (the
// requests due during the pause are skipped, not sent late).
func (g *soakGen) resume() { g.paused.Store(false) }

// stop ends the pacer and waits for the requests in flight.
func (g *soakGen) stop() {
	close(g.quit)
	g.wg.Wait()
	g.target.Close()
}

// fill copies the generator's totals into res.
func (g *soakGen) fill(res *result) {
	res.Requests = g.done.Load()
	res.Admitted, res.Rejected = g.counts[bench.Admitted].Load(), g.counts[bench.Rejected].Load()
	res.Unavailable, res.Failed = g.counts[bench.Unavailable].Load(), g.counts[bench.Failed].Load()
	res.Errors = res.Unavailable + res.Failed
	res.Shed = g.shed.Load()
	res.Latency = g.lat.Summary()
	res.LagMs = float64(g.lag) / float64(time.Millisecond)
}

// defaultTo sets *v to def when it is zero or negative: the "zero means
// default" rule of SoakConfig.
func defaultTo[T int | int64 | uint64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// formatFloat formats v with fewer decimals the larger it is.
func formatFloat(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000 || v <= -1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	case v >= 0.01 || v <= -0.01:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.4f", v)
}

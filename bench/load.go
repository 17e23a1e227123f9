package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// LoadConfig configures RunLoad. Zero means default.
type LoadConfig struct {
	// Duration of each run; default 5s.
	Duration time.Duration
	// Conns is the number of closed-loop clients; default 32.
	Conns int
	// Keys is the identity space, drawn with a Zipf law of exponent ZipfS
	// (default 10,000 and 1.1): a few hot identities over their limit,
	// a long tail under it.
	Keys  uint64
	ZipfS float64
	// Quantity per Window per identity; default 100 per 1s.
	Quantity int64
	Window   time.Duration
	// Algorithms to measure, interleaved; default all three.
	Algorithms []counter.Algorithm
	// Rounds: every algorithm runs once per round (A B C A B C …);
	// default 1.
	Rounds int
	// HTTP drives edge workers over HTTP (launched, or EdgeURLs); else
	// in-process workers.
	HTTP bool
	// ProxyAddrs / EdgeURLs target an existing PoP instead of launching
	// one (EdgeURLs need HTTP and a policy already loaded: the algorithm is
	// whatever it enforces).
	ProxyAddrs []string
	EdgeURLs   []string
	// Workers is the number of in-process workers or edges; default 4.
	Workers int
	// Seed; default 1.
	Seed uint64
	// Progress is called with elapsed and total milliseconds of all runs.
	Progress func(done, total int)
}

func (c LoadConfig) withDefaults() LoadConfig {
	defaultTo(&c.Duration, 5*time.Second)
	defaultTo(&c.Conns, 32)
	defaultTo(&c.Keys, 10000)
	if c.ZipfS <= 1 {
		c.ZipfS = 1.1
	}
	defaultTo(&c.Quantity, 100)
	defaultTo(&c.Window, time.Second)
	if len(c.Algorithms) == 0 {
		c.Algorithms = []counter.Algorithm{counter.SlidingWindow, counter.FixedWindow, counter.TokenBucket}
	}
	defaultTo(&c.Rounds, 1)
	defaultTo(&c.Workers, 4)
	defaultTo(&c.Seed, 1)
	return c
}

// loadRun is one measured run.
type loadRun struct {
	Algorithm  string  `json:"algorithm"`
	Round      int     `json:"round"`
	Decisions  int64   `json:"decisions"`
	PerSecond  float64 `json:"decisions_per_s"`
	Latency    Summary `json:"latency"`
	Admitted   int64   `json:"admitted"`
	Rejected   int64   `json:"rejected"`
	Errors     int64   `json:"errors"`
	RoundTrips float64 `json:"store_ops_per_decision"`
	// CPUPerM is the CPU seconds the PoP's processes (shards, mcproxy,
	// edges; not in-process workers) spent per million decisions.
	CPUPerM float64 `json:"pop_cpu_s_per_million"`
	Seconds float64 `json:"seconds"`
	lat     *Latency
	cpu     float64
}

// loadResult is the result of RunLoad: every run, and per algorithm the
// sums over rounds.
type loadResult struct {
	Target string     `json:"target"`
	Conns  int        `json:"conns"`
	Keys   uint64     `json:"keys"`
	Runs   []*loadRun `json:"runs"`
	Sums   []*loadRun `json:"per_algorithm"`
}

// RunLoad measures decisions/s and latency by algorithm, closed loop, with
// Zipf identities, through a launched PoP (or an existing one).
func RunLoad(ctx context.Context, env *Env, cfg LoadConfig) (Result, error) {
	r, err := runLoad(ctx, env, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runLoad is RunLoad returning the report itself.
func runLoad(ctx context.Context, env *Env, cfg LoadConfig) (*loadResult, error) {
	cfg = cfg.withDefaults()
	route := Route{Path: "/api", Quantity: cfg.Quantity, Window: cfg.Window}
	res := &loadResult{Conns: cfg.Conns, Keys: cfg.Keys}
	if len(cfg.EdgeURLs) > 0 {
		cfg.Algorithms = cfg.Algorithms[:1]
	}
	p, err := loadPoP(ctx, env, cfg, route, res)
	if err != nil {
		return nil, err
	}
	total := cfg.Rounds * len(cfg.Algorithms)
	sums := map[string]*loadRun{}
	for round := 1; round <= cfg.Rounds; round++ {
		for ai, alg := range cfg.Algorithms {
			target, in, err := loadTarget(ctx, cfg, p, route, alg)
			if err != nil {
				return nil, err
			}
			env.Logf("load: %s round %d for %v", AlgorithmName(alg), round, cfg.Duration)
			var before int64
			var cpu0 float64
			if p != nil || in != nil {
				before, _ = storeCommands(p, in)
			}
			if p != nil {
				cpu0 = p.cpuSeconds()
			}
			done := (round-1)*len(cfg.Algorithms) + ai
			run := ClosedLoop(ctx, target, route, cfg, uint64(round*10+ai), func(frac float64) {
				if cfg.Progress != nil {
					cfg.Progress(int(1000*(float64(done)+frac)), 1000*total)
				}
			})
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if ht, ok := target.(*HTTPTarget); ok {
				ht.Close()
			}
			run.Algorithm, run.Round = AlgorithmName(alg), round
			if (p != nil || in != nil) && run.Decisions > 0 {
				after, _ := storeCommands(p, in)
				if before >= 0 && after >= before {
					run.RoundTrips = float64(after-before) / float64(run.Decisions)
				}
			}
			if p != nil && run.Decisions > 0 {
				run.cpu = p.cpuSeconds() - cpu0
				run.CPUPerM = run.cpu / float64(run.Decisions) * 1e6
			}
			res.add(sums, run)
		}
	}
	res.finish(cfg.Rounds)
	return res, nil
}

// loadPoP launches the PoP the load runs through (nil when cfg names
// existing edges or proxies) and describes the target in res.
func loadPoP(ctx context.Context, env *Env, cfg LoadConfig, route Route, res *loadResult) (*PoP, error) {
	switch {
	case len(cfg.EdgeURLs) > 0:
		res.Target = fmt.Sprintf("existing edges %v", cfg.EdgeURLs)
		return nil, nil
	case len(cfg.ProxyAddrs) > 0:
		res.Target = fmt.Sprintf("existing proxies %v, %d in-process workers", cfg.ProxyAddrs, cfg.Workers)
		return nil, nil
	}
	pc := PoPConfig{Name: "load", Shards: 3, Proxies: 1}
	if cfg.HTTP {
		if !env.HasEdge() {
			return nil, fmt.Errorf("%w: edge: %v", ErrNoPoP, env.EdgeErr)
		}
		pc.Edges, pc.WorkersPerPoP = cfg.Workers, cfg.Workers
		pc.Policy = PolicyYAML([]Route{route}, cfg.Algorithms[0], 1)
	}
	p, err := env.Launch(ctx, pc)
	if err != nil {
		return nil, err
	}
	res.Target = p.Describe()
	return p, nil
}

// loadTarget is what one run of algorithm alg sends to: the existing
// edges, the PoP's edges (their policy switched to alg), or in-process
// workers over the PoP's (or the given) proxies, returned as in too.
func loadTarget(ctx context.Context, cfg LoadConfig, p *PoP, route Route, alg counter.Algorithm) (Target, *Inproc, error) {
	switch {
	case len(cfg.EdgeURLs) > 0:
		return NewHTTPTarget(cfg.EdgeURLs, cfg.Conns), nil, nil
	case p != nil && len(p.Edges) > 0:
		if err := p.SetPolicy(ctx, PolicyYAML([]Route{route}, alg, 1)); err != nil {
			return nil, nil, err
		}
		return NewHTTPTarget(p.EdgeURLs(), cfg.Conns), nil, nil
	}
	servers, direct := cfg.ProxyAddrs, false
	if p != nil {
		servers, direct = p.WorkerServers()
	}
	in, err := NewInproc([]Route{route}, InprocConfig{Servers: servers, Direct: direct, Workers: cfg.Workers, Algorithm: alg})
	if err != nil {
		return nil, nil, err
	}
	return in, in, nil
}

// add records run and folds it into its algorithm's sum (sums indexes
// res.Sums by algorithm name).
func (res *loadResult) add(sums map[string]*loadRun, run *loadRun) {
	res.Runs = append(res.Runs, run)
	s := sums[run.Algorithm]
	if s == nil {
		s = &loadRun{Algorithm: run.Algorithm, lat: NewLatency()}
		sums[run.Algorithm] = s
		res.Sums = append(res.Sums, s)
	}
	s.Decisions += run.Decisions
	s.Seconds += run.Seconds
	s.Admitted += run.Admitted
	s.Rejected += run.Rejected
	s.Errors += run.Errors
	s.RoundTrips += run.RoundTrips * float64(run.Decisions)
	s.cpu += run.cpu
	s.lat.Merge(run.lat)
}

// finish turns the sums into rates and means over rounds rounds.
func (res *loadResult) finish(rounds int) {
	for _, s := range res.Sums {
		s.PerSecond = float64(s.Decisions) / s.Seconds
		s.Latency = s.lat.Summary()
		if s.Decisions > 0 {
			s.RoundTrips /= float64(s.Decisions)
			s.CPUPerM = s.cpu / float64(s.Decisions) * 1e6
		}
		s.Round = rounds
	}
}

// closedLoop runs cfg.Conns clients for cfg.Duration, each sending the next
// request when the previous one is answered.
func ClosedLoop(ctx context.Context, target Target, route Route, cfg LoadConfig, seed uint64, progress func(float64)) *loadRun {
	// Warm up: one untimed request per client opens the connections.
	var warm sync.WaitGroup
	for g := 0; g < cfg.Conns; g++ {
		warm.Add(1)
		go func() {
			defer warm.Done()
			target.Do(ctx, g, &Client{ID: "warmup"}, &route)
		}()
	}
	warm.Wait()
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	run := &loadRun{lat: NewLatency()}
	var wg sync.WaitGroup
	for g := 0; g < cfg.Conns; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			z, _ := NewZipf(cfg.Seed*1000+seed*100+uint64(g), cfg.ZipfS, cfg.Keys)
			lat := NewLatency()
			var counts [NumOutcomes]int64
			c := &Client{}
			for i := g; ctx.Err() == nil; i += cfg.Conns {
				c.ID = "k" + strconv.FormatUint(z.Next(), 10)
				t0 := time.Now()
				o := target.Do(ctx, i, c, &route)
				if ctx.Err() != nil {
					break // a request cut by the end of the run is not counted
				}
				lat.Record(time.Since(t0))
				counts[o]++
			}
			mu.Lock()
			run.lat.Merge(lat)
			run.Admitted += counts[Admitted]
			run.Rejected += counts[Rejected]
			run.Errors += counts[Failed] + counts[Unavailable]
			mu.Unlock()
		}(g)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
wait:
	for {
		select {
		case <-finished:
			break wait
		case <-tick.C:
			progress(min(1, time.Since(start).Seconds()/cfg.Duration.Seconds()))
		}
	}
	progress(1)
	run.Seconds = time.Since(start).Seconds()
	run.Decisions = run.Admitted + run.Rejected + run.Errors
	run.PerSecond = float64(run.Decisions) / run.Seconds
	run.Latency = run.lat.Summary()
	return run
}

// SetPolicy rewrites the PoP's policy file and asks every edge to reload
// it (POST /reload on its admin listener).
func (p *PoP) SetPolicy(ctx context.Context, policy []byte) error {
	if err := os.WriteFile(p.PolicyFile, policy, 0o644); err != nil {
		return fmt.Errorf("bench: write policy: %w", err)
	}
	for _, e := range p.Edges {
		if err := reloadEdges(ctx, e.Admin); err != nil {
			return err
		}
	}
	return nil
}

// Reload posts /reload to an edge's admin URL and expects a 2xx.
func reloadEdges(ctx context.Context, admin string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, admin+"/reload", nil)
	if err != nil {
		return err
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("bench: reload %s: %w", admin, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("bench: reload %s: status %d", admin, resp.StatusCode)
	}
	return nil
}

// Tables returns the human view.
func (r *loadResult) Tables() []*Table {
	runs := &Table{Title: "Load runs (" + r.Target + fmt.Sprintf(", %d conns, %d Zipf identities)", r.Conns, r.Keys),
		Header: []string{"algorithm", "round", "decisions/s", "p50 ms", "p99 ms", "p999 ms", "admitted %", "errors", "store ops/decision", "PoP CPU s/M"}}
	for _, x := range r.Runs {
		runs.Add(x.Algorithm, x.Round, x.PerSecond, x.Latency.P50, x.Latency.P99, x.Latency.P999,
			100*float64(x.Admitted)/float64(max(1, x.Decisions)), x.Errors, x.RoundTrips, x.CPUPerM)
	}
	sums := &Table{Title: "Per algorithm (sums over rounds)",
		Header: []string{"algorithm", "decisions", "decisions/s", "p50 ms", "p99 ms", "p999 ms", "errors", "store ops/decision", "PoP CPU s/M"}}
	for _, x := range r.Sums {
		sums.Add(x.Algorithm, x.Decisions, x.PerSecond, x.Latency.P50, x.Latency.P99, x.Latency.P999, x.Errors, x.RoundTrips, x.CPUPerM)
	}
	return []*Table{runs, sums}
}

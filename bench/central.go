package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"
)

// CentralConfig configures RunCentral. Zero means default.
type CentralConfig struct {
	// RTT is the injected round trip to the central store; default 80ms.
	RTT time.Duration
	// Duration of each run; default 5s.
	Duration time.Duration
	// Rounds: local, central, local, central …; default 2.
	Rounds int
	// Users and their rate: a Poisson workload of Users legitimate users
	// (Zipf rates, default 20) under a limit of Quantity per second
	// (default 50).
	Users    int
	Quantity int64
	// InProcess uses in-process workers (decision latency = the limiter's
	// call) instead of edges (latency = the HTTP request through the edge).
	InProcess bool
	// Workers per PoP; default 4.
	Workers int
	// OutDir receives the CDF chart; "" writes none.
	OutDir string
	// ChartFormat is "png" (default) or "svg".
	ChartFormat string
	// Seed; default 1.
	Seed uint64
	// Progress is called with requests done and total per run.
	Progress func(done, total int)
}

// CentralRun is one measured run.
type centralRun struct {
	Store    string  `json:"store"`
	Round    int     `json:"round"`
	Requests int     `json:"requests"`
	Latency  Summary `json:"latency"`
	Errors   int64   `json:"errors"`
}

// centralReport is the result of RunCentral.
type centralReport struct {
	RTTms   float64       `json:"rtt_ms"`
	Workers string        `json:"workers"`
	Runs    []*centralRun `json:"runs"`
	Local   Summary       `json:"local"`
	Central Summary       `json:"central"`
	// RatioP50 and RatioP99 are central over local.
	RatioP50 float64 `json:"ratio_p50"`
	RatioP99 float64 `json:"ratio_p99"`
	Chart    string  `json:"chart,omitempty"`
}

// RunCentral measures the latency paradox: the same workload decided with a
// per-PoP store (on the PoP's loopback) and with a central store behind an
// injected cross-region round trip, interleaved, and the ratio of their
// decision latencies.
func RunCentral(ctx context.Context, env *Env, cfg CentralConfig) (Result, error) {
	r, err := runCentral(ctx, env, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// ChartFiles names the latency chart, none without one.
func (r *centralReport) ChartFiles() []string {
	if r.Chart == "" {
		return nil
	}
	return []string{filepath.Base(r.Chart)}
}

// runCentral is RunCentral returning the report itself.
func runCentral(ctx context.Context, env *Env, cfg CentralConfig) (*centralReport, error) {
	defaultTo(&cfg.RTT, 80*time.Millisecond)
	defaultTo(&cfg.Duration, 5*time.Second)
	defaultTo(&cfg.Rounds, 2)
	defaultTo(&cfg.Users, 20)
	defaultTo(&cfg.Quantity, 50)
	defaultTo(&cfg.Workers, 4)
	defaultTo(&cfg.Seed, 1)
	api := Route{Path: "/api", Quantity: cfg.Quantity, Window: time.Second}
	tr, err := Generate(WorkloadConfig{Seed: cfg.Seed, Duration: cfg.Duration, API: api, Legit: cfg.Users,
		Abusive: -1, Boundary: -1, Stuffers: -1})
	if err != nil {
		return nil, err
	}
	tr.Routes = tr.Routes[:1]
	mk := func(name string, delay time.Duration) (Target, error) {
		pc := PoPConfig{Name: name, Shards: 3, Proxies: 1, StoreDelay: delay}
		if !cfg.InProcess {
			pc.Edges, pc.WorkersPerPoP = cfg.Workers, cfg.Workers
			pc.Policy = PolicyYAML(tr.Routes, 0, 1)
			pc.EdgeArgs = []string{"--store-deadline", (4*cfg.RTT + 4*time.Second).String()}
		}
		p, err := env.Launch(ctx, pc)
		if err != nil {
			return nil, err
		}
		// Latency is measured, not judged: a generous timeout.
		t, _, err := env.Workers(p, tr.Routes, cfg.Workers, 64, InprocConfig{Timeout: 4*cfg.RTT + 5*time.Second})
		return t, err
	}
	local, err := mk("local", 0)
	if err != nil {
		return nil, err
	}
	central, err := mk("central", cfg.RTT/2)
	if err != nil {
		return nil, err
	}
	rep := &centralReport{RTTms: float64(cfg.RTT) / float64(time.Millisecond), Workers: "edge processes (HTTP)"}
	if _, ok := local.(*Inproc); ok {
		rep.Workers = "in-process workers"
	}
	// Warm up: open the workers' connections before anything is timed.
	for _, t := range []Target{local, central} {
		var wg sync.WaitGroup
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() { defer wg.Done(); t.Do(ctx, g, &Client{ID: "warmup"}, &api) }()
		}
		wg.Wait()
	}
	lats := map[string]*Latency{"per-PoP": NewLatency(), "central": NewLatency()}
	for round := 1; round <= cfg.Rounds; round++ {
		for _, s := range []struct {
			name string
			t    Target
		}{{"per-PoP", local}, {"central", central}} {
			env.Logf("central: %s store, round %d", s.name, round)
			r := ReplayTrace(ctx, tr, s.t, ReplayConfig{Concurrency: 128, Progress: cfg.Progress})
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			tot := r.totals()
			rep.Runs = append(rep.Runs, &centralRun{Store: s.name, Round: round, Requests: len(r.Records),
				Latency: r.Latency.Summary(), Errors: tot[Failed] + tot[Unavailable]})
			lats[s.name].Merge(r.Latency)
		}
	}
	rep.Local, rep.Central = lats["per-PoP"].Summary(), lats["central"].Summary()
	if rep.Local.P50 > 0 {
		rep.RatioP50 = rep.Central.P50 / rep.Local.P50
	}
	if rep.Local.P99 > 0 {
		rep.RatioP99 = rep.Central.P99 / rep.Local.P99
	}
	if cfg.OutDir != "" {
		if err := mkdir(cfg.OutDir); err != nil {
			return rep, err
		}
		rep.Chart = filepath.Join(cfg.OutDir, "central-latency-cdf"+ChartExt(cfg.ChartFormat))
		if err := chartCDF(rep.Chart, fmt.Sprintf("Decision latency: per-PoP store vs central store %v away", cfg.RTT),
			[]string{"per-PoP store", "central store"}, []*Latency{lats["per-PoP"], lats["central"]}); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// Tables returns the human view.
func (r *centralReport) Tables() []*Table {
	runs := &Table{Title: fmt.Sprintf("Latency paradox (%s; central store behind a %.0f ms round trip)", r.Workers, r.RTTms),
		Header: []string{"store", "round", "requests", "p50 ms", "p99 ms", "p999 ms", "errors"}}
	for _, x := range r.Runs {
		runs.Add(x.Store, x.Round, x.Requests, x.Latency.P50, x.Latency.P99, x.Latency.P999, x.Errors)
	}
	sum := &Table{Title: "All rounds", Header: []string{"store", "p50 ms", "p99 ms", "central/per-PoP p50", "central/per-PoP p99"}}
	sum.Add("per-PoP", r.Local.P50, r.Local.P99, "", "")
	sum.Add("central", r.Central.P50, r.Central.P99, r.RatioP50, r.RatioP99)
	return []*Table{runs, sum}
}

package accuracy

import (
	"context"
	"fmt"
	"time"

	"github.com/poplimit/poplimit/bench"

	"github.com/poplimit/poplimit/counter"
)

// AccuracySuiteConfig configures RunAccuracy. Zero means default.
type AccuracySuiteConfig struct {
	// TraceFiles are the traces to replay as their files describe them:
	// each a file, or a name looked up as
	// testdata/traces/accuracy-<name>.json in the working directory or the
	// nearest parent holding go.mod. Without them, the built-in traces
	// (below, near and bursts, as those files describe them). Sources,
	// Duration, Seed, Quantity and Window below, when set, override theirs.
	TraceFiles []string
	// Precisions of the sliding window; default [1].
	Precisions []int
	// Algorithms; default sliding window only. Fixed window and token bucket
	// report their over-admission (must be 0).
	Algorithms []counter.Algorithm
	// Skews: each value s runs the sliding window (precision 1) once more
	// with the workers' clocks at 0, +s, −s, +s/2 (worker order).
	Skews []time.Duration
	// Sources, Duration, Seed, Quantity, Window of every trace, when set;
	// else the trace's own (defaults 200 sources, 10 windows, seed 1, 100
	// per 60s).
	Sources  int
	Duration time.Duration
	Seed     uint64
	Quantity int64
	Window   time.Duration
	// Workers: in-process workers of the PoP; default 4.
	Workers int
	// NoPoP replays over an in-memory store instead of launching a PoP.
	NoPoP bool
	// Progress is called per run with requests done and total.
	Progress func(done, total int)
}

// report is the result of RunAccuracy.
type report struct {
	PoP string `json:"pop"`
	// Traces are the parameters each trace was generated from (the form
	// of testdata/traces/accuracy-*.json, overrides applied).
	Traces []accuracyTraceConfig `json:"traces"`
	Rows   []*accuracyResult     `json:"rows"`
}

// RunAccuracy replays each trace through a PoP (shards, proxy, in-process
// workers) for every algorithm/precision, scores it against the exact
// sliding log, and compares each skew-free run with the same algorithm run
// in one process over an in-memory store (AgreementPct).
func RunAccuracy(ctx context.Context, env *bench.Env, cfg AccuracySuiteConfig) (bench.Result, error) {
	r, err := runAccuracy(ctx, env, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runAccuracy is RunAccuracy returning the report itself.
func runAccuracy(ctx context.Context, env *bench.Env, cfg AccuracySuiteConfig) (*report, error) {
	var traces []accuracyTraceConfig
	for _, arg := range cfg.TraceFiles {
		tc, err := openTrace(".", arg)
		if err != nil {
			return nil, err
		}
		traces = append(traces, tc)
	}
	if len(traces) == 0 {
		for _, name := range accuracyTraces {
			traces = append(traces, accuracyTraceConfig{Name: name})
		}
	}
	if len(cfg.Precisions) == 0 {
		cfg.Precisions = []int{1}
	}
	if len(cfg.Algorithms) == 0 {
		cfg.Algorithms = []counter.Algorithm{counter.SlidingWindow}
	}
	rep := &report{PoP: "in-memory store, no PoP"}
	var servers []string
	var direct bool
	if !cfg.NoPoP {
		p, err := env.Launch(ctx, bench.PoPConfig{Name: "accuracy", Shards: 3, Proxies: 1})
		if err != nil {
			return nil, err
		}
		servers, direct = p.WorkerServers()
		rep.PoP = p.Describe()
	}
	for _, tc := range traces {
		name := tc.Name
		override(&tc.Seed, cfg.Seed)
		override(&tc.Sources, cfg.Sources)
		override(&tc.Duration, cfg.Duration)
		override(&tc.Quantity, cfg.Quantity)
		override(&tc.Window, cfg.Window)
		tr, err := generateAccuracy(tc)
		if err != nil {
			return nil, err
		}
		rep.Traces = append(rep.Traces, tc.withDefaults())
		type run struct {
			alg  counter.Algorithm
			prec int
			skew []time.Duration
		}
		var runs []run
		for _, alg := range cfg.Algorithms {
			if alg != counter.SlidingWindow {
				runs = append(runs, run{alg: alg, prec: 1})
				continue
			}
			for _, p := range cfg.Precisions {
				runs = append(runs, run{alg: alg, prec: p})
			}
			for _, s := range cfg.Skews {
				runs = append(runs, run{alg: alg, prec: 1, skew: []time.Duration{0, s, -s, s / 2}})
			}
		}
		for _, r := range runs {
			skew := ""
			if len(r.skew) > 0 {
				skew = fmt.Sprintf(", worker clocks %v", r.skew)
			}
			env.Logf("accuracy: trace %s (%d requests), %s precision %d%s", name, len(tr.Requests), bench.AlgorithmName(r.alg), r.prec, skew)
			res, err := measureAccuracy(ctx, name, tr, accuracyConfig{Servers: servers, Direct: direct, Workers: cfg.Workers,
				Algorithm: r.alg, Precision: r.prec, Skew: r.skew, Progress: cfg.Progress})
			if err != nil {
				return nil, err
			}
			if len(r.skew) == 0 {
				ref, err := measureAccuracy(ctx, name, tr, accuracyConfig{Workers: 1, Algorithm: r.alg, Precision: r.prec})
				if err != nil {
					return nil, err
				}
				res.compare(ref)
			}
			rep.Rows = append(rep.Rows, res)
		}
	}
	return rep, nil
}

// override sets *v to o when o is set (positive).
func override[T int | int64 | uint64 | time.Duration](v *T, o T) {
	if o > 0 {
		*v = o
	}
}

// Tables returns the human view.
func (r *report) Tables() []*bench.Table {
	t := &bench.Table{Title: "Accuracy against an exact sliding log (" + r.PoP + ")",
		Header: []string{"trace", "algorithm", "N", "skew ms", "requests", "wrong %", "false pos", "false neg",
			"rate err %", "over-adm", "errors", "rt/decision", "agree %"}}
	for _, x := range r.Rows {
		agree := "-"
		if x.AgreementPct >= 0 {
			agree = fmt.Sprintf("%.3f", x.AgreementPct)
		}
		prec := "-"
		if x.Precision > 0 {
			prec = fmt.Sprint(x.Precision)
		}
		t.Add(x.Trace, x.Algorithm, prec, x.SkewMs, x.Requests, fmt.Sprintf("%.3f", x.WrongPct), x.FalsePositives,
			x.FalseNegatives, x.MeanRateError, x.OverAdmission, x.Errors, x.RoundTrips, agree)
	}
	return []*bench.Table{t}
}

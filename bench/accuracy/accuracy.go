// Package accuracy is popbench accuracy: seeded traces replayed in
// virtual time through the limiter, every decision scored against an exact
// sliding log, for each algorithm, precision and clock skew.
package accuracy

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/counter"
)

// AccuracyConfig configures MeasureAccuracy. Zero means default.
type accuracyConfig struct {
	// Servers are the PoP's proxies; empty means an in-memory store (no
	// PoP). Direct: they are shards, each worker uses all of them.
	Servers []string
	Direct  bool
	// Workers is the number of in-process workers; default 4. Requests of
	// one source go to the workers in turn (each has its own client and
	// cache), one at a time, so the decisions are reproducible.
	Workers int
	// Parallel is the number of sources replayed at once; default 8.
	Parallel int
	// Algorithm, Precision, OnReject: the limit run (default sliding window,
	// precision 1, count).
	Algorithm counter.Algorithm
	Precision int
	OnReject  counter.OnReject
	// Skew is the clock offset of each worker, in turn.
	Skew []time.Duration
	// Progress is called with requests done and the total.
	Progress func(done, total int)
}

// AccuracyResult compares one run with the exact sliding log (and, with
// Compare, with the same algorithm run in-process).
type accuracyResult struct {
	Trace     string  `json:"trace"`
	Algorithm string  `json:"algorithm"`
	Precision int     `json:"precision"`
	SkewMs    float64 `json:"skew_ms"`
	Sources   int     `json:"sources"`
	Requests  int     `json:"requests"`
	// Wrong counts decisions that differ from the exact sliding log.
	Wrong    int64   `json:"wrong"`
	WrongPct float64 `json:"wrong_pct"`
	// FalsePositives: rejected although the exact log admits.
	FalsePositives int64 `json:"false_positives"`
	// FalseNegatives: admitted although the exact log rejects.
	FalseNegatives int64 `json:"false_negatives"`
	// MeanRateError is the mean over sources of |admitted − exact
	// admitted| / exact admitted, in percent.
	MeanRateError float64 `json:"mean_rate_error_pct"`
	// OverAdmission counts admitted requests beyond the algorithm's own
	// allowance (fixed window: per window; token bucket: an exact bucket;
	// sliding: admitted in any sliding window beyond the quantity).
	OverAdmission int64 `json:"over_admission"`
	// Errors counts decisions the store could not make.
	Errors int64 `json:"errors"`
	// RoundTrips per decision through the store.
	RoundTrips float64 `json:"roundtrips_per_decision"`
	// AgreementPct is the share of decisions equal to the same algorithm
	// run in one process over an in-memory store (−1 when not compared).
	AgreementPct float64       `json:"agreement_pct"`
	Elapsed      time.Duration `json:"elapsed_ns"`
	allowed      []bool
	decided      []bool
}

// MeasureAccuracy replays tr in virtual time (instant base + offset, base
// aligned on a window boundary) through in-process workers over cfg's store
// and scores every decision against the exact sliding log. Keys carry a
// per-run nonce, so runs never share counters.
func measureAccuracy(ctx context.Context, name string, tr *bench.Trace, cfg accuracyConfig) (*accuracyResult, error) {
	defaultTo(&cfg.Workers, 4)
	defaultTo(&cfg.Parallel, 8)
	workers, par := cfg.Workers, cfg.Parallel
	route := tr.Routes[0]
	in, err := bench.NewInproc(tr.Routes, bench.InprocConfig{Servers: cfg.Servers, Direct: cfg.Direct, Workers: workers, Algorithm: cfg.Algorithm,
		Precision: cfg.Precision, OnReject: cfg.OnReject, Skew: cfg.Skew})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	winMs := route.Window.Milliseconds()
	base := time.UnixMilli(time.Now().UnixMilli()/winMs*winMs - 20*winMs) // aligned, in the past
	nonce := strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
	// Requests by source, in time order.
	bySource := make([][]int, len(tr.Clients))
	for i, r := range tr.Requests {
		bySource[r.Client] = append(bySource[r.Client], i)
	}
	allowed := make([]bool, len(tr.Requests))
	decided := make([]bool, len(tr.Requests))
	var errs, done int64
	var mu sync.Mutex
	before := in.StoreStats()
	start := time.Now()
	var firstOnce sync.Once // the first decision error, kept for the report
	var firstErr error
	g := new(errgroup.Group)
	g.SetLimit(max(1, par))
	for s := 0; s < len(bySource) && ctx.Err() == nil; s++ {
		g.Go(func() error {
			id := nonce + "." + tr.Clients[s].ID
			var e int64
			for k, i := range bySource[s] {
				if ctx.Err() != nil {
					break
				}
				res, err := in.Decide(ctx, k, id, route.Path, base.Add(tr.Requests[i].At))
				if err != nil {
					e++
					firstOnce.Do(func() { firstErr = err })
					continue
				}
				allowed[i], decided[i] = res.Allowed, true
			}
			mu.Lock()
			errs += e
			done += int64(len(bySource[s]))
			if cfg.Progress != nil {
				cfg.Progress(int(done), len(tr.Requests))
			}
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait() // every call returns nil
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st := in.StoreStats().Sub(before)
	res := score(tr, allowed, decided, cfg.Algorithm, counter.Limit{Quantity: route.Quantity, Window: route.Window}, cfg.OnReject == counter.Count)
	res.Trace, res.Precision, res.Errors = name, max(1, cfg.Precision), errs
	if cfg.Algorithm != counter.SlidingWindow {
		res.Precision = 0
	}
	if len(cfg.Skew) > 0 {
		var maxAbs time.Duration
		for _, s := range cfg.Skew {
			maxAbs = max(maxAbs, s, -s)
		}
		res.SkewMs = float64(maxAbs) / float64(time.Millisecond)
	}
	res.RoundTrips = float64(st.RoundTrips()) / float64(max(1, len(tr.Requests)))
	res.Elapsed = time.Since(start)
	res.AgreementPct = -1
	if errs > 0 && errs == int64(len(tr.Requests)) {
		return res, fmt.Errorf("bench: every decision failed: %w", firstErr)
	}
	return res, nil
}

// Compare sets r.AgreementPct from the decisions of another run of the same
// trace, over the requests both runs decided.
func (r *accuracyResult) compare(o *accuracyResult) {
	if len(r.allowed) != len(o.allowed) || len(r.allowed) == 0 {
		return
	}
	same, both := 0, 0
	for i := range r.allowed {
		if !r.decided[i] || !o.decided[i] {
			continue
		}
		both++
		if r.allowed[i] == o.allowed[i] {
			same++
		}
	}
	if both > 0 {
		r.AgreementPct = 100 * float64(same) / float64(both)
	}
}

// Score compares decisions (allowed[i] for tr.Requests[i]) with the exact
// sliding log of limit l (count-all when countAll) and checks the
// algorithm's own allowance. Requests not decided (decided[i] false: the
// store failed) are left out of the wrong/false counts; nil means all
// decided.
func score(tr *bench.Trace, allowed, decided []bool, alg counter.Algorithm, l counter.Limit, countAll bool) *accuracyResult {
	if decided == nil {
		decided = make([]bool, len(allowed))
		for i := range decided {
			decided[i] = true
		}
	}
	res := &accuracyResult{Algorithm: bench.AlgorithmName(alg), Sources: len(tr.Clients), Requests: len(tr.Requests),
		allowed: allowed, decided: decided}
	exact := newSlidingLog(l.Quantity, l.Window, countAll)
	got := make([]int64, len(tr.Clients))
	want := make([]int64, len(tr.Clients))
	admitted := make([][]time.Duration, len(tr.Clients))
	for i, r := range tr.Requests {
		id := tr.Clients[r.Client].ID
		ok := exact.allow(id, r.At, 1)
		if ok {
			want[r.Client]++
		}
		if allowed[i] {
			got[r.Client]++
			admitted[r.Client] = append(admitted[r.Client], r.At)
		}
		switch {
		case !decided[i]:
		case ok && !allowed[i]:
			res.FalsePositives++
		case !ok && allowed[i]:
			res.FalseNegatives++
		}
	}
	res.Wrong = res.FalsePositives + res.FalseNegatives
	res.WrongPct = 100 * float64(res.Wrong) / float64(max(1, len(tr.Requests)))
	var sum float64
	var n int
	for c := range tr.Clients {
		if want[c] > 0 {
			sum += math.Abs(float64(got[c]-want[c])) / float64(want[c])
			n++
		}
		switch alg {
		case counter.FixedWindow:
			res.OverAdmission += fixedWindowExcess(admitted[c], l.Quantity, l.Window)
		case counter.TokenBucket:
			res.OverAdmission += tokenBucketExcess(admitted[c], l.Quantity, l.Burst, l.Window, 0)
		default:
			res.OverAdmission += slidingExcess(admitted[c], l.Quantity, l.Window)
		}
	}
	if n > 0 {
		res.MeanRateError = 100 * sum / float64(n)
	}
	return res
}

// SlidingExcess counts admitted requests (sorted offsets of one key) that
// found quantity or more admitted ones in the window (t−window, t] before
// them.
func slidingExcess(admitted []time.Duration, quantity int64, window time.Duration) int64 {
	if !sort.SliceIsSorted(admitted, func(i, j int) bool { return admitted[i] < admitted[j] }) {
		admitted = append([]time.Duration(nil), admitted...)
		sort.Slice(admitted, func(i, j int) bool { return admitted[i] < admitted[j] })
	}
	var excess int64
	counted := make([]time.Duration, 0, len(admitted))
	lo := 0
	for _, at := range admitted {
		for lo < len(counted) && counted[lo] <= at-window {
			lo++
		}
		if int64(len(counted)-lo) >= quantity {
			excess++ // not counted against later ones
			continue
		}
		counted = append(counted, at)
	}
	return excess
}

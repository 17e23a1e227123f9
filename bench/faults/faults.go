// Package faults is popbench faults: a PoP under a steady workload while
// shards die, hang, slow down or reset, the ring changes, mcproxy restarts
// and the policy reloads; each scenario scored on errors, latency and
// recovery time.
package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/poplimit/poplimit/bench"
)

// Fault scenarios.
const (
	faultShardKill    = "shard-kill"       // a shard killed (SIGKILL), restarted empty
	faultShardHang    = "shard-hang"       // a shard hung (SIGSTOP), continued (SIGCONT)
	faultShardSlow    = "shard-slow"       // a shard behind a relay adding delay
	faultProxyRestart = "proxy-restart"    // mcproxy killed, restarted
	faultReload       = "reload"           // a policy reload on every edge
	faultConnReset    = "conn-reset"       // every connection to a shard reset (RST)
	faultReshard      = "shard-add-remove" // a fourth shard added to mcproxy's pool, then removed (SIGHUP reloads)
	// faultBurst: bursts at one key and a flood of distinct keys on a
	// healthy store, edges on default flags (bench.RunBurst).
	faultBurst = "burst"
)

// FaultScenarios lists every scenario in the order they run.
var FaultScenarios = []string{faultShardKill, faultShardHang, faultShardSlow, faultConnReset, faultReshard, faultReload, faultProxyRestart}

// FaultsConfig configures RunFaults. Zero means default.
type FaultsConfig struct {
	// Scenarios to run, in order; default FaultScenarios.
	Scenarios []string
	// Warmup before the first fault; default 2s. Its second half is the
	// baseline error rate.
	Warmup time.Duration
	// Fault is how long each fault lasts; default 2s.
	Fault time.Duration
	// Settle is how long each scenario is observed after the repair;
	// default 4s. Recovery requires a clean last second.
	Settle time.Duration
	// SlowDelay is the one-way delay of the slowed shard; default 300ms
	// (a 600ms round trip, over the workers' 400ms store deadline).
	SlowDelay time.Duration
	// HTTP uses edge workers (default when they build); else in-process.
	InProcess bool
	// Users on /api (fail open) and on /login (fail closed); default 20
	// and 8, all under their limits.
	APIUsers, LoginUsers int
	// OutDir receives the timeline chart and report; "" writes none.
	OutDir string
	// ChartFormat is "png" (default) or "svg".
	ChartFormat string
	// Seed; default 1.
	Seed uint64
	// Progress is called with requests done and total.
	Progress func(done, total int)
	// Burst configures the faultBurst scenario (its own PoP, edges on
	// default flags, no relays); Log defaults to the environment's.
	Burst bench.BurstConfig
}

func (c FaultsConfig) withDefaults() FaultsConfig {
	if len(c.Scenarios) == 0 {
		c.Scenarios = FaultScenarios
	}
	defaultTo(&c.Warmup, 2*time.Second)
	defaultTo(&c.Fault, 2*time.Second)
	defaultTo(&c.Settle, 4*time.Second)
	defaultTo(&c.SlowDelay, 300*time.Millisecond)
	defaultTo(&c.APIUsers, 20)
	defaultTo(&c.LoginUsers, 8)
	defaultTo(&c.Seed, 1)
	return c
}

// FaultResult is what one scenario did.
type faultResult struct {
	Scenario string `json:"scenario"`
	// Skipped says why the scenario could not run (e.g. reload without
	// edge workers); the other fields are then zero.
	Skipped string `json:"skipped,omitempty"`
	// StartS, RepairS: when the fault began and when the repair finished,
	// seconds from the start of the run.
	StartS  float64 `json:"start_s"`
	RepairS float64 `json:"repair_s"`
	// Requests sent during the scenario (fault + settle), by route and
	// outcome: "open" is /api (fail open), "closed" is /login (fail closed).
	Open   map[string]int64 `json:"fail_open_route"`
	Closed map[string]int64 `json:"fail_closed_route"`
	// ClientErrors are requests the client saw fail (503 or transport/5xx).
	ClientErrors int64 `json:"client_errors"`
	// StoreErrors are decisions whose store calls failed, as the workers
	// count them (edges: poplimit_store_errors_total).
	StoreErrors int64 `json:"store_errors"`
	// Fallback counts decisions taken by a fail mode, by mode.
	Fallback map[string]int64 `json:"fallback_decisions"`
	// RecoverMs is the time from the repair to the last error seen;
	// 0 when nothing failed after the repair.
	RecoverMs float64 `json:"recover_ms"`
	// Recovered: no error during the last second of the scenario.
	Recovered bool `json:"recovered"`
	// MaxLatencyMs is the longest client-observed latency of a request
	// sent during the scenario (fault + settle).
	MaxLatencyMs float64 `json:"max_latency_ms"`
	// Before and After are the file descriptors and goroutines (edges;
	// threads for mcproxy, which serves no metrics here) of the PoP's
	// mcproxies and edges, summed, when the fault began and at the end of
	// its settle time: a scenario that leaks shows After above Before.
	Before bench.PoPResources `json:"resources_before"`
	After  bench.PoPResources `json:"resources_after"`
	// Note explains what happened in a sentence.
	Note   string `json:"note,omitempty"`
	errPct float64
}

// report is the result of RunFaults.
type report struct {
	PoP string `json:"pop"`
	// BaselineErrorPct is the error rate before any fault (second half of
	// the warmup): the noise floor of this machine.
	BaselineErrorPct float64        `json:"baseline_error_pct"`
	Results          []*faultResult `json:"scenarios"`
	// Burst is the faultBurst scenario's report, when it ran.
	Burst *bench.BurstReport `json:"burst,omitempty"`
	// Exited names the PoP's processes (shards, mcproxies, edges) not
	// running at the end of the run, apart from those the scenarios
	// restarted: empty when nothing crashed.
	Exited []string     `json:"exited"`
	Spans  []bench.Span `json:"spans"`
	Report string       `json:"report,omitempty"`
	Chart  string       `json:"chart,omitempty"`
}

// errSample is the cumulative store error count of the workers at a time.
type errSample struct {
	at       time.Duration
	errs     int64
	fallback map[string]int64
}

// RunFaults launches a PoP whose shards sit behind relays, drives steady
// traffic (every user under its limit, so any rejection or error is the
// fault's doing), and runs the scenarios one after the other: fault, repair,
// observe.
func RunFaults(ctx context.Context, env *bench.Env, cfg FaultsConfig) (bench.Result, error) {
	r, err := runFaults(ctx, env, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runFaults is RunFaults returning the report itself.
func runFaults(ctx context.Context, env *bench.Env, cfg FaultsConfig) (*report, error) {
	cfg = cfg.withDefaults()
	var burst *bench.BurstReport
	if i := slices.Index(cfg.Scenarios, faultBurst); i >= 0 {
		// Its own PoP on default flags, first: the other scenarios need
		// relays and generous deadlines.
		bc := cfg.Burst
		if bc.Log == nil {
			bc.Log = env.Logf
		}
		var err error
		if burst, err = bench.RunBurst(ctx, env, bc); err != nil {
			return nil, err
		}
		cfg.Scenarios = slices.Delete(slices.Clone(cfg.Scenarios), i, i+1)
		if len(cfg.Scenarios) == 0 {
			rep := &report{PoP: burst.PoP, Burst: burst}
			return rep, rep.writeBurst(cfg.OutDir)
		}
	}
	rep, err := runScenarios(ctx, env, cfg)
	if rep != nil {
		rep.Burst = burst
	}
	return rep, err
}

// runScenarios runs the scenarios on one PoP whose shards sit behind relays.
func runScenarios(ctx context.Context, env *bench.Env, cfg FaultsConfig) (*report, error) {
	span := cfg.Fault + cfg.Settle
	tr, err := faultsTrace(cfg, cfg.Warmup+time.Duration(len(cfg.Scenarios))*span)
	if err != nil {
		return nil, err
	}
	p, err := env.Launch(ctx, faultsPoP(cfg, env, tr))
	if err != nil {
		return nil, err
	}
	target, in, err := env.Workers(p, tr.Routes, 4, 64, bench.InprocConfig{Timeout: 400 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	results := make([]*faultResult, len(cfg.Scenarios))
	es := &errSampler{p: p, in: in}
	var actions sync.WaitGroup
	var start time.Time
	next := 0
	sampledAt := time.Duration(-1)
	hook := func(elapsed time.Duration) {
		if start.IsZero() {
			start = time.Now().Add(-elapsed)
		}
		if elapsed-sampledAt >= 200*time.Millisecond {
			sampledAt = elapsed
			actions.Add(1)
			go func() { defer actions.Done(); es.sample(elapsed) }()
		}
		if next >= len(cfg.Scenarios) || elapsed < cfg.Warmup+time.Duration(next)*span {
			return
		}
		i, name := next, cfg.Scenarios[next]
		next++
		actions.Add(1)
		go func() {
			defer actions.Done()
			results[i] = runFault(ctx, p, name, cfg, start, tr.Routes)
		}()
	}
	env.Logf("faults: %d scenarios, %v each (+%v warmup), %d requests", len(cfg.Scenarios), span, cfg.Warmup, len(tr.Requests))
	replay := bench.ReplayTrace(ctx, tr, target, bench.ReplayConfig{Concurrency: 64, Hook: hook, Progress: cfg.Progress})
	actions.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep := &report{PoP: p.Describe() + ", shards behind relays", Exited: exitedProcs(p)}
	rep.score(cfg, results, replay, es.samples)
	if cfg.OutDir != "" {
		if err := rep.write(cfg.OutDir, bench.ChartExt(cfg.ChartFormat), replay); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// exitedProcs names the processes of p that are no longer running.
func exitedProcs(p *bench.PoP) []string {
	out := []string{}
	for i, s := range p.Shards {
		if pid := s.Pid(); pid <= 0 || syscall.Kill(pid, 0) != nil {
			out = append(out, fmt.Sprintf("shard-%d", i))
		}
	}
	for i, pr := range p.Proxies {
		if pr.Exited() {
			out = append(out, fmt.Sprintf("mcproxy-%d", i))
		}
	}
	for i, e := range p.Edges {
		if e.Proc.Exited() {
			out = append(out, fmt.Sprintf("edge-%d", i))
		}
	}
	return out
}

// faultsTrace is the steady traffic of the faults run, total long: API
// users under their limit and login users at 0.6x theirs.
func faultsTrace(cfg FaultsConfig, total time.Duration) (*bench.Trace, error) {
	api := bench.Route{Path: "/api", Quantity: 20, Window: time.Second}
	login := bench.Route{Path: "/login", Quantity: 5, Window: time.Second, FailClosed: true}
	tr, err := bench.Generate(bench.WorkloadConfig{Seed: cfg.Seed, Duration: total, API: api, Login: login,
		Legit: cfg.APIUsers, LegitMin: 0.3, LegitMax: 0.5, Abusive: -1, Boundary: -1, Stuffers: -1})
	if err != nil {
		return nil, err
	}
	for i := 0; i < cfg.LoginUsers; i++ {
		id := int32(len(tr.Clients))
		tr.Clients = append(tr.Clients, bench.Client{ID: fmt.Sprintf("login-%03d", i), Kind: bench.Legit, Route: 1, Multiple: 0.6})
		for at := time.Duration(i) * time.Second / time.Duration(cfg.LoginUsers*3); at < total; at += time.Second / 3 {
			tr.Requests = append(tr.Requests, bench.Request{At: at, Client: id})
		}
	}
	tr.Sort()
	return tr, nil
}

// faultsPoP is the PoP of the faults run: three relayed shards, one
// ejecting mcproxy, and (out of process) four edges with deadlines
// generous enough that a loaded 2-core machine does not look like a fault;
// the faults themselves exceed them.
func faultsPoP(cfg FaultsConfig, env *bench.Env, tr *bench.Trace) bench.PoPConfig {
	pc := bench.PoPConfig{Name: "faults", Shards: 3, Proxies: 1, RelayShards: true,
		// A Twemproxy pool file (so shard-add-remove can reload it):
		// eject a shard after 3 failures, retry it after 1 s, 300 ms
		// request timeout, mcproxy's own placement.
		ProxyPool: "distribution: consistent\nhash_tag: \"{}\"\nauto_eject_hosts: true\nserver_failure_limit: 3\nserver_retry_timeout: 1000\ntimeout: 300"}
	if !cfg.InProcess && env.HasEdge() {
		pc.Edges, pc.WorkersPerPoP = 4, 4
		pc.Policy = bench.PolicyYAML(tr.Routes, 0, 1)
		pc.EdgeArgs = []string{"--store-deadline", "400ms", "--breaker-failures", "5", "--breaker-open", "250ms"}
	}
	return pc
}

// errSampler records the store errors and fallback decisions of the PoP's
// workers over time (in process, or scraped from each edge's metrics).
type errSampler struct {
	p       *bench.PoP
	in      *bench.Inproc
	mu      sync.Mutex
	samples []errSample
}

func (es *errSampler) sample(at time.Duration) {
	s := errSample{at: at, fallback: map[string]int64{}}
	if es.in != nil {
		s.errs = es.in.StoreStats().Errors
	} else {
		for _, e := range es.p.Edges {
			m, err := bench.ScrapeMetrics(e.Admin)
			if err != nil {
				continue
			}
			s.errs += int64(m.Sum("poplimit_store_errors_total", "", ""))
			for _, mode := range []string{"open", "closed", "local"} {
				s.fallback[mode] += int64(m.Sum("poplimit_fallback_decisions_total", "mode", "fail_"+mode))
			}
		}
	}
	es.mu.Lock()
	es.samples = append(es.samples, s)
	es.mu.Unlock()
}

// score fills the report from the replay: the baseline error rate over
// the warmup, then each scenario's span judged against the noise floor
// (the baseline, or the second before the fault if the machine got busier
// since).
func (rep *report) score(cfg FaultsConfig, results []*faultResult, replay *bench.Replay, samples []errSample) {
	span := cfg.Fault + cfg.Settle
	base := &faultResult{RepairS: cfg.Warmup.Seconds()}
	scoreFault(base, replay, cfg.Warmup/2, cfg.Warmup, samples, 1)
	rep.BaselineErrorPct = base.errPct
	for i, r := range results {
		if r == nil {
			r = &faultResult{Scenario: cfg.Scenarios[i], Skipped: "did not start (run cut short)"}
			results[i] = r
		}
		from := cfg.Warmup + time.Duration(i)*span
		pre := &faultResult{RepairS: from.Seconds()}
		scoreFault(pre, replay, from-time.Second, from, samples, 1)
		threshold := max(0.05, 2*max(base.errPct, pre.errPct)/100)
		scoreFault(r, replay, from, from+span, samples, threshold)
		if r.Skipped == "" {
			rep.Spans = append(rep.Spans, bench.Span{Label: r.Scenario, From: secondsDur(r.StartS), To: secondsDur(r.RepairS),
				FromS: r.StartS, ToS: r.RepairS})
		}
	}
	rep.Results = results
}

func secondsDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// runFault applies one fault, waits, repairs it.
func runFault(ctx context.Context, p *bench.PoP, name string, cfg FaultsConfig, start time.Time, routes []bench.Route) *faultResult {
	r := &faultResult{Scenario: name}
	since := func() float64 { return time.Since(start).Seconds() }
	wait := func() {
		select {
		case <-time.After(cfg.Fault):
		case <-ctx.Done():
		}
	}
	r.Before = p.Resources()
	defer func() {
		if r.Skipped != "" || r.RepairS == 0 {
			return
		}
		// Measure at the end of the scenario's settle time.
		end := start.Add(secondsDur(r.StartS) + cfg.Fault + cfg.Settle - 250*time.Millisecond)
		select {
		case <-time.After(time.Until(end)):
		case <-ctx.Done():
		}
		r.After = p.Resources()
	}()
	mark := func() { r.StartS = since() }
	if err := applyFault(ctx, p, name, cfg, routes, r, mark, wait); err != nil {
		r.Note = "fault script failed: " + err.Error()
		return r
	}
	if r.Skipped != "" {
		return r
	}
	r.RepairS = since()
	return r
}

// applyFault applies fault name, calling mark when it starts and wait for
// the fault period, repairs it and sets r.Note, or r.Skipped when the PoP
// cannot have it.
func applyFault(ctx context.Context, p *bench.PoP, name string, cfg FaultsConfig, routes []bench.Route, r *faultResult, mark, wait func()) error {
	switch name {
	case faultShardKill, faultShardHang, faultShardSlow, faultConnReset:
		return applyShardFault(ctx, p, name, cfg, r, mark, wait)
	case faultReshard:
		if p.Config.ProxyPool == "" {
			r.Skipped = "mcproxy runs without a config file to reload"
			return nil
		}
		mark()
		if _, err := p.AddShard(ctx); err != nil {
			return err
		}
		wait()
		// mcproxy drains the removed shard (its default drain quiet
		// period is 1 s) before it is stopped.
		if err := p.RemoveShard(cfg.Settle / 2); err != nil {
			return err
		}
		r.Note = "a fourth memcached added to mcproxy's pool (SIGHUP), then removed and stopped: a quarter of the keys move and back, their counts restart from zero"
	case faultProxyRestart:
		if len(p.Proxies) == 0 {
			r.Skipped = "no mcproxy in this PoP"
			return nil
		}
		mark()
		p.Proxies[0].Kill()
		wait()
		if err := p.RestartProxy(ctx, 0); err != nil {
			return err
		}
		r.Note = "mcproxy killed (SIGKILL), restarted on its port"
	case faultReload:
		if len(p.Edges) == 0 {
			r.Skipped = "needs edge workers (reload is an edge admin endpoint)"
			return nil
		}
		mark()
		// A different policy (login limit doubled), then back.
		alt := append([]bench.Route(nil), routes...)
		alt[len(alt)-1].Quantity *= 2
		if err := p.SetPolicy(ctx, bench.PolicyYAML(alt, 0, 1)); err != nil {
			return err
		}
		wait()
		if err := p.SetPolicy(ctx, bench.PolicyYAML(routes, 0, 1)); err != nil {
			return err
		}
		r.Note = "policy changed and changed back through POST /reload on every edge"
	default:
		r.Skipped = "unknown scenario"
		return nil
	}
	return nil
}

// applyShardFault is applyFault for the faults of one shard.
func applyShardFault(ctx context.Context, p *bench.PoP, name string, cfg FaultsConfig, r *faultResult, mark, wait func()) error {
	switch name {
	case faultShardKill:
		s := p.Shards[0]
		mark()
		s.Kill()
		wait()
		if err := s.Restart(ctx); err != nil {
			return err
		}
		r.Note = "shard 0 killed, restarted empty on its port"
	case faultShardHang:
		s := p.Shards[1%len(p.Shards)]
		mark()
		if err := s.Pause(); err != nil {
			return err
		}
		wait()
		if err := s.Resume(); err != nil {
			return err
		}
		r.Note = "shard 1 stopped (SIGSTOP), continued (SIGCONT)"
	case faultShardSlow:
		s := p.Shards[2%len(p.Shards)]
		if s.Relay == nil {
			r.Skipped = "shards have no relay"
			return nil
		}
		mark()
		s.Relay.SetDelay(cfg.SlowDelay)
		wait()
		s.Relay.SetDelay(0)
		r.Note = fmt.Sprintf("shard 2 slowed by %v each way", cfg.SlowDelay)
	case faultConnReset:
		s := p.Shards[0]
		if s.Relay == nil {
			r.Skipped = "shards have no relay"
			return nil
		}
		mark()
		s.Relay.SetReset(true)
		wait()
		s.Relay.SetReset(false)
		r.Note = "every connection between mcproxy and shard 0 reset (RST), open and new, for the fault period"
	}
	return nil
}

// scoreFault fills r from the requests sent in [from, to) and the worker
// error samples. Time is cut in 250ms buckets; a bucket is bad when its
// errors (client-visible plus worker store errors) exceed threshold (a
// fraction: 5%, or twice the error rate of the baseline or of the second
// before the fault, if higher) of its
// requests: a shared machine misses a store deadline now and then, which
// is noise, not a fault; a dead shard of three fails a third of them. Recovered means the last second
// has no bad bucket; RecoverMs runs from the repair to the end of the last
// bad bucket.
func scoreFault(r *faultResult, rep *bench.Replay, from, to time.Duration, samples []errSample, threshold float64) {
	r.Open, r.Closed, r.Fallback = map[string]int64{}, map[string]int64{}, map[string]int64{}
	if r.Skipped != "" {
		return
	}
	const bucket = 250 * time.Millisecond
	n := int((to - from + bucket - 1) / bucket)
	reqs := make([]int64, n)
	bad := make([]int64, n)
	for _, rec := range rep.Records {
		if rec.Sent < from || rec.Sent >= to {
			continue
		}
		b := int((rec.Sent - from) / bucket)
		reqs[b]++
		c := rep.Trace.Clients[rec.Client]
		m := r.Open
		if rep.Trace.Routes[c.Route].FailClosed {
			m = r.Closed
		}
		m[rec.Outcome.String()]++
		r.MaxLatencyMs = max(r.MaxLatencyMs, float64(rec.Latency)/float64(time.Millisecond))
		if rec.Outcome == bench.Failed || rec.Outcome == bench.Unavailable {
			r.ClientErrors++
			bad[b]++
		}
	}
	// Worker-side store errors: the growth between consecutive samples is
	// charged to the bucket of the later one.
	var first, prev *errSample
	for i := range samples {
		s := &samples[i]
		if s.at <= from {
			if first == nil || s.at > first.at {
				first = s
			}
			continue
		}
		if s.at > to || first == nil {
			continue
		}
		if prev == nil {
			prev = first
		}
		if d := s.errs - prev.errs; d > 0 {
			bad[min(n-1, int((s.at-from)/bucket))] += d
		}
		prev = s
	}
	if first != nil && prev != nil {
		r.StoreErrors = prev.errs - first.errs
		for k, v := range prev.fallback {
			if d := v - first.fallback[k]; d > 0 {
				r.Fallback[k] = d
			}
		}
	}
	repair := secondsDur(r.RepairS) - from
	lastBad := -1
	var allBad, allReqs int64
	for b := 0; b < n; b++ {
		allBad += bad[b]
		allReqs += reqs[b]
		if bad[b] > 0 && float64(bad[b]) > threshold*float64(reqs[b]) {
			lastBad = b
		}
	}
	r.errPct = 100 * float64(allBad) / float64(max(1, allReqs))
	if lastBad >= 0 {
		if end := time.Duration(lastBad+1) * bucket; end > repair {
			r.RecoverMs = float64(end-repair) / float64(time.Millisecond)
		}
	}
	r.Recovered = lastBad < n-int(time.Second/bucket)
}

// Tables returns the human view.
// ReportFile is the Markdown report's path, "" when none was written.
func (r *report) ReportFile() string { return r.Report }

func (r *report) Tables() []*bench.Table {
	var out []*bench.Table
	if r.Burst != nil {
		out = r.Burst.Tables()
		if len(r.Results) == 0 {
			return out
		}
	}
	t := &bench.Table{Title: fmt.Sprintf("Faults under load (%s; errors before any fault: %.2f%%)", r.PoP, r.BaselineErrorPct),
		Header: []string{"scenario", "fault s", "client errors", "store errors", "open: admitted", "closed: admitted",
			"closed: 503", "fallback open", "fallback closed", "recover ms", "recovered", "max latency ms", "fds before→after", "goroutines+threads before→after"}}
	for _, x := range r.Results {
		if x.Skipped != "" {
			t.Add(x.Scenario, "skipped: "+x.Skipped, "", "", "", "", "", "", "", "", "", "", "", "")
			continue
		}
		t.Add(x.Scenario, x.RepairS-x.StartS, x.ClientErrors, x.StoreErrors, x.Open["admitted"], x.Closed["admitted"],
			x.Closed["unavailable"], x.Fallback["open"], x.Fallback["closed"], x.RecoverMs, x.Recovered, x.MaxLatencyMs,
			fmt.Sprintf("%d→%d", x.Before.FDs, x.After.FDs), fmt.Sprintf("%d→%d", x.Before.Tasks, x.After.Tasks))
	}
	return append(out, t)
}

// writeBurst writes the report of a run of the burst scenario alone.
func (r *report) writeBurst(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rp := &bench.Report{Title: "popbench faults: burst"}
	rp.Para("%s, edges on default flags. Generated %s.", r.PoP, time.Now().UTC().Format(time.RFC3339))
	for _, t := range r.Tables() {
		rp.Table(t)
	}
	r.Report = filepath.Join(dir, "faults.md")
	return rp.Write(r.Report)
}

func (r *report) write(dir, ext string, rep *bench.Replay) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.Chart = filepath.Join(dir, "faults-timeline"+ext)
	bucket := 250 * time.Millisecond
	if err := bench.ChartTimeline(r.Chart, "Requests by outcome; dashed lines: fault start and repair", rep.Series(bucket, nil), bucket, r.Spans); err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	rp := &bench.Report{Title: "popbench faults"}
	rp.Para("%s. Every user is under its limit, so rejections and errors are the faults' doing. /api fails open, /login fails closed (503). Generated %s.",
		r.PoP, time.Now().UTC().Format(time.RFC3339))
	for _, t := range r.Tables() {
		rp.Table(t)
	}
	for _, x := range r.Results {
		if x.Note != "" {
			rp.Para("- **%s**: %s.", x.Scenario, x.Note)
		}
	}
	rp.Image("fault timeline", filepath.Base(r.Chart))
	r.Report = filepath.Join(dir, "faults.md")
	return rp.Write(r.Report)
}

// defaultTo sets *v to def when it is zero or negative: the "zero means
// default" rule of FaultsConfig.
func defaultTo[T int | int64 | uint64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

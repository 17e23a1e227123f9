package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// GlobalConfig configures RunGlobal. Zero means default.
type GlobalConfig struct {
	// PoPs, each with Shards memcached shards (default 2), one mcproxy and
	// Workers edge workers (default 2); default 3.
	PoPs, Shards, Workers int
	// Quantity per Window is the client's limit; default 500 per 10s
	// (3,000/min in 10-second windows, so a run of a few windows is short).
	Quantity int64
	Window   time.Duration
	// Windows is the run's length in windows (it starts on a window
	// boundary); the split shifts halfway through; default 3.
	Windows int
	// Multiple is the client's offered rate over its limit; default 2.
	Multiple float64
	// Delay is the one-way delay of the relay in front of the home store
	// (and of the central store); default 80ms.
	Delay time.Duration
	// Before and After are the client's traffic split over the PoPs
	// before and after the shift; default 70/20/10 then 10/20/70.
	Before, After []float64
	// NoCentral skips the central-store comparison.
	NoCentral bool
	// Cold runs the cold-key scenario instead (see sendCold): Keys fresh
	// keys per window (default 2), each bursting Multiple × Quantity ÷ PoPs
	// requests at every PoP at the window's start; no central store.
	Cold bool
	Keys int
	// Progress is called with requests sent and total.
	Progress func(done, total int)
}

// GlobalWindow is one window of one stream: what the client got.
type globalWindow struct {
	Window   int     `json:"window"`
	Offered  int64   `json:"offered"`
	Admitted int64   `json:"admitted"`
	PerPoP   []int64 `json:"admitted_per_pop,omitempty"`
	Errors   int64   `json:"errors"`
	// OverPct is (admitted − limit) ÷ limit in percent: positive is
	// over-admission, negative under-admission.
	OverPct float64 `json:"over_pct"`
	// Shift marks the window in which the split changes.
	Shift bool `json:"shift,omitempty"`
}

// streamReport is the same client traffic under one way of limiting.
type streamReport struct {
	Name    string          `json:"name"`
	Windows []*globalWindow `json:"windows"`
	Latency Summary         `json:"latency"`
}

// globalReport is the result of RunGlobal.
type globalReport struct {
	Limit   int64   `json:"limit"`
	WindowS float64 `json:"window_s"`
	RTTms   float64 `json:"home_rtt_ms"`
	Offered float64 `json:"offered_per_s"`
	PoPs    []string
	Streams []*streamReport `json:"streams"`
	// AddedP99ms is the global stream's p99 minus the per-PoP stream's,
	// measured at the same time on the same edges.
	AddedP99ms float64 `json:"added_p99_ms"`
	// MaxAbsPct is the largest |OverPct| of the global stream's windows.
	MaxAbsPct float64 `json:"max_abs_pct"`
	// Ops per decision of the global limit (the edges' metrics).
	PoPOpsPerDecision  float64            `json:"pop_store_ops_per_decision"`
	HomeOpsPerDecision float64            `json:"home_store_ops_per_decision"`
	Claimed            float64            `json:"tokens_claimed"`
	Expired            float64            `json:"tokens_expired"`
	Paths              map[string]float64 `json:"decision_paths"`
	// FalseRefusals is the edges' poplimit_global_false_refusals_total:
	// rejections issued while the home count the edge last read for the
	// window was below the limit.
	FalseRefusals float64 `json:"false_refusals"`
	// Cold is the cold-key scenario's result (GlobalConfig.Cold).
	Cold *globalColdReport `json:"cold,omitempty"`
}

// GlobalPolicy is the policy of RunGlobal's PoPs: GET /g counted once for
// every PoP (scope: global; scope: pop without global), GET /p per PoP,
// both per user (X-User-ID), quantity per window, fixed windows.
func globalPolicy(quantity int64, window time.Duration, global bool) []byte {
	var b strings.Builder
	b.WriteString("# written by popbench global\nversion: 1\nuser_header: X-User-ID\ntiers:\n")
	gscope := "pop"
	if global {
		gscope = "global"
	}
	for _, s := range []struct{ name, scope string }{{"g", gscope}, {"p", "pop"}} {
		fmt.Fprintf(&b, "  %s:\n    limits:\n      - {name: %s, algorithm: fixed_window, quantity: %d, window: %s, scope: %s}\n", s.name, s.name, quantity, window, s.scope)
	}
	b.WriteString("policies:\n")
	for _, n := range []string{"g", "p"} {
		fmt.Fprintf(&b, "  - {name: %s, routes: [\"GET /%s\"], identity: [user], tier: %s, fail_mode: local}\n", n, n, n)
	}
	return []byte(b.String())
}

// RunGlobal measures a global limit: PoPs, each with its own shards,
// mcproxy and edges, share a home store behind a relay (Delay each way).
// One client's traffic, split over the PoPs and shifting mid-run, is sent
// open-loop three ways at once: to /g (scope: global) and /p (per PoP) on
// the same edges, and to /p on a PoP whose only store is central (behind
// the same delay). Per window it reports what each admitted against the
// limit.
func RunGlobal(ctx context.Context, env *Env, cfg GlobalConfig) (Result, error) {
	r, err := runGlobal(ctx, env, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runGlobal is RunGlobal returning the report itself.
func runGlobal(ctx context.Context, env *Env, cfg GlobalConfig) (*globalReport, error) {
	defaultTo(&cfg.PoPs, 3)
	defaultTo(&cfg.Shards, 2)
	defaultTo(&cfg.Workers, 2)
	defaultTo(&cfg.Quantity, 500)
	defaultTo(&cfg.Window, 10*time.Second)
	defaultTo(&cfg.Windows, 3)
	defaultTo(&cfg.Multiple, 2)
	defaultTo(&cfg.Delay, 80*time.Millisecond)
	defaultTo(&cfg.Keys, 2)
	if cfg.Cold {
		cfg.NoCentral = true
	}
	if cfg.Before == nil {
		cfg.Before, cfg.After = []float64{0.7, 0.2, 0.1}, []float64{0.1, 0.2, 0.7}
	}
	if len(cfg.Before) != cfg.PoPs || len(cfg.After) != cfg.PoPs {
		return nil, fmt.Errorf("bench: global: splits %v, %v for %d PoPs", cfg.Before, cfg.After, cfg.PoPs)
	}
	if !env.HasEdge() {
		return nil, fmt.Errorf("bench: global needs edge workers: %v", env.EdgeErr)
	}
	home, err := env.Launch(ctx, PoPConfig{Name: "home", Shards: 1, Proxies: 1, StoreDelay: cfg.Delay})
	if err != nil {
		return nil, err
	}
	policy := globalPolicy(cfg.Quantity, cfg.Window, true)
	rep := &globalReport{Limit: cfg.Quantity, WindowS: cfg.Window.Seconds(), RTTms: 2 * float64(cfg.Delay) / float64(time.Millisecond)}
	var pops []*PoP
	var targets []*HTTPTarget
	conns := 64
	if cfg.Cold {
		conns = max(conns, 2*coldBurst(cfg)) // a burst to /g and /p finds its connections open
	}
	for i := 0; i < cfg.PoPs; i++ {
		p, err := env.Launch(ctx, PoPConfig{Name: fmt.Sprintf("pop%d", i), Shards: cfg.Shards, Proxies: 1, Edges: cfg.Workers, Policy: policy,
			EdgeArgs: []string{"--global-memcached", home.StoreRelays[0].Addr, "--pops", fmt.Sprint(cfg.PoPs)}})
		if err != nil {
			return nil, err
		}
		pops, targets = append(pops, p), append(targets, NewHTTPTarget(p.EdgeURLs(), conns))
		rep.PoPs = append(rep.PoPs, p.Describe())
	}
	var central *HTTPTarget
	if !cfg.NoCentral {
		c, err := env.Launch(ctx, PoPConfig{Name: "central", Shards: cfg.Shards, Proxies: 1, Edges: cfg.Workers, Policy: globalPolicy(cfg.Quantity, cfg.Window, false), StoreDelay: cfg.Delay,
			EdgeArgs: []string{"--store-deadline", (4*cfg.Delay + 2*time.Second).String()}})
		if err != nil {
			return nil, err
		}
		central = NewHTTPTarget(c.EdgeURLs(), 256)
		rep.PoPs = append(rep.PoPs, c.Describe()+" (the central store)")
	}
	defer func() {
		for _, t := range targets {
			t.Close()
		}
		if central != nil {
			central.Close()
		}
	}()
	if cfg.Cold {
		warmConns(ctx, targets, conns)
		env.Logf("global: cold keys: %d fresh keys per window, each %.0f requests at once at each of %d PoPs, limit %d per %v, for %d windows; home store %v away",
			cfg.Keys, cfg.Multiple*float64(cfg.Quantity)/float64(cfg.PoPs), cfg.PoPs, cfg.Quantity, cfg.Window, cfg.Windows, 2*cfg.Delay)
		rep.Cold = sendCold(ctx, cfg, targets)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return rep, globalMetrics(rep, pops)
	}
	streams := []*globalStream{newGlobalStream("global (scope: global)", "/g", cfg), newGlobalStream("per-PoP (scope: pop)", "/p", cfg)}
	if central != nil {
		streams = append(streams, newGlobalStream("central store", "/p", cfg))
	}
	// Warm up every edge's connections (a client that is not measured).
	for _, t := range append(append([]*HTTPTarget{}, targets...), central) {
		if t != nil {
			for w := 0; w < t.Workers(); w++ {
				t.Do(ctx, w, &Client{ID: "warmup"}, &Route{Path: "/p"})
			}
		}
	}
	rate := cfg.Multiple * float64(cfg.Quantity) / cfg.Window.Seconds()
	rep.Offered = rate
	env.Logf("global: one client at %.0f/s (%.1f× a limit of %d per %v) over %d PoPs, %v then %v, for %d windows; home store %v away",
		rate, cfg.Multiple, cfg.Quantity, cfg.Window, cfg.PoPs, cfg.Before, cfg.After, cfg.Windows, 2*cfg.Delay)
	sendGlobal(ctx, cfg, rate, targets, central, streams)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for _, s := range streams {
		rep.Streams = append(rep.Streams, s.report(cfg))
	}
	for _, w := range rep.Streams[0].Windows {
		rep.MaxAbsPct = max(rep.MaxAbsPct, math.Abs(w.OverPct))
	}
	rep.AddedP99ms = rep.Streams[0].Latency.P99 - rep.Streams[1].Latency.P99
	return rep, globalMetrics(rep, pops)
}

// globalMetrics adds the global limit's store operations per decision and
// token counts from the edges' metrics.
func globalMetrics(rep *globalReport, pops []*PoP) error {
	rep.Paths = map[string]float64{}
	var decisions, local, home float64
	for _, p := range pops {
		for _, e := range p.Edges {
			m, err := ScrapeMetrics(e.Admin)
			if err != nil {
				return err
			}
			decisions += m.Sum("poplimit_global_decisions_total", "", "")
			local += m.Sum("poplimit_global_pop_store_ops_total", "", "")
			home += m.Sum("poplimit_global_home_store_ops_total", "", "")
			rep.Claimed += m.Sum("poplimit_global_tokens_claimed_total", "", "")
			rep.Expired += m.Sum("poplimit_global_tokens_expired_total", "", "")
			rep.FalseRefusals += m.Sum("poplimit_global_false_refusals_total", "", "")
			for _, path := range []string{"pool", "waited", "timeout", "empty", "exhausted", "overdraft", "open", "closed"} {
				rep.Paths[path] += m.Sum("poplimit_global_decisions_total", "path", path)
			}
		}
	}
	if decisions > 0 {
		rep.PoPOpsPerDecision, rep.HomeOpsPerDecision = local/decisions, home/decisions
	}
	return nil
}

// globalStream collects one stream's outcomes.
type globalStream struct {
	name, path string
	mu         sync.Mutex
	windows    []*globalWindow
	lat        *Latency
}

func newGlobalStream(name, path string, cfg GlobalConfig) *globalStream {
	s := &globalStream{name: name, path: path, lat: NewLatency()}
	for i := 0; i < cfg.Windows; i++ {
		s.windows = append(s.windows, &globalWindow{Window: i + 1, PerPoP: make([]int64, cfg.PoPs)})
	}
	return s
}

func (s *globalStream) record(win, pop int, o Outcome, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lat.Record(d)
	w := s.windows[win]
	w.Offered++
	switch o {
	case Admitted:
		w.Admitted++
		w.PerPoP[pop]++
	case Rejected:
	default:
		w.Errors++
	}
}

func (s *globalStream) report(cfg GlobalConfig) *streamReport {
	out := &streamReport{Name: s.name, Windows: s.windows, Latency: s.lat.Summary()}
	shift := cfg.Windows / 2 // the window holding the run's midpoint
	for i, w := range s.windows {
		w.OverPct = 100 * float64(w.Admitted-cfg.Quantity) / float64(cfg.Quantity)
		w.Shift = i == shift && cfg.Windows%2 == 1
	}
	return out
}

// sendGlobal sends the client's requests open-loop: request i is due at
// start + i/rate, goes to the PoP the split in force picks (smooth weighted
// round robin) and is sent to every stream at once (/g and /p in
// alternating order, to the same edge); latency counts from the due time.
// The run starts on a window boundary.
func sendGlobal(ctx context.Context, cfg GlobalConfig, rate float64, pops []*HTTPTarget, central *HTTPTarget, streams []*globalStream) {
	wms := cfg.Window.Milliseconds()
	start := time.UnixMilli((time.Now().UnixMilli()/wms + 1) * wms)
	if d := time.Until(start); d < time.Second {
		start = start.Add(cfg.Window) // time to settle before the first window
	}
	run := time.Duration(cfg.Windows) * cfg.Window
	total := int(rate * run.Seconds())
	gap := time.Duration(float64(time.Second) / rate)
	credit := make([]float64, len(pops))
	client := &Client{ID: "roamer"}
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTimer(time.Until(start))
	defer t.Stop()
	for i := 0; i < total; i++ {
		due := start.Add(time.Duration(i) * gap)
		if d := time.Until(due); d > 0 {
			t.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		split := cfg.Before
		if due.Sub(start) >= run/2 {
			split = cfg.After
		}
		pop := pickWeighted(credit, split)
		win := int(due.Sub(start) / cfg.Window)
		for k := range streams {
			si := k
			if i%2 == 1 && si < 2 {
				si = 1 - si // alternate which of /g and /p is sent first
			}
			s, target, worker := streams[si], pops[pop], i
			if si == 2 {
				target = central
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				o := target.Do(ctx, worker, client, &Route{Path: s.path})
				s.record(win, pop, o, time.Since(due))
			}()
		}
		if cfg.Progress != nil && i%100 == 0 {
			cfg.Progress(i, total)
		}
	}
}

// pickWeighted is smooth weighted round robin over weights (nginx's):
// deterministic, and every prefix of picks follows the weights closely.
func pickWeighted(credit, weights []float64) int {
	best, sum := 0, 0.0
	for i, w := range weights {
		credit[i] += w
		sum += w
		if credit[i] > credit[best] {
			best = i
		}
	}
	credit[best] -= sum
	return best
}

// Tables returns the human view.
func (r *globalReport) Tables() []*Table {
	if r.Cold != nil {
		return r.coldTables()
	}
	t := &Table{Title: fmt.Sprintf("One client at %.0f/s over %d PoPs, limit %d per %gs window; home store %.0f ms away (round trip); admitted per window",
		r.Offered, len(r.Streams[0].Windows[0].PerPoP), r.Limit, r.WindowS, r.RTTms),
		Header: []string{"limiting", "window", "offered", "admitted", "vs limit %", "per PoP", "errors"}}
	for _, s := range r.Streams {
		for _, w := range s.Windows {
			name := fmt.Sprint(w.Window)
			if w.Shift {
				name += " (shift)"
			}
			per := make([]string, len(w.PerPoP))
			for i, n := range w.PerPoP {
				per[i] = fmt.Sprint(n)
			}
			if s.Name == "central store" {
				per = []string{"(one PoP)"}
			}
			t.Add(s.Name, name, w.Offered, w.Admitted, fmt.Sprintf("%+.1f", w.OverPct), strings.Join(per, "/"), w.Errors)
		}
	}
	l := &Table{Title: fmt.Sprintf("Client-observed latency (HTTP through the edge, open loop); global p99 − per-PoP p99 = %+.3f ms", r.AddedP99ms),
		Header: []string{"limiting", "requests", "p50 ms", "p99 ms", "p99.9 ms", "max ms"}}
	for _, s := range r.Streams {
		l.Add(s.Name, s.Latency.Count, s.Latency.P50, s.Latency.P99, s.Latency.P999, s.Latency.Max)
	}
	return []*Table{t, l, r.opsTable()}
}

// opsTable is the edges' figures of the global limit.
func (r *globalReport) opsTable() *Table {
	o := &Table{Title: "Global limit: store operations per decision, tokens and false refusals (edges' metrics: rejections while the home count was under the limit as far as the edge knew: the count it last read, or the counts its claims in flight returned)",
		Header: []string{"PoP store ops/decision", "home store ops/decision", "tokens claimed", "tokens expired", "false refusals", "paths"}}
	o.Add(r.PoPOpsPerDecision, r.HomeOpsPerDecision, r.Claimed, r.Expired, r.FalseRefusals, fmt.Sprint(r.Paths))
	return o
}

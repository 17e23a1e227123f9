package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// multiTarget spreads requests over several PoPs: worker w goes to PoP
// w mod len, to that PoP's worker w / len.
type multiTarget struct{ pops []Target }

func (m multiTarget) Workers() int {
	n := 0
	for _, t := range m.pops {
		n = max(n, t.Workers())
	}
	return n * len(m.pops)
}

func (m multiTarget) Do(ctx context.Context, worker int, c *Client, r *Route) Outcome {
	return m.pops[worker%len(m.pops)].Do(ctx, worker/len(m.pops), c, r)
}

// PopsConfig configures RunPops. Zero means default.
type PopsConfig struct {
	// PoPs side by side; default 3. Each has Shards shards (default 2), one
	// mcproxy and Workers workers (default 2).
	PoPs, Shards, Workers int
	// Duration of the traffic; default 5s.
	Duration time.Duration
	// Quantity per Window of the client's limit; default 20 per 1s.
	Quantity int64
	Window   time.Duration
	// Multiple is the client's offered rate over its limit, spread evenly
	// over the PoPs; default 2 × PoPs (each PoP sees twice the limit).
	Multiple float64
	// Algorithm; the zero value is the sliding window. popbench uses the
	// fixed window (exact, so each PoP's admissions are checkable).
	Algorithm counter.Algorithm
	// InProcess uses in-process workers instead of edges.
	InProcess bool
	// Seed; default 1.
	Seed uint64
	// Progress is called with requests done and total.
	Progress func(done, total int)
}

// PopResult is one PoP's share of the client.
type popResult struct {
	PoP      string  `json:"pop"`
	Offered  int64   `json:"offered"`
	Admitted int64   `json:"admitted"`
	Rejected int64   `json:"rejected"`
	Errors   int64   `json:"errors"`
	Rate     float64 `json:"admitted_per_s"`
	// Bound is the most a PoP may admit enforcing the limit alone: the
	// quantity times the windows the run touched (+1 for a partial one).
	Bound int64 `json:"bound"`
}

// popsReport is the result of RunPops.
type popsReport struct {
	Limit     float64      `json:"limit_per_s"`
	Offered   float64      `json:"offered_per_s"`
	Admitted  float64      `json:"admitted_per_s"`
	Algorithm string       `json:"algorithm"`
	Seconds   float64      `json:"seconds"`
	PoPs      []*popResult `json:"pops"`
	// Independent: every PoP stayed within its own bound, and together
	// they admitted more than one PoP's bound (they share nothing).
	Independent bool `json:"independent"`
}

// RunPops launches several PoPs and spreads one client over them (as
// anycast would if the client moved between PoPs): each PoP enforces the
// limit on its share alone.
func RunPops(ctx context.Context, env *Env, cfg PopsConfig) (Result, error) {
	r, err := runPops(ctx, env, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runPops is RunPops returning the report itself.
func runPops(ctx context.Context, env *Env, cfg PopsConfig) (*popsReport, error) {
	defaultTo(&cfg.PoPs, 3)
	defaultTo(&cfg.Shards, 2)
	defaultTo(&cfg.Workers, 2)
	defaultTo(&cfg.Duration, 5*time.Second)
	defaultTo(&cfg.Quantity, 20)
	defaultTo(&cfg.Window, time.Second)
	defaultTo(&cfg.Multiple, 2*float64(cfg.PoPs))
	defaultTo(&cfg.Seed, 1)
	api := Route{Path: "/api", Quantity: cfg.Quantity, Window: cfg.Window}
	tr, err := Generate(WorkloadConfig{Seed: cfg.Seed, Duration: cfg.Duration, API: api, Legit: -1,
		Abusive: 1, AbuseMin: cfg.Multiple, AbuseMax: cfg.Multiple, Boundary: -1, Stuffers: -1})
	if err != nil {
		return nil, err
	}
	tr.Routes = tr.Routes[:1]
	tr.Clients[0].ID = "roamer"
	var targets []Target
	var pops []*PoP
	for i := 0; i < cfg.PoPs; i++ {
		pc := PoPConfig{Name: fmt.Sprintf("pop%d", i), Shards: cfg.Shards, Proxies: 1}
		if !cfg.InProcess {
			pc.Edges, pc.WorkersPerPoP = cfg.Workers, cfg.Workers
			pc.Policy = PolicyYAML(tr.Routes, cfg.Algorithm, 1)
			pc.EdgeArgs = []string{"--store-deadline", "200ms"}
		}
		p, err := env.Launch(ctx, pc)
		if err != nil {
			return nil, err
		}
		t, _, err := env.Workers(p, tr.Routes, cfg.Workers, 16, InprocConfig{Algorithm: cfg.Algorithm})
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
		pops = append(pops, p)
	}
	env.Logf("pops: one client at %.1f× its limit spread over %d PoPs for %v", cfg.Multiple, cfg.PoPs, cfg.Duration)
	rep := ReplayTrace(ctx, tr, multiTarget{targets}, ReplayConfig{Concurrency: 32, Progress: cfg.Progress})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	out := &popsReport{Limit: api.Rate(), Algorithm: AlgorithmName(cfg.Algorithm), Seconds: rep.Elapsed.Seconds()}
	windows := int64(rep.Elapsed/cfg.Window) + 2
	for _, p := range pops {
		out.PoPs = append(out.PoPs, &popResult{PoP: p.Describe(), Bound: windows * cfg.Quantity})
	}
	var admitted int64
	for _, r := range rep.Records {
		pr := out.PoPs[int(r.Worker)%len(pops)]
		pr.Offered++
		switch r.Outcome {
		case Admitted:
			pr.Admitted++
			admitted++
		case Rejected:
			pr.Rejected++
		default:
			pr.Errors++
		}
	}
	out.Independent = admitted > windows*cfg.Quantity
	for _, pr := range out.PoPs {
		pr.Rate = float64(pr.Admitted) / out.Seconds
		if pr.Admitted > pr.Bound {
			out.Independent = false
		}
	}
	out.Offered = float64(len(rep.Records)) / out.Seconds
	out.Admitted = float64(admitted) / out.Seconds
	return out, nil
}

// Tables returns the human view.
func (r *popsReport) Tables() []*Table {
	t := &Table{Title: fmt.Sprintf("One client over %d PoPs: offered %.0f/s, limit %.0f/s per PoP (%s); admitted %.1f/s in all; each PoP enforces alone: %v",
		len(r.PoPs), r.Offered, r.Limit, r.Algorithm, r.Admitted, r.Independent),
		Header: []string{"pop", "offered", "admitted", "admitted/s", "limit/s", "bound", "rejected", "errors"}}
	for _, p := range r.PoPs {
		t.Add(p.PoP, p.Offered, p.Admitted, p.Rate, r.Limit, p.Bound, p.Rejected, p.Errors)
	}
	return []*Table{t}
}

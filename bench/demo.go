package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// DemoConfig configures RunDemo. Zero means default.
type DemoConfig struct {
	// Duration of the traffic; default 20s.
	Duration time.Duration
	// Seed of the workload; default 1.
	Seed uint64
	// Shards, Proxies, Workers of the PoP; default 3, 1, 4.
	Shards, Proxies, Workers int
	// OutDir receives the report and charts; default "out".
	OutDir string
	// ChartFormat is "png" (default) or "svg".
	ChartFormat string
	// Arrivals of legitimate and abusive users; default Poisson.
	Arrivals arrivals
	// Algorithm of the limits; default sliding window.
	Algorithm counter.Algorithm
	// Progress is called with requests done and the total.
	Progress func(done, total int)
	// Concurrency of the load generator; default 64.
	Concurrency int
	// Events, when not "", is every edge's --events destination (e.g.
	// kafka://BROKER/TOPIC); the result then counts the events written
	// and dropped.
	Events string
}

func (c DemoConfig) withDefaults() DemoConfig {
	defaultTo(&c.Duration, 20*time.Second)
	defaultTo(&c.Seed, 1)
	defaultTo(&c.Shards, 3)
	if c.Proxies == 0 {
		c.Proxies = 1
	}
	defaultTo(&c.Workers, 4)
	if c.OutDir == "" {
		c.OutDir = "out"
	}
	defaultTo(&c.Concurrency, 64)
	return c
}

// demoResult is what the demo shows and writes.
type demoResult struct {
	PoP           string           `json:"pop"`
	Store         StoreKind        `json:"store"`
	WorkerKind    string           `json:"workers"`
	Algorithm     string           `json:"algorithm"`
	Seconds       float64          `json:"seconds"`
	Requests      int              `json:"requests"`
	Throughput    float64          `json:"throughput_per_s"`
	Latency       Summary          `json:"latency"`
	Outcomes      map[string]int64 `json:"outcomes"`
	RoundTrips    float64          `json:"store_roundtrips_per_decision"`
	RoundTripsHow string           `json:"roundtrips_source"`
	LagMs         float64          `json:"generator_lag_ms"`
	Clients       []clientStats    `json:"clients"`
	Report        string           `json:"report"`
	Charts        []string         `json:"charts"`
	UpstreamHits  int64            `json:"upstream_hits"`
	// FailOpen and FailClosed are decisions the edges took by fail mode
	// because the store was unavailable; StoreSlow are decisions taken by
	// the conservative local budget while the store was alive but late
	// (store_slow, store_busy); StoreErrors are the decisions whose store
	// calls failed (edge metrics).
	FailOpen    int64 `json:"fail_open_decisions"`
	FailClosed  int64 `json:"fail_closed_decisions"`
	StoreSlow   int64 `json:"store_slow_decisions"`
	StoreErrors int64 `json:"store_errors"`
	// Events is the edges' --events destination, "" without one;
	// EventsWritten and EventsDropped are their rejection events written
	// (acknowledged by Kafka) and dropped, EventsPerSecond the written
	// ones over the run.
	Events          string  `json:"events,omitempty"`
	EventsWritten   int64   `json:"events_written,omitempty"`
	EventsDropped   int64   `json:"events_dropped,omitempty"`
	EventsPerSecond float64 `json:"events_per_s,omitempty"`
}

// RunDemo launches a PoP (3 shards, 1 proxy, 4 workers, an upstream), runs
// the mixed workload (legitimate users, abusive users, a window-boundary
// attacker, a credential-stuffing botnet on the fail-closed login route)
// through it, and writes a report with charts to OutDir.
func RunDemo(ctx context.Context, env *Env, cfg DemoConfig) (Result, error) {
	r, err := runDemo(ctx, env, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runDemo is RunDemo returning the report itself.
func runDemo(ctx context.Context, env *Env, cfg DemoConfig) (*demoResult, error) {
	cfg = cfg.withDefaults()
	tr, err := Generate(WorkloadConfig{
		Seed: cfg.Seed, Duration: cfg.Duration, Legit: 8, Abusive: 2, Stuffers: 4, LegitMax: 0.5, Arrivals: cfg.Arrivals,
		API:   Route{Path: "/api", Quantity: 50, Window: time.Second, Refund: true},
		Login: Route{Path: "/login", Quantity: 5, Window: time.Second, FailClosed: true},
	})
	if err != nil {
		return nil, err
	}
	var edgeArgs []string
	if cfg.Events != "" {
		edgeArgs = []string{"--events", cfg.Events, "--events-pop", "demo"}
	}
	p, err := env.Launch(ctx, PoPConfig{Name: "demo", Shards: cfg.Shards, Proxies: cfg.Proxies,
		// The edges run on their default flags (the adaptive store
		// deadline), as a new user's would.
		Edges: cfg.Workers, WorkersPerPoP: cfg.Workers, Policy: PolicyYAML(tr.Routes, cfg.Algorithm, 1), EdgeArgs: edgeArgs})
	if err != nil {
		return nil, err
	}
	target, in, err := env.Workers(p, tr.Routes, cfg.Workers, cfg.Concurrency, InprocConfig{Algorithm: cfg.Algorithm})
	if err != nil {
		return nil, err
	}
	before, how := storeCommands(p, in)
	hits0 := env.upstream.hitCount()
	env.Logf("replaying %d requests from %d clients over %v", len(tr.Requests), len(tr.Clients), cfg.Duration)
	rep := ReplayTrace(ctx, tr, target, ReplayConfig{Concurrency: cfg.Concurrency, Progress: cfg.Progress})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	after, _ := storeCommands(p, in)
	res := &demoResult{
		PoP: p.Describe(), Store: p.Store, WorkerKind: workerKind(p), Algorithm: AlgorithmName(cfg.Algorithm),
		Seconds: rep.Elapsed.Seconds(), Requests: len(rep.Records),
		Throughput: float64(len(rep.Records)) / rep.Elapsed.Seconds(),
		Latency:    rep.Latency.Summary(), Outcomes: map[string]int64{},
		LagMs:   float64(rep.Lag) / float64(time.Millisecond),
		Clients: rep.perClient(), RoundTripsHow: how,
		UpstreamHits: env.upstream.hitCount() - hits0,
	}
	if cfg.Events != "" {
		res.Events = cfg.Events
		res.EventsWritten, res.EventsDropped = eventCounts(ctx, p)
		res.EventsPerSecond = float64(res.EventsWritten) / res.Seconds
	}
	for _, e := range p.Edges {
		if m, err := ScrapeMetrics(e.Admin); err == nil {
			res.FailOpen += int64(m.Sum("poplimit_fallback_decisions_total", "mode", "fail_open"))
			res.FailClosed += int64(m.Sum("poplimit_fallback_decisions_total", "mode", "fail_closed"))
			res.StoreSlow += int64(m.Sum("poplimit_store_slow_decisions_total", "", ""))
			res.StoreErrors += int64(m.Sum("poplimit_store_errors_total", "", ""))
		}
	}
	if in != nil {
		res.StoreErrors = in.StoreStats().Errors
	}
	for o, n := range rep.totals() {
		res.Outcomes[Outcome(o).String()] = n
	}
	if len(rep.Records) > 0 && after >= before {
		res.RoundTrips = float64(after-before) / float64(len(rep.Records))
	}
	if err := res.writeReport(cfg.OutDir, ChartExt(cfg.ChartFormat), rep); err != nil {
		return res, err
	}
	return res, nil
}

// eventCounts sums the edges' rejection events written and dropped, once
// two scrapes a quarter second apart agree (the producer delivers
// asynchronously) or after three seconds.
func eventCounts(ctx context.Context, p *PoP) (written, dropped int64) {
	scrape := func() (w, d int64) {
		for _, e := range p.Edges {
			if m, err := ScrapeMetrics(e.Admin); err == nil {
				w += int64(m.Sum("poplimit_rejection_events_written_total", "", ""))
				d += int64(m.Sum("poplimit_rejection_events_dropped_total", "", ""))
			}
		}
		return w, d
	}
	written, dropped = scrape()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(250 * time.Millisecond)
		w, d := scrape()
		if w == written && d == dropped {
			break
		}
		written, dropped = w, d
	}
	return written, dropped
}

// WriteSummary writes the PoP, the story and where the report is.
func (r *demoResult) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\n%s; %s.\n", r.PoP, r.WorkerKind)
	for _, line := range r.Story() {
		fmt.Fprintln(w, "  - "+line)
	}
	fmt.Fprintf(w, "\nreport with charts: %s\n", r.Report)
}

func workerKind(p *PoP) string {
	if len(p.Edges) > 0 {
		return "edge processes (HTTP)"
	}
	return "in-process workers"
}

// storeCommands counts store commands so far: the in-process workers' own
// count, else the proxies' command counts, else the shards' stats
// (memcached counts a multi-get once per key).
func storeCommands(p *PoP, in *Inproc) (int64, string) {
	if in != nil {
		return in.StoreStats().RoundTrips(), "workers' store calls"
	}
	var n int64
	if len(p.Proxies) > 0 {
		for _, pr := range p.Proxies {
			st, err := serverStats(pr.Addr, time.Second)
			if err != nil {
				return -1, "unavailable"
			}
			n += storeCommandsOf(st)
		}
		return n, "mcproxy command counts"
	}
	for _, s := range p.Shards {
		st, err := serverStats(s.Direct, time.Second)
		if err != nil {
			return -1, "unavailable"
		}
		n += storeCommandsOf(st)
	}
	return n, "shard stats (commands; a multi-get counts per key)"
}

// Tables returns the human view of the result.
func (r *demoResult) Tables() []*Table {
	clients := &Table{Title: "Per client: offered vs admitted vs limit",
		Header: []string{"client", "kind", "route", "limit/s", "offered/s", "admitted/s", "rejected", "503", "failed"}}
	for _, c := range r.Clients {
		clients.Add(c.ID, c.Kind, c.Route, c.Limit, c.OfferedRate, c.AdmittedRate, c.Rejected, c.Unavailable, c.Failed)
	}
	sum := &Table{Title: "Whole run", Header: []string{"requests", "throughput/s", "p50 ms", "p99 ms", "p999 ms",
		"admitted", "rejected", "503", "failed", "store ops/decision", "store errors", "fail-open"}}
	sum.Add(r.Requests, r.Throughput, r.Latency.P50, r.Latency.P99, r.Latency.P999,
		r.Outcomes["admitted"], r.Outcomes["rejected"], r.Outcomes["unavailable"], r.Outcomes["failed"], r.RoundTrips,
		r.StoreErrors, r.FailOpen)
	return []*Table{clients, sum}
}

// Story sums the run up per kind of client, in sentences.
func (r *demoResult) Story() []string {
	type agg struct {
		n                                 int
		offered, admitted, rejected, e503 int64
		limit                             float64
	}
	by := map[Kind]*agg{}
	for _, c := range r.Clients {
		a := by[c.Kind]
		if a == nil {
			a = &agg{}
			by[c.Kind] = a
		}
		a.n++
		a.offered += c.Offered
		a.admitted += c.Admitted
		a.rejected += c.Rejected
		a.e503 += c.Unavailable
		a.limit = c.Limit
	}
	per := func(v int64, a *agg) float64 { return float64(v) / float64(a.n) / r.Seconds }
	var out []string
	if a := by[Legit]; a != nil {
		out = append(out, fmt.Sprintf("%d legitimate users (under %.0f/s each): %d of %d requests admitted, %d rejected.",
			a.n, a.limit, a.admitted, a.offered, a.rejected))
	}
	if a := by[Abusive]; a != nil {
		verdict := "held at their limit"
		if per(a.admitted, a) > 1.2*a.limit {
			verdict = "above their limit"
			if r.FailOpen > 0 {
				verdict += fmt.Sprintf(": %d decisions failed open (the store was unreachable; /api fails open by policy)", r.FailOpen)
			}
			if r.StoreSlow > 0 {
				verdict += fmt.Sprintf(": %d decisions by the local budget (the store answered too late)", r.StoreSlow)
			}
		}
		out = append(out, fmt.Sprintf("%d abusive users offered %.0f/s each on average and were admitted %.1f/s each, limit %.0f/s: %s.",
			a.n, per(a.offered, a), per(a.admitted, a), a.limit, verdict))
	}
	if a := by[boundaryAttacker]; a != nil {
		out = append(out, fmt.Sprintf("The window-boundary attacker sent %d requests in double bursts around window edges; %d were admitted, %d rejected.",
			a.offered, a.admitted, a.rejected))
	}
	if a := by[credentialStuffer]; a != nil {
		out = append(out, fmt.Sprintf("%d credential-stuffing sources on /login (limit %.0f/s, fail closed) tried %.1f/s each and got %.2f/s through; %d answers were 503.",
			a.n, a.limit, per(a.offered, a), per(a.admitted, a), a.e503))
	}
	out = append(out, fmt.Sprintf("The PoP decided %.0f requests/s, p50 %.2f ms, p99 %.2f ms from the client; %.2f store operations per decision; %d decisions failed open.",
		r.Throughput, r.Latency.P50, r.Latency.P99, r.RoundTrips, r.FailOpen))
	if r.Events != "" {
		out = append(out, fmt.Sprintf("Rejection events to %s: %d written (%.0f/s), %d dropped.",
			r.Events, r.EventsWritten, r.EventsPerSecond, r.EventsDropped))
	}
	if r.LagMs > 100 {
		out = append(out, fmt.Sprintf("The load generator fell up to %.0f ms behind its schedule (a busy machine): requests it sent late went out in clumps.", r.LagMs))
	}
	return out
}

// chartClients picks the clients worth a line: the busiest legitimate one,
// every abusive one, the boundary attacker and one stuffer.
func chartClients(tr *Trace) []int {
	var out []int
	stuffer := false
	busiest := -1
	for i, c := range tr.Clients {
		switch c.Kind {
		case Legit:
			if busiest < 0 || c.Multiple > tr.Clients[busiest].Multiple {
				busiest = i
			}
		case Abusive, boundaryAttacker:
			out = append(out, i)
		case credentialStuffer:
			if !stuffer {
				out = append(out, i)
				stuffer = true
			}
		}
	}
	if busiest >= 0 {
		out = append([]int{busiest}, out...)
	}
	return out
}

func (r *demoResult) writeReport(dir, ext string, rep *Replay) error {
	bucket := time.Second
	admitted := filepath.Join(dir, "demo-admitted"+ext)
	cdf := filepath.Join(dir, "demo-latency-cdf"+ext)
	timeline := filepath.Join(dir, "demo-timeline"+ext)
	if err := mkdir(dir); err != nil {
		return err
	}
	if err := chartAdmitted(admitted, admittedSeries(rep, chartClients(rep.Trace), bucket), bucket); err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	if err := chartCDF(cdf, "Decision latency through the PoP (client side)", []string{"all requests"}, []*Latency{rep.Latency}); err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	if err := ChartTimeline(timeline, "Requests by outcome", rep.Series(500*time.Millisecond, nil), 500*time.Millisecond, nil); err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	r.Charts = []string{admitted, cdf, timeline}
	rp := &Report{Title: "popbench demo"}
	rp.Para("%s; %s; %s algorithm. %d requests in %.1fs (%.0f/s), p50 %.2f ms, p99 %.2f ms; %.2f store operations per decision (%s). Generated %s.",
		r.PoP, r.WorkerKind, r.Algorithm, r.Requests, r.Seconds, r.Throughput, r.Latency.P50, r.Latency.P99, r.RoundTrips, r.RoundTripsHow,
		time.Now().UTC().Format(time.RFC3339))
	rp.Para("What to look for: legitimate users stay under their limit and are not rejected; abusive users on /api (refund mode) are held at their limit; the boundary attacker's double bursts around window edges are cut to one allowance; the credential-stuffing sources on /login (count mode: rejected attempts count too) are locked out after their first allowance for as long as they keep trying, and /login fails closed (503) when the store is unreachable.")
	for _, line := range r.Story() {
		rp.Para("- %s", line)
	}
	tabs := r.Tables()
	sort.SliceStable(tabs[0].Rows, func(i, j int) bool { return tabs[0].Rows[i][1] < tabs[0].Rows[j][1] })
	for _, t := range tabs {
		rp.Table(t)
	}
	rp.Image("admitted rate vs limit per client", filepath.Base(admitted))
	rp.Image("latency CDF", filepath.Base(cdf))
	rp.Image("requests by outcome over time", filepath.Base(timeline))
	r.Report = filepath.Join(dir, "demo.md")
	return rp.Write(r.Report)
}

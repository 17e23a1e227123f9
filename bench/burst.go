package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// BurstConfig configures RunBurst. Zero means default.
type BurstConfig struct {
	// Requests per burst; default 1000.
	Requests int
	// Limit per minute of the burst key; default 100.
	Limit int64
	// Conns are the client connection counts, one burst series each;
	// default 256 and 32.
	Conns []int
	// Rounds of each burst (algorithm × connections × fail mode); default 5.
	Rounds int
	// FloodRate is distinct API keys (one request each) per second;
	// default 2000. FloodFor is how long; default 10s; negative: no flood.
	FloodRate int
	FloodFor  time.Duration
	// FloodConns is the flood's client concurrency; default 256.
	FloodConns int
	// EdgeArgs are extra edge flags; default none (default flags).
	EdgeArgs []string
	// Log, if not nil, receives one line per burst.
	Log func(format string, args ...any)
}

func (c BurstConfig) withDefaults() BurstConfig {
	defaultTo(&c.Requests, 1000)
	defaultTo(&c.Limit, 100)
	if len(c.Conns) == 0 {
		c.Conns = []int{256, 32}
	}
	defaultTo(&c.Rounds, 5)
	defaultTo(&c.FloodRate, 2000)
	if c.FloodFor == 0 {
		c.FloodFor = 10 * time.Second
	}
	defaultTo(&c.FloodConns, 256)
	if c.Log == nil {
		c.Log = func(string, ...any) {}
	}
	return c
}

// BurstAlgorithms are the policies a burst runs against.
var burstAlgorithms = []string{"fixed_window", "token_bucket", "sliding_window"}

// BurstPolicy is the policy of RunBurst: per algorithm, a fail-open and a
// fail-closed route (GET /<algorithm>/open, /<algorithm>/closed) limited
// to limit per minute per API key, and GET /flood (fixed window, fail
// open).
func burstPolicy(limit int64) []byte {
	var b strings.Builder
	b.WriteString("version: 1\napi_key: {header: X-API-Key}\ntiers:\n")
	for _, a := range burstAlgorithms {
		extra := ""
		if a == "token_bucket" {
			extra = fmt.Sprintf(", burst: %d", limit)
		}
		fmt.Fprintf(&b, "  %s: {limits: [{name: %s, algorithm: %s, quantity: %d, window: 1m%s}]}\n", a, a, a, limit, extra)
	}
	b.WriteString("policies:\n")
	for _, a := range burstAlgorithms {
		for _, mode := range []string{"open", "closed"} {
			fmt.Fprintf(&b, "  - {name: %s-%s, routes: [\"GET /%s/%s\"], identity: [api_key], tier: %s, fail_mode: %s}\n", a, mode, a, mode, a, mode)
		}
	}
	b.WriteString("  - {name: flood, routes: [\"GET /flood\"], identity: [api_key], tier: fixed_window, fail_mode: open}\n")
	return []byte(b.String())
}

// burstRun is one burst: Requests at one fresh key from Conns connections
// spread over the edges.
type burstRun struct {
	Algorithm string `json:"algorithm"`
	FailMode  string `json:"fail_mode"`
	Conns     int    `json:"conns"`
	Round     int    `json:"round"`
	Limit     int64  `json:"limit"`
	// Allowance is what an exact limiter admits: Limit, plus for the token
	// bucket what it refilled during the burst.
	Allowance int64   `json:"allowance"`
	Admitted  int64   `json:"admitted"`
	Rejected  int64   `json:"rejected_429"`
	Status503 int64   `json:"status_503"`
	Other     int64   `json:"other_errors"`
	Seconds   float64 `json:"seconds"`
	// Decisions by reason, from the edges' metrics (delta over the burst).
	FailOpen  int64 `json:"fail_open"`
	StoreSlow int64 `json:"store_slow"`
}

// floodRun is the flood: one request per distinct key at a fixed rate.
type floodRun struct {
	Rate      int     `json:"rate"`
	Seconds   float64 `json:"seconds"`
	Sent      int64   `json:"sent"`
	Admitted  int64   `json:"admitted"`
	Status503 int64   `json:"status_503"`
	Other     int64   `json:"other_errors"`
	FailOpen  int64   `json:"fail_open"`
	StoreSlow int64   `json:"store_slow"`
	// LateMs is how late the generator sent its last request (a
	// generator that cannot keep the rate says so here).
	LateMs float64 `json:"late_ms"`
}

// BurstReport is the result of RunBurst.
type BurstReport struct {
	PoP    string      `json:"pop"`
	Bursts []*burstRun `json:"bursts"`
	Flood  *floodRun   `json:"flood,omitempty"`
}

// RunBurst launches a PoP (3 memcached shards, one mcproxy, 4 edges on
// default flags unless EdgeArgs) and runs the bursts and the flood.
func RunBurst(ctx context.Context, env *Env, cfg BurstConfig) (*BurstReport, error) {
	cfg = cfg.withDefaults()
	if !env.HasEdge() {
		return nil, fmt.Errorf("bench: burst needs edge workers: %v", env.EdgeErr)
	}
	p, err := env.Launch(ctx, PoPConfig{Name: "burst", Shards: 3, Proxies: 1, Edges: 4, WorkersPerPoP: 4,
		Policy: burstPolicy(cfg.Limit), EdgeArgs: cfg.EdgeArgs})
	if err != nil {
		return nil, err
	}
	defer p.close()
	rep := &BurstReport{PoP: p.Describe()}
	run := 0
	for _, conns := range cfg.Conns {
		client := burstClient(conns)
		for round := 1; round <= cfg.Rounds; round++ {
			for _, alg := range burstAlgorithms {
				for _, mode := range []string{"open", "closed"} {
					run++
					r, err := burstOnce(ctx, p, client, cfg, alg, mode, conns, fmt.Sprintf("burst-%d-%d", time.Now().UnixNano(), run))
					if err != nil {
						return rep, err
					}
					r.Round = round
					rep.Bursts = append(rep.Bursts, r)
					cfg.Log("burst %s/%s conns %d round %d: admitted %d of allowance %d, fail-open %d, store_slow %d, 503 %d, errors %d, %.2fs",
						alg, mode, conns, round, r.Admitted, r.Allowance, r.FailOpen, r.StoreSlow, r.Status503, r.Other, r.Seconds)
				}
			}
		}
		client.CloseIdleConnections()
	}
	if cfg.FloodFor > 0 {
		f, err := flood(ctx, p, cfg)
		if err != nil {
			return rep, err
		}
		rep.Flood = f
		cfg.Log("flood %d keys/s for %.1fs: sent %d, fail-open %d, store_slow %d, 503 %d, errors %d, late %.0fms",
			f.Rate, f.Seconds, f.Sent, f.FailOpen, f.StoreSlow, f.Status503, f.Other, f.LateMs)
	}
	return rep, nil
}

func burstClient(conns int) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: time.Minute}}
}

// reasonTotals sums the edges' decisions with each reason.
func reasonTotals(p *PoP) (failOpen, slow int64, err error) {
	for _, e := range p.Edges {
		m, err := ScrapeMetrics(e.Admin)
		if err != nil {
			return 0, 0, err
		}
		failOpen += int64(m.Sum("poplimit_decisions_total", "result", "fail_open"))
		slow += int64(m.Sum("poplimit_decisions_total", "result", "store_slow") + m.Sum("poplimit_decisions_total", "result", "store_busy"))
	}
	return failOpen, slow, nil
}

// statusCounts tallies answers.
type statusCounts struct{ ok, limited, unavailable, other atomic.Int64 }

func (s *statusCounts) send(ctx context.Context, client *http.Client, url, key string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		s.other.Add(1)
		return
	}
	req.Header.Set("X-API-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		s.other.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		s.ok.Add(1)
	case http.StatusTooManyRequests:
		s.limited.Add(1)
	case http.StatusServiceUnavailable:
		s.unavailable.Add(1)
	default:
		s.other.Add(1)
	}
}

// burstOnce sends cfg.Requests at key from conns goroutines, goroutine g
// to edge g mod edges. A fixed window must not straddle a minute boundary
// (the count would legitimately restart): it waits for the next minute
// when fewer than 15 s are left.
func burstOnce(ctx context.Context, p *PoP, client *http.Client, cfg BurstConfig, alg, mode string, conns int, key string) (*burstRun, error) {
	if left := time.Minute - time.Duration(time.Now().UnixNano()%int64(time.Minute)); left < 15*time.Second {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(left + 100*time.Millisecond):
		}
	}
	fo0, slow0, err := reasonTotals(p)
	if err != nil {
		return nil, err
	}
	urls := p.EdgeURLs()
	var st statusCounts
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < conns; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := urls[g%len(urls)] + "/" + alg + "/" + mode
			for next.Add(1) <= int64(cfg.Requests) && ctx.Err() == nil {
				st.send(ctx, client, url, key)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	fo1, slow1, err := reasonTotals(p)
	if err != nil {
		return nil, err
	}
	r := &burstRun{Algorithm: alg, FailMode: mode, Conns: conns, Limit: cfg.Limit, Allowance: cfg.Limit,
		Admitted: st.ok.Load(), Rejected: st.limited.Load(), Status503: st.unavailable.Load(), Other: st.other.Load(),
		Seconds: el.Seconds(), FailOpen: fo1 - fo0, StoreSlow: slow1 - slow0}
	if alg == "token_bucket" {
		// Refill during the burst: limit per minute.
		r.Allowance += int64(el.Seconds()*float64(cfg.Limit)/60) + 1
	}
	return r, ctx.Err()
}

// flood sends one request per fresh API key at cfg.FloodRate for
// cfg.FloodFor, open loop (request i is due at i/rate), over the edges.
func flood(ctx context.Context, p *PoP, cfg BurstConfig) (*floodRun, error) {
	fo0, slow0, err := reasonTotals(p)
	if err != nil {
		return nil, err
	}
	client := burstClient(cfg.FloodConns)
	defer client.CloseIdleConnections()
	urls := p.EdgeURLs()
	total := int64(cfg.FloodFor.Seconds() * float64(cfg.FloodRate))
	interval := time.Second / time.Duration(cfg.FloodRate)
	var st statusCounts
	var next atomic.Int64
	var late atomic.Int64
	prefix := fmt.Sprintf("flood-%d-", time.Now().UnixNano())
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < cfg.FloodConns; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				due := start.Add(time.Duration(i) * interval)
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				} else if i == total-1 {
					late.Store(int64(-d))
				}
				st.send(ctx, client, urls[i%int64(len(urls))]+"/flood", fmt.Sprintf("%s%d", prefix, i))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	fo1, slow1, err := reasonTotals(p)
	if err != nil {
		return nil, err
	}
	return &floodRun{Rate: cfg.FloodRate, Seconds: el.Seconds(), Sent: total, Admitted: st.ok.Load(),
		Status503: st.unavailable.Load(), Other: st.other.Load(), FailOpen: fo1 - fo0, StoreSlow: slow1 - slow0,
		LateMs: float64(late.Load()) / 1e6}, ctx.Err()
}

// Tables renders the report.
func (r *BurstReport) Tables() []*Table {
	t := &Table{Title: "Bursts at one key (" + r.PoP + ")",
		Header: []string{"algorithm", "fail mode", "conns", "round", "admitted", "allowance", "fail-open", "store_slow", "503", "errors", "seconds"}}
	for _, b := range r.Bursts {
		t.Add(b.Algorithm, b.FailMode, b.Conns, b.Round, b.Admitted, b.Allowance, b.FailOpen, b.StoreSlow, b.Status503, b.Other, b.Seconds)
	}
	out := []*Table{t}
	if f := r.Flood; f != nil {
		ft := &Table{Title: "Flood of distinct keys", Header: []string{"keys/s", "seconds", "sent", "admitted", "fail-open", "store_slow", "503", "errors", "late ms"}}
		ft.Add(f.Rate, f.Seconds, f.Sent, f.Admitted, f.FailOpen, f.StoreSlow, f.Status503, f.Other, f.LateMs)
		out = append(out, ft)
	}
	return out
}

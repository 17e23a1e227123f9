package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// GlobalColdWindow is one window of the cold-key scenario: fresh keys,
// each bursting at every PoP at the window's start.
type globalColdWindow struct {
	Window int `json:"window"`
	// Offered and Admitted per key (scope: global), summed over PoPs.
	Offered  int64   `json:"offered_per_key"`
	Admitted []int64 `json:"admitted_per_key"`
	// MaxAbsPct is the largest |admitted − limit| ÷ limit over the keys.
	MaxAbsPct float64 `json:"max_abs_pct"`
	Errors    int64   `json:"errors"`
}

// GlobalColdReport is the cold-key scenario's result.
type globalColdReport struct {
	Keys, Burst int
	Windows     []*globalColdWindow `json:"windows"`
	// First is the latency of each key's first request at each PoP (sent
	// alone at the window's start, the burst 2ms later; every sender is
	// started coldLead before, so each sends at its instant) on /g (global)
	// and /p (per PoP, no home store); AddedFirstP99ms is their p99s'
	// difference.
	FirstGlobal, FirstPoP Summary
	AddedFirstP99ms       float64 `json:"added_first_p99_ms"`
	// FirstNotAdmitted is the first requests on /g not admitted (each
	// key's first at a PoP finds the window's quota unused).
	FirstNotAdmitted int `json:"first_not_admitted"`
	// Burst latency of every request, /g and /p.
	BurstGlobal, BurstPoP Summary
}

// coldBurst is the requests of one cold key at one PoP.
func coldBurst(cfg GlobalConfig) int {
	return max(1, int(cfg.Multiple*float64(cfg.Quantity)/float64(cfg.PoPs)))
}

// warmConns opens conns connections to every edge of targets (requests
// of clients that are not measured, sent at once, to /p and to /g), so a
// burst does not measure TCP connects, to the edges or from them to the
// home store.
func warmConns(ctx context.Context, targets []*HTTPTarget, conns int) {
	var wg sync.WaitGroup
	for _, t := range targets {
		for w := 0; w < t.Workers(); w++ {
			for i := 0; i < conns/t.Workers()+1; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t.Do(ctx, w, &Client{ID: "warmup"}, &Route{Path: "/p"})
					t.Do(ctx, w, &Client{ID: "warmup"}, &Route{Path: "/g"})
				}()
			}
		}
	}
	wg.Wait()
}

// coldLead is how long before a window's start sendCold starts the
// window's senders, so that each sends at its instant rather than after
// the generator spawned the requests before it.
func coldLead(cfg GlobalConfig) time.Duration {
	return min(250*time.Millisecond, cfg.Window/4)
}

// sendCold runs the cold-key scenario: at each window's start, keys fresh
// clients send, at every PoP, one request then (2ms later) burst − 1 more
// at once to /g; half a window later the same to /p on the same edges (so
// each route's burst has the machine to itself).
func sendCold(ctx context.Context, cfg GlobalConfig, targets []*HTTPTarget) *globalColdReport {
	burst := coldBurst(cfg)
	rep := &globalColdReport{Keys: cfg.Keys, Burst: burst}
	wms := cfg.Window.Milliseconds()
	start := time.UnixMilli((time.Now().UnixMilli()/wms + 1) * wms)
	if time.Until(start) < time.Second {
		start = start.Add(cfg.Window)
	}
	var mu sync.Mutex
	firstG, firstP, burstG, burstP := NewLatency(), NewLatency(), NewLatency(), NewLatency()
	run := time.Now().UnixNano()
	for w := 0; w < cfg.Windows; w++ {
		due := start.Add(time.Duration(w) * cfg.Window)
		select {
		case <-ctx.Done():
			return rep
		case <-time.After(time.Until(due.Add(-coldLead(cfg)))):
		}
		win := &globalColdWindow{Window: w + 1, Offered: int64(burst * cfg.PoPs), Admitted: make([]int64, cfg.Keys)}
		rep.Windows = append(rep.Windows, win)
		var wg sync.WaitGroup
		for k := 0; k < cfg.Keys; k++ {
			client := &Client{ID: fmt.Sprintf("cold-%x-%d-%d", run, w, k)}
			for p, t := range targets {
				for _, path := range []string{"/g", "/p"} {
					due := due
					if path == "/p" {
						due = due.Add(cfg.Window / 2)
					}
					for i := 0; i < burst; i++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							at := due
							if i > 0 {
								at = due.Add(2 * time.Millisecond)
							}
							time.Sleep(time.Until(at))
							o := t.Do(ctx, p+i, client, &Route{Path: path})
							d := time.Since(at)
							mu.Lock()
							defer mu.Unlock()
							switch {
							case path == "/g" && i == 0:
								firstG.Record(d)
								if o != Admitted {
									rep.FirstNotAdmitted++
								}
							case i == 0:
								firstP.Record(d)
							}
							if path == "/g" {
								burstG.Record(d)
								switch o {
								case Admitted:
									win.Admitted[k]++
								case Rejected:
								default:
									win.Errors++
								}
							} else {
								burstP.Record(d)
							}
						}()
					}
				}
			}
		}
		wg.Wait()
		for _, n := range win.Admitted {
			win.MaxAbsPct = max(win.MaxAbsPct, 100*math.Abs(float64(n-cfg.Quantity))/float64(cfg.Quantity))
		}
		if cfg.Progress != nil {
			cfg.Progress(w+1, cfg.Windows)
		}
	}
	rep.FirstGlobal, rep.FirstPoP = firstG.Summary(), firstP.Summary()
	rep.BurstGlobal, rep.BurstPoP = burstG.Summary(), burstP.Summary()
	rep.AddedFirstP99ms = rep.FirstGlobal.P99 - rep.FirstPoP.P99
	return rep
}

// coldTables is the cold-key scenario's human view.
func (r *globalReport) coldTables() []*Table {
	c := r.Cold
	t := &Table{Title: fmt.Sprintf("Cold keys: %d fresh keys per window, each %d requests at once at each of %d PoPs (limit %d per %gs window); home store %.0f ms away (round trip)",
		c.Keys, c.Burst, len(r.PoPs), r.Limit, r.WindowS, r.RTTms),
		Header: []string{"window", "offered per key", "admitted per key (scope: global)", "max |vs limit| %", "errors"}}
	for _, w := range c.Windows {
		t.Add(w.Window, w.Offered, fmt.Sprint(w.Admitted), fmt.Sprintf("%.1f", w.MaxAbsPct), w.Errors)
	}
	l := &Table{Title: fmt.Sprintf("Latency of a cold key's first request at each PoP (then of every burst request); global p99 − per-PoP p99 = %+.3f ms (first request); first requests not admitted (scope: global): %d of %d",
		c.AddedFirstP99ms, c.FirstNotAdmitted, c.FirstGlobal.Count),
		Header: []string{"requests", "count", "p50 ms", "p99 ms", "max ms"}}
	for _, row := range []struct {
		name string
		s    Summary
	}{{"first, scope: global", c.FirstGlobal}, {"first, scope: pop", c.FirstPoP}, {"burst, scope: global", c.BurstGlobal}, {"burst, scope: pop", c.BurstPoP}} {
		l.Add(row.name, row.s.Count, row.s.P50, row.s.P99, row.s.Max)
	}
	return []*Table{t, l, r.opsTable()}
}

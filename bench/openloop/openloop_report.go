package openloop

import (
	"fmt"
	"slices"

	"github.com/poplimit/poplimit/bench"
)

// summarise folds the runs into one OpenSummary per rate and path (runs
// of every round merged), its ratios to the floor at that rate, and the
// medians over rounds of its p99 and of its p99's ratio to (and excess
// over) the floor's p99 in the same round.
func (rep *openLoopReport) summarise(rates []float64, paths []*openPath) {
	for _, rate := range rates {
		var floor *openSummary
		var group []*openSummary
		for _, p := range paths {
			s := &openSummary{pathRun: pathRun{Path: p.Name, Rate: rate, Round: rep.Rounds, counts: newOpenCounts()}}
			var p99s, ratios, added []float64
			for _, r := range rep.Runs {
				if r.Path != p.Name || r.Rate != rate {
					continue
				}
				s.counts.merge(r.counts)
				s.client, s.proxy = s.client.Add(r.client), s.proxy.Add(r.proxy)
				s.shard, s.server = s.shard.Add(r.shard), s.server.Add(r.server)
				p99s = append(p99s, r.Latency.P99)
				if f := rep.floorP99(rate, r.Round); f > 0 {
					ratios = append(ratios, r.Latency.P99/f)
					added = append(added, r.Latency.P99-f)
				}
			}
			s.fill()
			s.MedianP99MS, s.MedianP99Ratio, s.MedianAddedP99MS = median(p99s), median(ratios), median(added)
			if p.Name == pathFloor {
				floor = s
			}
			group = append(group, s)
		}
		for _, s := range group {
			if floor != nil && floor.Latency.P99 > 0 && floor.Latency.P50 > 0 {
				s.P50Ratio = s.Latency.P50 / floor.Latency.P50
				s.P99Ratio = s.Latency.P99 / floor.Latency.P99
				s.AddedP99MS = s.Latency.P99 - floor.Latency.P99
			}
		}
		rep.Summary = append(rep.Summary, group...)
	}
}

// floorP99 is the floor's p99 at rate in round (0 if not measured).
func (rep *openLoopReport) floorP99(rate float64, round int) float64 {
	for _, r := range rep.Runs {
		if r.Path == pathFloor && r.Rate == rate && r.Round == round {
			return r.Latency.P99
		}
	}
	return 0
}

// median returns the median of xs (the mean of the middle two for an even
// count; 0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	ys := slices.Clone(xs)
	slices.Sort(ys)
	if n := len(ys); n%2 == 0 {
		return (ys[n/2-1] + ys[n/2]) / 2
	}
	return ys[len(ys)/2]
}

// summary returns the summary of path at rate, nil if not measured.
func (rep *openLoopReport) summary(path string, rate float64) *openSummary {
	for _, s := range rep.Summary {
		if s.Path == path && s.Rate == rate {
			return s
		}
	}
	return nil
}

// saturatedBusy is the share of the machine's CPUs a path's processes
// used above which the targets call a rate saturated.
const saturatedBusy = 0.85

// targets checks the latency targets at the rate nearest 50% of
// capacity: the full decision's p99 at most 1.5× the floor's, mcproxy's
// added p99 at most nutcracker's.
func (rep *openLoopReport) targets() []string {
	var rates []float64
	for _, s := range rep.Summary {
		if !slices.Contains(rates, s.Rate) {
			rates = append(rates, s.Rate)
		}
	}
	if len(rates) == 0 || rep.Capacity <= 0 {
		return nil
	}
	half := rates[0]
	for _, r := range rates {
		if abs(r-rep.Capacity/2) < abs(half-rep.Capacity/2) {
			half = r
		}
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	var notes []string
	floor := rep.summary(pathFloor, half)
	if floor == nil {
		return nil
	}
	// A path that kept the machine near full measures its run queue: say
	// so beside every verdict at this rate.
	sat, busiest := "", floor
	for _, s := range rep.Summary {
		if s.Rate == half && s.Busy > busiest.Busy {
			busiest = s
		}
	}
	if busiest.Busy >= saturatedBusy {
		sat = fmt.Sprintf(" [saturated: %s kept the machine %.0f%% busy, so the ratios measure the run queue]", busiest.Path, 100*busiest.Busy)
	}
	for _, p := range []string{pathPopGomemcache, pathPopPipe, pathRLS} {
		if s := rep.summary(p, half); s != nil {
			own := ""
			if p == pathRLS && rep.RLSCapacity > 0 {
				own = fmt.Sprintf(", %.0f%% of rls's own %.0f/s", 100*half/rep.RLSCapacity, rep.RLSCapacity)
			}
			notes = append(notes, fmt.Sprintf("at %.0f/s (%.0f%% of capacity%s): %s p99 %.3f ms = %.2f× the floor's %.3f ms pooled (target ≤ 1.5×: %s); median over rounds %.2f× (%s)",
				half, 100*half/rep.Capacity, own, p, s.Latency.P99, s.P99Ratio, floor.Latency.P99, verdict(s.P99Ratio <= 1.5),
				s.MedianP99Ratio, verdict(s.MedianP99Ratio <= 1.5))+sat)
		}
	}
	mc, nc := rep.summary(pathMcproxy, half), rep.summary(pathNutcracker, half)
	if mc != nil && nc != nil {
		notes = append(notes, fmt.Sprintf("at %.0f/s: mcproxy adds %.3f ms p99 over the floor, nutcracker %.3f ms pooled (target mcproxy ≤ nutcracker: %s); median over rounds %.3f vs %.3f ms (%s)",
			half, mc.AddedP99MS, nc.AddedP99MS, verdict(mc.AddedP99MS <= nc.AddedP99MS),
			mc.MedianAddedP99MS, nc.MedianAddedP99MS, verdict(mc.MedianAddedP99MS <= nc.MedianAddedP99MS))+sat)
	}
	if hop := rep.summary(pathHop, half); hop != nil && hop.Latency.P99 > 0 {
		note := fmt.Sprintf("at %.0f/s: a bare TCP hop (one more process, nothing parsed) alone makes the p99 %.2f× the floor's pooled, median over rounds %.2f×", half, hop.P99Ratio, hop.MedianP99Ratio)
		for _, p := range []string{pathNutcracker, pathMcproxy, pathPopPipe} {
			if s := rep.summary(p, half); s != nil {
				note += fmt.Sprintf("; %s %.2f× the hop's (%+.3f ms)", p, s.Latency.P99/hop.Latency.P99, s.Latency.P99-hop.Latency.P99)
			}
		}
		notes = append(notes, note)
	}
	return notes
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// Tables returns the summary per rate and path, the per-request costs,
// and every run.
func (rep *openLoopReport) Tables() []*bench.Table {
	senders := fmt.Sprintf("%d senders (a fixed pool)", rep.Workers)
	if rep.MaxWorkers > rep.Workers {
		senders = fmt.Sprintf("%d senders growing to at most %d", rep.Workers, rep.MaxWorkers)
	}
	head := fmt.Sprintf("capacity %.0f/s (%s closed loop, %d conns), %s, %d Zipf keys, %d rounds × %gs per run in %gs slices (paths rotated), load average %s, %d CPUs",
		rep.Capacity, rep.CapacityPath, rep.Workers, senders, rep.Keys, rep.Rounds, rep.Seconds, rep.Slice, rep.LoadAvg, rep.NumCPU)
	lat := &bench.Table{Title: "Open loop: latency from the intended send time, ms (" + head + ")",
		Header: []string{"rate/s", "path", "sent", "p50", "p99", "p999", "p50 ÷ floor", "p99 ÷ floor", "p99 − floor", "median p99", "median p99 ÷ floor", "median p99 − floor", "service p50", "service p99", "late p99", "queued", "senders", "errors", "unsent"}}
	cost := &bench.Table{Title: "Open loop: cost per request (µs CPU user/system; context switches voluntary/involuntary)",
		Header: []string{"rate/s", "path", "client µs usr", "client µs sys", "proxy µs usr", "proxy µs sys", "proxy cs vol", "proxy cs invol", "shards µs usr", "shards µs sys", "shards cs vol", "server µs usr", "server µs sys", "machine busy %"}}
	for _, s := range rep.Summary {
		lat.Add(s.Rate, s.Path, s.Sent, s.Latency.P50, s.Latency.P99, s.Latency.P999, s.P50Ratio, s.P99Ratio, s.AddedP99MS,
			s.MedianP99MS, s.MedianP99Ratio, s.MedianAddedP99MS, s.Service.P50, s.Service.P99, s.Lateness.P99, s.Queued, s.Senders, s.Errors, s.Unsent)
		cost.Add(s.Rate, s.Path, s.Client.UserUS, s.Client.SystemUS, s.Proxy.UserUS, s.Proxy.SystemUS, s.Proxy.Voluntary,
			s.Proxy.Involuntary, s.Shards.UserUS, s.Shards.SystemUS, s.Shards.Voluntary, s.Server.UserUS, s.Server.SystemUS, 100*s.Busy)
	}
	runs := &bench.Table{Title: "Open loop: every run (one path in one round: its slices, rotated with the other paths' slices)",
		Header: []string{"rate/s", "round", "path", "sent", "p50", "p99", "p999", "p99 ÷ floor's this round", "service p99", "late p99", "queued", "senders", "errors"}}
	for _, r := range rep.Runs {
		ratio := 0.0
		if f := rep.floorP99(r.Rate, r.Round); f > 0 {
			ratio = r.Latency.P99 / f
		}
		runs.Add(r.Rate, r.Round, r.Path, r.Sent, r.Latency.P50, r.Latency.P99, r.Latency.P999, ratio, r.Service.P99, r.Lateness.P99, r.Queued, r.Senders, r.Errors)
	}
	notes := &bench.Table{Title: "Targets (at the rate nearest 50% of capacity) and paths", Header: []string{"note"}}
	for _, n := range rep.Notes {
		notes.Add(n)
	}
	for _, p := range rep.Paths {
		notes.Add(p.Name + ": " + p.Detail)
	}
	return []*bench.Table{lat, cost, notes, runs}
}

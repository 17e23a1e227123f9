package soak

import (
	"fmt"
	"strings"

	"github.com/poplimit/poplimit/bench"
)

// result is what RunSoak measured.
type result struct {
	PoP           string  `json:"pop"`
	Algorithm     string  `json:"algorithm"`
	Seconds       float64 `json:"seconds"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	Conns         int     `json:"conns"`
	Keys          uint64  `json:"keys"`
	// Capacity is the closed-loop decisions/s measured first (0 when the
	// rate was given); CapacityErrors and CapacityFailOpen happened during
	// that run, at full load, and do not count for the verdict.
	Capacity         float64 `json:"capacity_per_s"`
	CapacityErrors   int64   `json:"capacity_errors"`
	CapacityFailOpen int64   `json:"capacity_fail_open"`
	Rate             float64 `json:"rate_per_s"`
	Requests         int64   `json:"requests"`
	Admitted         int64   `json:"admitted"`
	Rejected         int64   `json:"rejected"`
	// Errors = Unavailable (503) + Failed (transport errors, other
	// statuses).
	Errors      int64 `json:"errors"`
	Unavailable int64 `json:"unavailable"`
	Failed      int64 `json:"failed"`
	// Shed requests found the generator's queue full (the generator could
	// not keep the rate); they were never sent.
	Shed     int64         `json:"shed"`
	Latency  bench.Summary `json:"latency_from_intended"`
	LagMs    float64       `json:"generator_lag_ms"`
	Counters counters      `json:"edge_counters"`
	// Tolerance (%) and Slack (fds, goroutines) of the verdict.
	Tolerance float64           `json:"tolerance_pct"`
	Slack     int64             `json:"slack"`
	Processes []soakProcResult  `json:"processes"`
	Samples   []soakSampleTable `json:"samples"`
	Pass      bool              `json:"pass"`
	Failures  []string          `json:"failures"`
}

// SoakSample is one sampling instant: seconds since the open loop
// started, the generator's requests and errors so far, the edges'
// fail-open total, and every process's resources (in the order of
// result.Processes).
type soakSample struct {
	At       float64
	Requests int64
	Errors   int64
	FailOpen int64
	Procs    []resources
	// Rest: taken with the traffic paused and nothing in flight.
	Rest bool
}

// SoakSampleTable is a SoakSample as the JSON carries it, by process name.
type soakSampleTable struct {
	At       float64              `json:"at_s"`
	Requests int64                `json:"requests"`
	Errors   int64                `json:"errors"`
	FailOpen int64                `json:"fail_open_total"`
	Procs    map[string]resources `json:"processes"`
	Rest     bool                 `json:"at_rest,omitempty"`
}

// SoakFigure is one resource of one process after warm-up.
type soakFigure struct {
	Start int64   `json:"start"`
	End   int64   `json:"end"`
	Max   int64   `json:"max"`
	Drift float64 `json:"drift_pct"`
	// OK: End is within the tolerance (and slack) of Start, or the figure
	// is not judged (threads, a process the verdict ignores, -1).
	OK bool `json:"ok"`
}

// SoakProcResult is one process's figures after warm-up.
type soakProcResult struct {
	Name       string     `json:"name"`
	Pid        int        `json:"pid"`
	Judged     bool       `json:"judged"`
	RSSKB      soakFigure `json:"rss_kb"`
	Goroutines soakFigure `json:"goroutines"`
	FDs        soakFigure `json:"fds"`
	Threads    soakFigure `json:"threads"`
}

// judge fills Processes, Samples, Pass and Failures from the samples.
func (r *result) judge(procs []soakProcess, samples []soakSample, cfg SoakConfig) {
	r.Pass = true
	fail := func(format string, args ...any) {
		r.Pass = false
		r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
	}
	for _, s := range samples {
		t := soakSampleTable{At: s.At, Requests: s.Requests, Errors: s.Errors, FailOpen: s.FailOpen, Procs: map[string]resources{}, Rest: s.Rest}
		for i, pr := range procs {
			t.Procs[pr.Name] = s.Procs[i]
		}
		r.Samples = append(r.Samples, t)
	}
	warm := len(samples) - 1
	for i, s := range samples {
		if s.At >= cfg.Warmup.Seconds() {
			warm = i
			break
		}
	}
	if len(samples)-warm < 2 {
		fail("%d samples after the warm-up: too short to judge", len(samples)-warm)
		warm = max(0, len(samples)-2)
	}
	// RSS and threads: the samples under traffic after the warm-up;
	// goroutines and fds: the two samples at rest when there are both
	// (under traffic they follow the work in flight), else the same.
	var busy, rest []soakSample
	for _, s := range samples[warm:] {
		if s.Rest {
			rest = append(rest, s)
		} else {
			busy = append(busy, s)
		}
	}
	if len(rest) < 2 {
		rest = busy
	}
	for i, pr := range procs {
		pick := func(from []soakSample, f func(resources) int64) []int64 {
			var v []int64
			for _, s := range from {
				v = append(v, f(s.Procs[i]))
			}
			return v
		}
		p := soakProcResult{Name: pr.Name, Pid: pr.Pid, Judged: pr.Judged,
			RSSKB:      figure(pick(busy, func(x resources) int64 { return x.RSSKB }), cfg.Tolerance, 0, pr.Judged),
			Goroutines: figure(pick(rest, func(x resources) int64 { return x.Goroutines }), cfg.Tolerance, cfg.Slack, pr.Judged),
			FDs:        figure(pick(rest, func(x resources) int64 { return x.FDs }), cfg.Tolerance, cfg.Slack, pr.Judged),
			Threads:    figure(pick(busy, func(x resources) int64 { return x.Threads }), 0, 0, false),
		}
		for _, f := range []struct {
			name string
			fig  soakFigure
		}{{"RSS (kB)", p.RSSKB}, {"goroutines", p.Goroutines}, {"fds", p.FDs}} {
			if !f.fig.OK {
				fail("%s: %s grew from %d to %d (%+.1f%%) after the warm-up", p.Name, f.name, f.fig.Start, f.fig.End, f.fig.Drift)
			}
		}
		r.Processes = append(r.Processes, p)
	}
	if r.Errors > 0 {
		fail("%d errors (%d 503, %d transport errors or other statuses)", r.Errors, r.Unavailable, r.Failed)
	}
	if r.Counters.FailOpen > 0 {
		fail("%d fail-open decisions", r.Counters.FailOpen)
	}
	if r.Counters.Unreadable > 0 {
		fail("%d edges' metrics unreadable: fail-open decisions not counted", r.Counters.Unreadable)
	}
}

// figure summarises a resource's values after warm-up; judged, it is OK
// when the end is within tol percent (plus slack) of the start. A value
// of -1 (unreadable) is skipped.
func figure(vals []int64, tol float64, slack int64, judged bool) soakFigure {
	f := soakFigure{Start: -1, End: -1, Max: -1, OK: true}
	for _, v := range vals {
		if v < 0 {
			continue
		}
		if f.Start < 0 {
			f.Start = v
		}
		f.End, f.Max = v, max(f.Max, v)
	}
	if f.Start > 0 {
		f.Drift = 100 * float64(f.End-f.Start) / float64(f.Start)
	}
	if judged && f.Start >= 0 {
		f.OK = float64(f.End) <= float64(f.Start)*(1+tol/100)+float64(slack)
	}
	return f
}

// Tables returns the human view.
func (r *result) Tables() []*bench.Table {
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	sum := &bench.Table{Title: fmt.Sprintf("Soak: %s, %s, %.0fs open loop (warm-up %.0fs), %d senders, %d Zipf identities",
		r.PoP, r.Algorithm, r.Seconds, r.WarmupSeconds, r.Conns, r.Keys),
		Header: []string{"capacity/s", "rate/s", "requests", "admitted", "rejected", "errors", "fail-open", "store errors", "shed", "p50 ms", "p99 ms", "p999 ms", "verdict"}}
	sum.Add(r.Capacity, r.Rate, r.Requests, r.Admitted, r.Rejected, r.Errors, r.Counters.FailOpen, r.Counters.StoreErrors, r.Shed,
		r.Latency.P50, r.Latency.P99, r.Latency.P999, verdict)
	procs := &bench.Table{Title: fmt.Sprintf("Per process after warm-up: start / end / max, drift %% (limit +%.0f%%; fds and goroutines +%d, at rest: traffic paused, nothing in flight)", r.Tolerance, r.Slack),
		Header: []string{"process", "pid", "RSS MB", "RSS drift %", "goroutines", "goroutines drift %", "fds", "fds drift %", "threads", "ok"}}
	mb := func(kb int64) string {
		if kb < 0 {
			return "-"
		}
		return formatFloat(float64(kb) / 1024)
	}
	three := func(f soakFigure, conv func(int64) string) string {
		return conv(f.Start) + " / " + conv(f.End) + " / " + conv(f.Max)
	}
	count := func(v int64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprint(v)
	}
	for _, p := range r.Processes {
		ok := "yes"
		switch {
		case !p.Judged:
			ok = "not judged"
		case !p.RSSKB.OK || !p.FDs.OK || !p.Goroutines.OK:
			ok = "NO"
		}
		procs.Add(p.Name, p.Pid, three(p.RSSKB, mb), p.RSSKB.Drift, three(p.Goroutines, count), p.Goroutines.Drift,
			three(p.FDs, count), p.FDs.Drift, count(p.Threads.Start)+" / "+count(p.Threads.End), ok)
	}
	tables := []*bench.Table{sum, procs, r.timeline()}
	if len(r.Failures) > 0 {
		f := &bench.Table{Title: "Why it failed", Header: []string{"failure"}}
		for _, s := range r.Failures {
			f.Add(s)
		}
		tables = append(tables, f)
	}
	return tables
}

// timeline shows about ten samples: the PoP's summed RSS, fds and
// goroutines (judged processes) and the running counts.
func (r *result) timeline() *bench.Table {
	t := &bench.Table{Title: "Timeline (judged processes summed)", Header: []string{"t s", "requests", "errors", "fail-open (edges' total)", "RSS MB", "fds", "goroutines"}}
	judged := map[string]bool{}
	for _, p := range r.Processes {
		judged[p.Name] = p.Judged
	}
	step := max(1, len(r.Samples)/10)
	for i, s := range r.Samples {
		if i%step != 0 && i != len(r.Samples)-1 {
			continue
		}
		var rss, fds, gs int64
		for name, x := range s.Procs {
			if judged[name] {
				rss += max(0, x.RSSKB)
				fds += max(0, x.FDs)
				gs += max(0, x.Goroutines)
			}
		}
		t.Add(s.At, s.Requests, s.Errors, s.FailOpen, float64(rss)/1024, fds, gs)
	}
	return t
}

// Summary is one line for the screen.
func (r *result) Summary() string {
	if r.Pass {
		return fmt.Sprintf("soak PASS: %d requests at %.0f/s, every process flat within %.0f%% after warm-up, zero errors, zero fail-open", r.Requests, r.Rate, r.Tolerance)
	}
	return "soak FAIL: " + strings.Join(r.Failures, "; ")
}

package openloop

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestRunOpenSendsTheSchedule: every intended request is sent exactly
// once, whatever the machine's speed (the grace period is long), and each
// is either on time (the worker slept for it) or queued.
func TestRunOpenSendsTheSchedule(t *testing.T) {
	var calls atomic.Int64
	s := openSchedule{Rate: 2000, Duration: 100 * time.Millisecond, Workers: 4, Keys: 100, ZipfS: 1.1, Seed: 1, Grace: time.Minute}
	c, err := runOpen(context.Background(), s, func(context.Context, int, uint64) error { calls.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent != 200 || calls.Load() != 200 || c.Unsent != 0 || c.Errors != 0 {
		t.Fatalf("sent %d calls %d unsent %d errors %d, want 200 200 0 0", c.Sent, calls.Load(), c.Unsent, c.Errors)
	}
	if got := c.Lateness.Summary().Count + c.Queued; got != 200 {
		t.Errorf("lateness samples %d + queued %d = %d, want 200", c.Lateness.Summary().Count, c.Queued, got)
	}
	if c.Latency.Summary().Count != 200 || c.Service.Summary().Count != 200 {
		t.Errorf("latency %d service %d samples, want 200", c.Latency.Summary().Count, c.Service.Summary().Count)
	}
}

// TestRunOpenNoCoordinatedOmission: one worker whose first request takes
// 30 ms. The requests intended meanwhile are not skipped: they go late,
// counted as queued, and their latency runs from their intended time, so
// it exceeds their (instant) service time.
func TestRunOpenNoCoordinatedOmission(t *testing.T) {
	var first atomic.Bool
	op := func(context.Context, int, uint64) error {
		if first.CompareAndSwap(false, true) {
			time.Sleep(30 * time.Millisecond)
			return errors.New("slow")
		}
		return nil
	}
	s := openSchedule{Rate: 1000, Duration: 50 * time.Millisecond, Workers: 1, Keys: 10, ZipfS: 1.1, Seed: 1, Grace: time.Minute}
	c, err := runOpen(context.Background(), s, op)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent != 50 || c.Errors != 1 {
		t.Fatalf("sent %d errors %d, want 50 and 1", c.Sent, c.Errors)
	}
	// Requests 1..28 were intended before the first one ended (≥ 30 ms
	// after request 0's intended time).
	if c.Queued < 28 {
		t.Errorf("queued %d, want ≥ 28", c.Queued)
	}
	// Request 1 (intended 1 ms after request 0) waited ≥ 29 ms.
	if c.Latency.Summary().Count < 2 || c.Latency.Quantile(100-100.0/50) < 29*time.Millisecond {
		t.Errorf("second-highest latency %v, want ≥ 29ms", c.Latency.Quantile(100-100.0/50))
	}
}

// TestRunOpenSlowRequestDelaysOnlyItsWorker: the first request blocks
// its worker until every other request of the schedule was answered. The
// other workers send all of them meanwhile (a worker does not own a fixed
// share of the schedule), so the blocked request is released; with a
// fixed share per worker its share would wait behind it and the release
// would time out.
func TestRunOpenSlowRequestDelaysOnlyItsWorker(t *testing.T) {
	const n = 200
	var first atomic.Bool
	var done atomic.Int64
	var released atomic.Bool
	op := func(context.Context, int, uint64) error {
		if first.CompareAndSwap(false, true) {
			deadline := time.Now().Add(10 * time.Second)
			for done.Load() < n-1 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			released.Store(done.Load() == n-1)
			return nil
		}
		done.Add(1)
		return nil
	}
	s := openSchedule{Rate: 2000, Duration: 100 * time.Millisecond, Workers: 4, Keys: 10, ZipfS: 1.1, Seed: 1, Grace: time.Minute}
	c, err := runOpen(context.Background(), s, op)
	if err != nil {
		t.Fatal(err)
	}
	if !released.Load() {
		t.Fatalf("the slow request waited 10s for the other %d: only %d were answered meanwhile", n-1, done.Load())
	}
	if c.Sent != n || c.Unsent != 0 || c.Latency.Summary().Count != n {
		t.Errorf("sent %d unsent %d latencies %d, want %d 0 %d", c.Sent, c.Unsent, c.Latency.Summary().Count, n, n)
	}
}

// TestRunOpenIntoAccumulates: successive runs into the same per-worker
// counts add up (the slices of one path and round).
func TestRunOpenIntoAccumulates(t *testing.T) {
	per := newWorkerCounts(3)
	s := openSchedule{Rate: 1000, Duration: 30 * time.Millisecond, Keys: 10, ZipfS: 1.1, Seed: 1, Grace: time.Minute}
	for range 3 {
		if err := runOpenInto(context.Background(), s, func(context.Context, int, uint64) error { return nil }, per); err != nil {
			t.Fatal(err)
		}
	}
	c := per.merged()
	if c.Sent != 90 || c.Latency.Summary().Count != 90 || c.Unsent != 0 || c.Seconds <= 0 {
		t.Errorf("sent %d latencies %d unsent %d seconds %v, want 90 90 0 > 0", c.Sent, c.Latency.Summary().Count, c.Unsent, c.Seconds)
	}
}

// TestMeasureRoundRotatesSlices: a round sends each path's Duration in
// slices, the paths taking turns, the first of each rotation shifted by
// one; every path gets its whole schedule.
func TestMeasureRoundRotatesSlices(t *testing.T) {
	var mu sync.Mutex
	var order []string
	var paths []*openPath
	for _, name := range []string{"a", "b", "c"} {
		paths = append(paths, &openPath{Name: name, Op: func(context.Context, int, uint64) error {
			mu.Lock()
			if len(order) == 0 || order[len(order)-1] != name {
				order = append(order, name)
			}
			mu.Unlock()
			return nil
		}})
	}
	cfg := OpenLoopConfig{Duration: 60 * time.Millisecond, Slice: 20 * time.Millisecond, Workers: 2}.withDefaults()
	runs, err := measureRound(context.Background(), cfg, 1000, 1, paths)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(order, ""), "abcbcacab"; got != want {
		t.Errorf("slices ran in order %q, want %q", got, want)
	}
	for i, r := range runs {
		if r.Path != paths[i].Name || r.Sent != 60 || r.Unsent != 0 || r.Latency.Count != 60 {
			t.Errorf("run %d: %s sent %d unsent %d latencies %d, want %s 60 0 60", i, r.Path, r.Sent, r.Unsent, r.Latency.Count, paths[i].Name)
		}
	}
}

// TestRunOpenGraceCutsTheRest: a path that never answers in time leaves
// the rest of the schedule unsent (counted), and the run ends.
func TestRunOpenGraceCutsTheRest(t *testing.T) {
	op := func(ctx context.Context, _ int, _ uint64) error {
		time.Sleep(40 * time.Millisecond)
		return nil
	}
	s := openSchedule{Rate: 1000, Duration: 20 * time.Millisecond, Workers: 2, Keys: 10, ZipfS: 1.1, Seed: 1, Grace: 10 * time.Millisecond}
	c, err := runOpen(context.Background(), s, op)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sent+c.Unsent != 20 || c.Unsent == 0 {
		t.Errorf("sent %d + unsent %d, want 20 with some unsent", c.Sent, c.Unsent)
	}
}

// TestRunOpenLoopTiny runs every path through real memcached, the bare
// hop, nutcracker, mcproxy and rls at one low rate for a short time.
func TestRunOpenLoopTiny(t *testing.T) {
	fixture.RequireMemcached(t)
	fixture.RequireNutcracker(t)
	rep, err := runOpenLoop(context.Background(), OpenLoopConfig{
		Rates: []float64{200}, Duration: 200 * time.Millisecond, Slice: 100 * time.Millisecond, Rounds: 2, Workers: 4, Keys: 100,
		CapacityDuration: 200 * time.Millisecond, McproxyBin: fixture.Binary(t, "mcproxy"), RLSBin: fixture.Binary(t, "rls"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Capacity <= 0 || rep.RLSCapacity <= 0 {
		t.Errorf("capacity %v, rls's own %v", rep.Capacity, rep.RLSCapacity)
	}
	if want := 2 * len(allOpenPaths); len(rep.Runs) != want {
		t.Fatalf("%d runs, want %d", len(rep.Runs), want)
	}
	for i, r := range rep.Runs { // interleaved: every path once per round
		if r.Path != allOpenPaths[i%len(allOpenPaths)] || r.Round != 1+i/len(allOpenPaths) {
			t.Errorf("run %d is %s round %d", i, r.Path, r.Round)
		}
	}
	if len(rep.Summary) != len(allOpenPaths) {
		t.Fatalf("%d summaries", len(rep.Summary))
	}
	for _, s := range rep.Summary {
		if s.Sent+s.Unsent != 80 || s.Errors != 0 {
			t.Errorf("%s: sent %d unsent %d errors %d, want 80 requests, no error", s.Path, s.Sent, s.Unsent, s.Errors)
		}
		if s.Busy <= 0 || s.Busy > 1.5 {
			t.Errorf("%s: machine busy %v, want a share of the CPUs", s.Path, s.Busy)
		}
		if s.P99Ratio <= 0 || s.MedianP99Ratio <= 0 || s.MedianP99MS <= 0 {
			t.Errorf("%s: p99 ratio to the floor %v, median over rounds %v (of p99 %v)", s.Path, s.P99Ratio, s.MedianP99Ratio, s.MedianP99MS)
		}
		if s.Path == pathFloor && (s.MedianP99Ratio != 1 || s.MedianAddedP99MS != 0) {
			t.Errorf("floor: median ratio to itself %v, added %v", s.MedianP99Ratio, s.MedianAddedP99MS)
		}
		if s.Path != pathGenerator && s.Path != pathFloor && s.Proxy.UserUS+s.Proxy.SystemUS+s.Proxy.Voluntary == 0 {
			t.Errorf("%s: nothing charged to the proxy: %+v", s.Path, s.Proxy)
		}
		if served := s.Server.UserUS + s.Server.SystemUS + s.Server.Voluntary; (s.Path == pathRLS) != (served > 0) {
			t.Errorf("%s: charged to the server %+v", s.Path, s.Server)
		}
	}
	if len(rep.Notes) != 5 || !strings.Contains(rep.Notes[4], "bare TCP hop") {
		t.Errorf("notes %q, want the four target checks and the hop's bound", rep.Notes)
	}
	if len(rep.Tables()) != 4 {
		t.Error("tables")
	}
}

// TestRunOpenLoopBadConfig: bad rates and paths are errors before anything
// starts.
func TestRunOpenLoopBadConfig(t *testing.T) {
	if _, err := runOpenLoop(context.Background(), OpenLoopConfig{Rates: []float64{-1}}); !errors.Is(err, errOpenLoop) {
		t.Errorf("negative rate: %v", err)
	}
	if _, err := runOpenLoop(context.Background(), OpenLoopConfig{Paths: []string{"nope"}}); !errors.Is(err, errOpenLoop) {
		t.Error("unknown path: no error")
	}
}

// TestMedian: odd and even counts, unsorted input left as it was.
func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2}
	if m := median(xs); m != 2 || xs[0] != 3 {
		t.Errorf("median %v of %v", m, xs)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median %v, want 2.5", m)
	}
	if m := median(nil); m != 0 {
		t.Errorf("median of none %v", m)
	}
}

// TestRunOpenGrowsTheSenders: the first 20 requests each block until 20
// are in flight at once. Starting from 2 senders, the pool grows (one
// more whenever a sender is about to send with none other free), so the
// 20 are in flight together and none waits for the generator; a fixed
// pool (MaxWorkers = Workers) and a capped one never have more in
// flight than their size, and the requests behind them queue.
func TestRunOpenGrowsTheSenders(t *testing.T) {
	const blockers = 20
	run := func(workers, maxWorkers int) (*openCounts, int64) {
		var calls, inFlight, most atomic.Int64
		gate := make(chan struct{})
		var once sync.Once
		op := func(context.Context, int, uint64) error {
			if calls.Add(1) > blockers {
				return nil
			}
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if n == blockers {
				once.Do(func() { close(gate) })
			}
			select {
			case <-gate:
			case <-time.After(150 * time.Millisecond):
			}
			return nil
		}
		s := openSchedule{Rate: 1000, Duration: 100 * time.Millisecond, Workers: workers, MaxWorkers: maxWorkers,
			Keys: 10, ZipfS: 1.1, Seed: 1, Grace: time.Minute}
		c, err := runOpen(context.Background(), s, op)
		if err != nil {
			t.Fatal(err)
		}
		if c.Sent != 100 || c.Unsent != 0 {
			t.Fatalf("sent %d unsent %d, want 100 0", c.Sent, c.Unsent)
		}
		return c, most.Load()
	}
	c, most := run(2, 64)
	if most != blockers || c.Senders < blockers || c.Senders > 64 {
		t.Errorf("growing pool: %d in flight at most, %d senders, want %d and %d..64", most, c.Senders, blockers, blockers)
	}
	for _, max := range []int{2, 8} {
		c, most := run(2, max)
		if most > int64(max) || c.Senders > max || c.Queued == 0 {
			t.Errorf("pool of at most %d: %d in flight at most, %d senders, %d queued; want ≤ %d, ≤ %d, > 0", max, most, c.Senders, c.Queued, max, max)
		}
	}
}

// TestTargetsSayWhenSaturated: a verdict at a rate where a path kept the
// machine near full carries the saturation caveat, and not otherwise.
func TestTargetsSayWhenSaturated(t *testing.T) {
	sum := func(path string, p99, ratio, busy float64) *openSummary {
		s := &openSummary{pathRun: pathRun{Path: path, Rate: 1000, Busy: busy}, P99Ratio: ratio, MedianP99Ratio: ratio}
		s.Latency.P99 = p99
		return s
	}
	for _, tc := range []struct {
		busy float64
		want bool
	}{{0.40, false}, {0.84, false}, {0.91, true}} {
		rep := &openLoopReport{Capacity: 2000, Summary: []*openSummary{
			sum(pathFloor, 1, 1, 0.3), sum(pathMcproxy, 2, 2, 0.5), sum(pathNutcracker, 2, 2, 0.5), sum(pathPopPipe, 1.2, 1.2, tc.busy)}}
		notes := rep.targets()
		if len(notes) != 2 {
			t.Fatalf("busy %v: notes %q, want pop-pipe's and mcproxy's", tc.busy, notes)
		}
		for _, n := range notes {
			if got := strings.Contains(n, "saturated: pop-pipe kept the machine"); got != tc.want {
				t.Errorf("busy %v: %q: saturation caveat %v, want %v", tc.busy, n, got, tc.want)
			}
		}
	}
}

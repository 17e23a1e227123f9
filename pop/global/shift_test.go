package global_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop/global"
)

// slowHome is a home store that answers every write (a claim's incr and
// add) d late: reachable, but slower than a request's wait.
type slowHome struct {
	counter.Store
	d time.Duration
}

func (s *slowHome) Add(ctx context.Context, k string, v []byte, ttl time.Duration) error {
	time.Sleep(s.d)
	return s.Store.Add(ctx, k, v, ttl)
}

func (s *slowHome) Incr(ctx context.Context, k string, d uint64) (uint64, error) {
	time.Sleep(s.d)
	return s.Store.Incr(ctx, k, d)
}

// shiftRun is popbench global's scenario in process, on synthetic time:
// PoPs with their own memory store share home; one client sends perStep
// requests every 100ms for windows windows of lim, split over the PoPs by
// smooth weighted round robin, before then after (from the middle of the
// run on). Refills finish between steps.
type shiftRun struct {
	lim            counter.Limit
	cfg            global.Config
	before, after  []float64
	perStep, wins  int
	admitted       []int64 // per window
	falseRefusals  float64
	waited, timedQ float64
}

func (r *shiftRun) run(t *testing.T, home counter.Store) {
	t.Helper()
	pops := len(r.before)
	var hs []*global.Home
	var as []*global.Allower
	var regs []*prometheus.Registry
	for p := 0; p < pops; p++ {
		reg := prometheus.NewRegistry()
		m, err := global.NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		c := r.cfg
		c.Local, c.Home, c.PoPs, c.Metrics = memstore.New(), home, pops, m
		h, err := global.NewHome(c)
		if err != nil {
			t.Fatal(err)
		}
		a, err := h.New(r.lim, global.FallbackShare)
		if err != nil {
			t.Fatal(err)
		}
		hs, as, regs = append(hs, h), append(as, a), append(regs, reg)
	}
	wms := r.lim.Window.Milliseconds()
	start := time.UnixMilli((time.Now().UnixMilli()/wms - 5) * wms) // a boundary in the past
	const step = 100 * time.Millisecond
	steps := int(time.Duration(r.wins) * r.lim.Window / step)
	credit := make([]float64, pops)
	r.admitted = make([]int64, r.wins)
	key := fmt.Sprintf("roamer{%s}", t.Name())
	for s := 0; s < steps; s++ {
		now := start.Add(time.Duration(s) * step)
		split := r.before
		if s >= steps/2 {
			split = r.after
		}
		for i := 0; i < r.perStep; i++ {
			p := pick(credit, split)
			res, err := as[p].AllowN(context.Background(), key, now, 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				r.admitted[now.Sub(start)/r.lim.Window]++
			}
		}
		for _, h := range hs {
			h.Wait()
		}
	}
	for _, reg := range regs {
		r.falseRefusals += gather(t, reg, "poplimit_global_false_refusals_total", "")
		r.waited += gather(t, reg, "poplimit_global_decisions_total", "waited")
		r.timedQ += gather(t, reg, "poplimit_global_decisions_total", "timeout")
	}
}

// pick is smooth weighted round robin (popbench's split).
func pick(credit, weights []float64) int {
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

// gather sums a counter of reg (with path, only that decision path).
func gather(t *testing.T, reg *prometheus.Registry, name, path string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := path == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == "path" && l.GetValue() == path)
			}
			if match {
				v += counterValue(m)
			}
		}
	}
	return v
}

// TestShiftingTrafficAdmitsTheLimitEachWindow: one client at twice its
// limit over three PoPs, its split moving from 70/20/10 to 10/20/70 in
// the middle window, gets the limit ± 3% in every window whether the home
// store answers within the wait (then with no false refusal) or later
// than it: requests whose wait runs out are then admitted on their claim
// in flight (within the room the worker knows the window has), never on
// the PoP's fallback share, and the few past that room near the window's
// end are refused.
func TestShiftingTrafficAdmitsTheLimitEachWindow(t *testing.T) {
	lim := counter.Limit{Name: "g", Algorithm: counter.FixedWindow, Quantity: 500, Window: 10 * time.Second}
	for _, tc := range []struct {
		name     string
		home     counter.Store
		wait     time.Duration
		refusals float64 // false refusals allowed
	}{
		{"home answers within the wait", memstore.New(), 0, 0},
		{"home answers after the wait", &slowHome{Store: memstore.New(), d: 10 * time.Millisecond}, time.Millisecond, float64(lim.Quantity) * 3 / 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &shiftRun{lim: lim, cfg: global.Config{Wait: tc.wait}, before: []float64{0.7, 0.2, 0.1}, after: []float64{0.1, 0.2, 0.7}, perStep: 10, wins: 3}
			r.run(t, tc.home)
			t.Logf("admitted per window %v for %d; waited %v, timed out %v, false refusals %v", r.admitted, lim.Quantity, r.waited, r.timedQ, r.falseRefusals)
			for w, n := range r.admitted {
				if n < lim.Quantity*97/100 || n > lim.Quantity*103/100 {
					t.Errorf("window %d admitted %d, want %d ± 3%%", w+1, n, lim.Quantity)
				}
			}
			if r.falseRefusals > tc.refusals {
				t.Errorf("%v false refusals with the home store answering, want at most %v", r.falseRefusals, tc.refusals)
			}
		})
	}
}

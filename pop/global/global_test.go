package global_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
	"github.com/poplimit/poplimit/pop/global"
)

// flaky is a Store whose every call fails while down is set.
type flaky struct {
	counter.Store
	down atomic.Bool
}

var errDown = errors.New("test: home store down")

func (f *flaky) Add(ctx context.Context, k string, v []byte, ttl time.Duration) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.Add(ctx, k, v, ttl)
}

func (f *flaky) Incr(ctx context.Context, k string, d uint64) (uint64, error) {
	if f.down.Load() {
		return 0, errDown
	}
	return f.Store.Incr(ctx, k, d)
}

var fixed = counter.Limit{Name: "g", Algorithm: counter.FixedWindow, Quantity: 100, Window: time.Minute}

// base is an instant 10s into a minute window.
var base = time.UnixMilli((time.Now().UnixMilli()/60000)*60000 + 10000)

func newPoPs(t *testing.T, home counter.Store, pops int, cfg global.Config, fb global.Fallback) ([]*global.Home, []*global.Allower) {
	t.Helper()
	var hs []*global.Home
	var as []*global.Allower
	for i := 0; i < pops; i++ {
		c := cfg
		c.Local, c.Home, c.PoPs = memstore.New(), home, pops
		h, err := global.NewHome(c)
		if err != nil {
			t.Fatal(err)
		}
		a, err := h.New(fixed, fb)
		if err != nil {
			t.Fatal(err)
		}
		hs, as = append(hs, h), append(as, a)
	}
	return hs, as
}

// drive offers n requests per PoP per step, steps times, 100ms apart,
// waiting for refills between steps; it returns the admitted per PoP.
func drive(t *testing.T, hs []*global.Home, as []*global.Allower, per []int, steps int) []int {
	return driveFrom(t, base, hs, as, per, steps)
}

func driveFrom(t *testing.T, from time.Time, hs []*global.Home, as []*global.Allower, per []int, steps int) []int {
	t.Helper()
	ctx := context.Background()
	got := make([]int, len(as))
	for s := 0; s < steps; s++ {
		now := from.Add(time.Duration(s) * 100 * time.Millisecond)
		for i, a := range as {
			for j := 0; j < per[i]; j++ {
				r, err := a.AllowN(ctx, "r{client}", now, 1)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					got[i]++
				} else if r.RetryAfter <= 0 {
					t.Fatalf("rejected without Retry-After: %+v", r)
				}
			}
		}
		for _, h := range hs {
			h.Wait()
		}
	}
	return got
}

func TestGlobalLimitAcrossPoPsIsExact(t *testing.T) {
	home := memstore.New()
	hs, as := newPoPs(t, home, 3, global.Config{}, global.FallbackShare)
	got := drive(t, hs, as, []int{7, 2, 1}, 40) // 400 offered for 100
	total := got[0] + got[1] + got[2]
	if total != int(fixed.Quantity) {
		t.Fatalf("admitted %v = %d, want exactly %d", got, total, fixed.Quantity)
	}
	if got[0] <= got[1] || got[1] < got[2] {
		t.Errorf("admissions %v do not follow the 70/20/10 traffic", got)
	}
	r, err := as[2].AllowN(context.Background(), "r{client}", base.Add(time.Second), 1)
	if err != nil || r.Allowed || r.RetryAfter != r.Reset {
		t.Errorf("after the window's count is used up: %+v, %v; want a rejection until the window ends", r, err)
	}
	for _, h := range hs {
		if s := h.Status(); !s.Up {
			t.Errorf("status %+v, want up", s)
		}
	}
}

func TestConcurrentWorkersNeverOverAdmit(t *testing.T) {
	home := memstore.New()
	local := memstore.New()
	var hs []*global.Home
	var as []*global.Allower
	for w := 0; w < 4; w++ { // 4 workers of one PoP share the local store
		h, err := global.NewHome(global.Config{Local: local, Home: home, Workers: 4})
		if err != nil {
			t.Fatal(err)
		}
		a, err := h.New(fixed, global.FallbackShare)
		if err != nil {
			t.Fatal(err)
		}
		hs, as = append(hs, h), append(as, a)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			a := as[g%len(as)]
			for i := 0; i < 200; i++ {
				r, err := a.AllowN(context.Background(), "r{k}", base.Add(time.Duration(i)*time.Millisecond), 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	for _, h := range hs {
		h.Wait()
	}
	if n := admitted.Load(); n > fixed.Quantity {
		t.Fatalf("admitted %d of %d", n, fixed.Quantity)
	}
}

func TestHomeDownFallsBackToShareAndRecovers(t *testing.T) {
	home := &flaky{Store: memstore.New()}
	home.down.Store(true)
	hs, as := newPoPs(t, home, 4, global.Config{RetryEvery: 50 * time.Millisecond}, global.FallbackShare)
	got := drive(t, hs, as, []int{10, 10, 0, 0}, 5)
	for i, want := range []int{25, 25, 0, 0} { // share = 100 / 4
		if got[i] != want {
			t.Errorf("PoP %d admitted %d while the home store was down, want its share %d", i, got[i], want)
		}
	}
	if s := hs[0].Status(); s.Up || s.Err == "" || len(hs[0].HealthReasons()) != 1 {
		t.Errorf("status %+v while down", s)
	}
	home.down.Store(false)
	// Recovery: the next claims of PoPs 0 and 1 charge their fallback
	// debts (25 each) to the global count, so 50 are left for the window.
	// (A debt charged once the count is used up no longer reduces the
	// others: the bound's Σ S term. Here PoPs 0 and 1 claim first.)
	more := driveFrom(t, base.Add(time.Second), hs[:2], as[:2], []int{1, 1}, 1)
	rest := driveFrom(t, base.Add(2*time.Second), hs, as, []int{10, 10, 10, 10}, 30)
	if sum := more[0] + more[1] + rest[0] + rest[1] + rest[2] + rest[3]; sum != 50 {
		t.Errorf("after recovery the PoPs admitted %v then %v = %d, want 50 (100 − the shares)", more, rest, sum)
	}
	if s := hs[2].Status(); !s.Up {
		t.Errorf("status %+v after recovery", s)
	}
}

func TestFallbackOpenAndClosed(t *testing.T) {
	for _, tc := range []struct {
		fb   global.Fallback
		want bool
	}{{global.FallbackOpen, true}, {global.FallbackClosed, false}} {
		t.Run(tc.fb.String(), func(t *testing.T) {
			home := &flaky{Store: memstore.New()}
			home.down.Store(true)
			hs, as := newPoPs(t, home, 1, global.Config{}, tc.fb)
			drive(t, hs, as, []int{1}, 1) // the first refill fails: down
			r, err := as[0].AllowN(context.Background(), "r{client}", base.Add(time.Second), 1)
			if err != nil || r.Allowed != tc.want {
				t.Fatalf("%v: %+v, %v; want allowed %v", tc.fb, r, err, tc.want)
			}
		})
	}
}

// gated is a home Store whose Incr waits until open is closed.
type gated struct {
	counter.Store
	open chan struct{}
}

func (g *gated) Incr(ctx context.Context, k string, d uint64) (uint64, error) {
	<-g.open
	return g.Store.Incr(ctx, k, d)
}

func TestOverdraftAdmitsWhilePoolIsEmpty(t *testing.T) {
	home := &gated{Store: memstore.New(), open: make(chan struct{})}
	// The refill waits on the gate: the overdraft admits at once, then
	// requests wait (10ms) and FallbackClosed rejects them.
	hs, as := newPoPs(t, home, 1, global.Config{Overdraft: 3, Wait: 10 * time.Millisecond}, global.FallbackClosed)
	ctx := context.Background()
	n := 0
	for i := 0; i < 5; i++ {
		r, err := as[0].AllowN(ctx, "r{x}", base, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			n++
		}
	}
	close(home.open)
	hs[0].Wait()
	if n != 3 {
		t.Fatalf("admitted %d on an empty pool, want the overdraft 3", n)
	}
}

func TestUndoReturnsToThePool(t *testing.T) {
	hs, as := newPoPs(t, memstore.New(), 1, global.Config{}, global.FallbackShare)
	ctx := context.Background()
	as[0].AllowN(ctx, "r{u}", base, 1)
	hs[0].Wait()
	r1, _ := as[0].AllowN(ctx, "r{u}", base, 1)
	if !r1.Allowed {
		t.Fatalf("%+v after a refill", r1)
	}
	if err := as[0].Undo(ctx, "r{u}", base, 1); err != nil {
		t.Fatal(err)
	}
	r2, _ := as[0].AllowN(ctx, "r{u}", base, 1)
	if !r2.Allowed || r2.Remaining != r1.Remaining {
		t.Errorf("after Undo: remaining %d, want %d again", r2.Remaining, r1.Remaining)
	}
	hs[0].Wait()
}

func TestBadConfigAndLimits(t *testing.T) {
	m := memstore.New()
	if _, err := global.NewHome(global.Config{Local: m}); !errors.Is(err, global.ErrConfig) {
		t.Errorf("no home store: %v", err)
	}
	if _, err := global.NewHome(global.Config{Local: m, Home: m, Overdraft: -1}); !errors.Is(err, global.ErrConfig) {
		t.Errorf("negative overdraft: %v", err)
	}
	h, err := global.NewHome(global.Config{Local: m, Home: m})
	if err != nil {
		t.Fatal(err)
	}
	sl := fixed
	sl.Algorithm = counter.SlidingWindow
	if _, err := h.New(sl, global.FallbackShare); !errors.Is(err, global.ErrAlgorithm) {
		t.Errorf("sliding window: %v", err)
	}
	if _, err := h.New(fixed, global.Fallback(9)); !errors.Is(err, global.ErrConfig) {
		t.Errorf("fallback 9: %v", err)
	}
	a, _ := h.New(fixed, global.FallbackShare)
	if _, err := a.AllowN(context.Background(), "r{x}", base, 0); !errors.Is(err, counter.ErrBadCost) {
		t.Errorf("n=0: %v", err)
	}
	if r, err := a.AllowN(context.Background(), "r{x}", base, 101); err != nil || r.Allowed || r.RetryAfter != counter.Never {
		t.Errorf("n above the limit: %+v %v", r, err)
	}
}

// TestClockSkewStaysWithinTheBound: PoP 1's clock runs skew ahead; per
// window of true time the PoPs admit at most L + Σ rate_p·|skew_p| (the
// package doc's bound). The figures are logged for each skew.
func TestClockSkewStaysWithinTheBound(t *testing.T) {
	lim := counter.Limit{Name: "s", Algorithm: counter.FixedWindow, Quantity: 100, Window: 10 * time.Second}
	start := time.UnixMilli((time.Now().UnixMilli()/10000 + 1) * 10000) // a window boundary
	for _, skew := range []time.Duration{0, 100 * time.Millisecond, time.Second} {
		home := memstore.New()
		var hs []*global.Home
		var as []*global.Allower
		for p := 0; p < 2; p++ {
			h, err := global.NewHome(global.Config{Local: memstore.New(), Home: home, PoPs: 2})
			if err != nil {
				t.Fatal(err)
			}
			a, err := h.New(lim, global.FallbackShare)
			if err != nil {
				t.Fatal(err)
			}
			hs, as = append(hs, h), append(as, a)
		}
		const perStep, step = 2, 100 * time.Millisecond // 20/s at each PoP: 400 per window for 100
		admitted := make([]int64, 4)
		for s := 0; s < 300; s++ {
			now := start.Add(time.Duration(s) * step)
			for p, a := range as {
				clock := now
				if p == 1 {
					clock = now.Add(skew)
				}
				for i := 0; i < perStep; i++ {
					r, err := a.AllowN(context.Background(), "r{c}", clock, 1)
					if err != nil {
						t.Fatal(err)
					}
					if r.Allowed {
						admitted[now.Sub(start)/lim.Window]++
					}
				}
			}
			for _, h := range hs {
				h.Wait()
			}
		}
		bound := lim.Quantity + int64(20*skew.Seconds()+0.5)
		t.Logf("skew %v: admitted per true window %v (bound %d)", skew, admitted[:3], bound)
		for w, n := range admitted[:3] {
			if n > bound {
				t.Errorf("skew %v: window %d admitted %d, bound L + rate·skew = %d", skew, w, n, bound)
			}
		}
	}
}

func TestMetricsCountClaims(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := global.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := global.NewMetrics(reg); err == nil {
		t.Error("a second registration in one registry succeeded")
	}
	hs, as := newPoPs(t, memstore.New(), 1, global.Config{Metrics: m}, global.FallbackShare)
	drive(t, hs, as, []int{5}, 5)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			got[mf.GetName()] += mm.GetCounter().GetValue() + mm.GetGauge().GetValue()
		}
	}
	if got["poplimit_global_tokens_claimed_total"] == 0 || got["poplimit_global_home_up"] != 1 || got["poplimit_global_decisions_total"] != 25 {
		t.Errorf("metrics %v", got)
	}
}

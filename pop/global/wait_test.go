package global_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/pop/global"
)

// realPoPs is PoPs over real memcached: one home memcached, one memcached
// per PoP shared by that PoP's workers (an Allower each, with its own
// Home and metrics).
type realPoPs struct {
	home    *procs.Memcached
	homes   [][]*global.Home
	allow   [][]*global.Allower
	metrics [][]*prometheus.Registry
}

func newRealPoPs(t *testing.T, pops, workers int, lim counter.Limit, cfg global.Config, fb global.Fallback) *realPoPs {
	t.Helper()
	return newRealPoPsHome(t, pops, workers, lim, cfg, fb, nil)
}

// newRealPoPsHome is newRealPoPs with every worker's home store wrapped by
// wrap (nil: as is).
func newRealPoPsHome(t *testing.T, pops, workers int, lim counter.Limit, cfg global.Config, fb global.Fallback, wrap func(counter.Store) counter.Store) *realPoPs {
	t.Helper()
	ms := fixture.Memcached(t, 1+pops)
	store := func(addr string) counter.Store {
		s := memcached.NewPipeStore(memcached.PipeConfig{Addr: addr, Timeout: 5 * time.Second})
		t.Cleanup(func() { s.Close() })
		return s
	}
	r := &realPoPs{home: ms[0]}
	for p := 0; p < pops; p++ {
		local := store(ms[1+p].Addr)
		var hs []*global.Home
		var as []*global.Allower
		var regs []*prometheus.Registry
		for w := 0; w < workers; w++ {
			reg := prometheus.NewRegistry()
			m, err := global.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			c := cfg
			c.Local, c.Home, c.PoPs, c.Workers, c.Metrics = local, store(ms[0].Addr), pops, workers, m
			if wrap != nil {
				c.Home = wrap(c.Home)
			}
			h, err := global.NewHome(c)
			if err != nil {
				t.Fatal(err)
			}
			a, err := h.New(lim, fb)
			if err != nil {
				t.Fatal(err)
			}
			hs, as, regs = append(hs, h), append(as, a), append(regs, reg)
		}
		r.homes, r.allow, r.metrics = append(r.homes, hs), append(r.allow, as), append(r.metrics, regs)
	}
	t.Cleanup(r.wait)
	return r
}

func (r *realPoPs) wait() {
	for _, hs := range r.homes {
		for _, h := range hs {
			h.Wait()
		}
	}
}

// counterSum sums a counter over every worker's registry.
func (r *realPoPs) counterSum(t *testing.T, name string) float64 {
	t.Helper()
	var v float64
	for _, regs := range r.metrics {
		for _, reg := range regs {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() == name {
					for _, m := range mf.GetMetric() {
						v += counterValue(m)
					}
				}
			}
		}
	}
	return v
}

func counterValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

// minute is a one-minute fixed window.
var minute = counter.Limit{Name: "g", Algorithm: counter.FixedWindow, Quantity: 200, Window: time.Minute}

// midWindow is an instant 10s into the current minute window: a test
// that would straddle a boundary waits for it.
func midWindow() time.Time {
	fixture.AwayFromBoundary(time.Minute, 10*time.Second)
	return time.Now().Truncate(time.Minute).Add(10 * time.Second)
}

// TestColdKeyFirstRequestsAreAdmitted: a key never seen is admitted on its
// first request (and the next ones, sequential) at every worker of every
// PoP, as long as the home store answers.
func TestColdKeyFirstRequestsAreAdmitted(t *testing.T) {
	for _, tc := range []struct {
		name           string
		pops, workers  int
		keys, requests int
	}{
		{"one PoP, one worker", 1, 1, 5, 8},
		{"two PoPs of two workers", 2, 2, 5, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRealPoPs(t, tc.pops, tc.workers, minute, global.Config{}, global.FallbackShare)
			now := midWindow()
			for k := 0; k < tc.keys; k++ {
				key := fmt.Sprintf("cold%d{%s}", k, t.Name())
				for p, as := range r.allow {
					for w, a := range as {
						for i := 0; i < tc.requests; i++ {
							res, err := a.AllowN(context.Background(), key, now, 1)
							if err != nil {
								t.Fatal(err)
							}
							if !res.Allowed {
								t.Fatalf("key %s, PoP %d worker %d: request %d refused (%+v) with the home store up", key, p, w, i+1, res)
							}
						}
					}
				}
			}
			if n := r.counterSum(t, "poplimit_global_false_refusals_total"); n != 0 {
				t.Errorf("%v false refusals counted", n)
			}
		})
	}
}

// TestColdBurstAcrossTwoPoPsAdmitsTheLimit: 600 requests at once at each
// of two PoPs (two workers each) on a fresh key limited to 200 per minute
// admit 200 ± 3%, never more than 200, and none is refused while the
// window's count has room.
func TestColdBurstAcrossTwoPoPsAdmitsTheLimit(t *testing.T) {
	for round := 0; round < 3; round++ {
		// Waits and home calls longer than a claim takes under the race
		// detector on a loaded host: this is about shared claims; the
		// timeout path has its own tests.
		r := newRealPoPs(t, 2, 2, minute, global.Config{Wait: 3 * time.Second, HomeTimeout: 5 * time.Second}, global.FallbackShare)
		now := midWindow()
		key := fmt.Sprintf("burst{%d}", round)
		var admitted atomic.Int64
		var start, wg sync.WaitGroup
		start.Add(1)
		for _, as := range r.allow {
			for _, a := range as {
				for g := 0; g < 300; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						start.Wait()
						res, err := a.AllowN(context.Background(), key, now, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if res.Allowed {
							admitted.Add(1)
						}
					}()
				}
			}
		}
		start.Done()
		wg.Wait()
		r.wait()
		n := admitted.Load()
		falseRefusals := r.counterSum(t, "poplimit_global_false_refusals_total")
		t.Logf("round %d: admitted %d of 1,200 for a limit of 200; false refusals %v; timeouts %v waited %v", round, n, falseRefusals, r.pathSum(t, "timeout"), r.pathSum(t, "waited"))
		if n > minute.Quantity || n < minute.Quantity*97/100 {
			t.Errorf("round %d: admitted %d, want 200 ± 3%% and at most 200", round, n)
		}
		// The metric judges by the home count a worker last read, which a
		// loaded machine leaves stale: a refusal is false only if the
		// window's quota was not used up.
		if falseRefusals != 0 && n < minute.Quantity {
			t.Errorf("round %d: %v refusals while the window's count had room (admitted %d of %d)", round, falseRefusals, n, minute.Quantity)
		}
	}
}

// TestClaimTimeoutHandsOverToFailMode: with the home memcached stopped
// (SIGSTOP: it accepts nothing, answers nothing), a request on a fresh key
// waits Config.Wait and no longer, then the fail mode decides; a request
// whose context's deadline comes sooner gets the fail mode's answer before
// it; a cancelled one returns the context's error.
func TestClaimTimeoutHandsOverToFailMode(t *testing.T) {
	const wait = 150 * time.Millisecond
	for _, tc := range []struct {
		fb      global.Fallback
		admit   bool
		refusal bool // counted as a false refusal (the claims return a count under the limit)
	}{
		{global.FallbackShare, true, false},
		{global.FallbackOpen, true, false},
		{global.FallbackClosed, false, true},
	} {
		t.Run(tc.fb.String(), func(t *testing.T) {
			r := newRealPoPs(t, 2, 1, minute, global.Config{Wait: wait, HomeTimeout: 2 * time.Second}, tc.fb)
			now := midWindow()
			if err := r.home.Pause(); err != nil {
				t.Fatal(err)
			}
			defer r.home.Resume()
			a := r.allow[0][0]
			begin := time.Now()
			res, err := a.AllowN(context.Background(), "slow{"+tc.fb.String()+"}", now, 1)
			took := time.Since(begin)
			if err != nil || res.Allowed != tc.admit {
				t.Fatalf("%+v, %v after the wait; want allowed %v", res, err, tc.admit)
			}
			if took < wait || took > wait+100*time.Millisecond {
				t.Errorf("decided after %v, want the wait %v (+ at most 100ms)", took, wait)
			}
			if !tc.admit && res.RetryAfter <= 0 {
				t.Errorf("rejected without Retry-After: %+v", res)
			}
			if got := r.counterSum(t, "poplimit_global_false_refusals_total"); got != 0 {
				t.Errorf("false refusals %v with the claim still in flight: its count decides", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			begin = time.Now()
			res, err = a.AllowN(ctx, "slow2{"+tc.fb.String()+"}", now, 1)
			if took := time.Since(begin); err != nil || res.Allowed != tc.admit || took > 40*time.Millisecond {
				t.Errorf("with a 40ms context: %+v, %v after %v; want the fail mode's answer within the deadline", res, err, took)
			}
			cctx, ccancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, ccancel)
			if _, err := a.AllowN(cctx, "slow3{"+tc.fb.String()+"}", now, 1); !errors.Is(err, context.Canceled) {
				t.Errorf("a request cancelled while waiting: %v, want context.Canceled", err)
			}
			r.home.Resume()
			r.wait()
			if got := r.counterSum(t, "poplimit_global_false_refusals_total"); (got > 0) != tc.refusal {
				t.Errorf("false refusals %v once the claims returned a count under the limit", got)
			}
		})
	}
}

// TestActiveKeyGetsTheNextWindowBeforeTheBoundary: a key seen once early
// in a window (its pool far from low, no request near the end) has the
// next window's pool claimed before the boundary, so the next window's
// first request is served from the pool without waiting.
func TestActiveKeyGetsTheNextWindowBeforeTheBoundary(t *testing.T) {
	lim := counter.Limit{Name: "g", Algorithm: counter.FixedWindow, Quantity: 100, Window: time.Second}
	r := newRealPoPs(t, 1, 1, lim, global.Config{}, global.FallbackShare)
	a := r.allow[0][0]
	// Start just after a boundary: the request is ~900ms before the next.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	for w := 0; w < 3; w++ {
		res, err := a.AllowN(context.Background(), "steady{k}", time.Now(), 1)
		if err != nil || !res.Allowed {
			t.Fatalf("window %d: %+v, %v", w, res, err)
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	}
	waited := r.pathSum(t, "waited")
	pool := r.pathSum(t, "pool")
	if waited != 1 || pool != 2 {
		t.Errorf("decisions: %v waited, %v from the pool; want only the first request to wait", waited, pool)
	}
}

// pathSum sums poplimit_global_decisions_total{path} over every worker.
func (r *realPoPs) pathSum(t *testing.T, path string) float64 {
	t.Helper()
	var v float64
	for _, regs := range r.metrics {
		for _, reg := range regs {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() != "poplimit_global_decisions_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "path" && l.GetValue() == path {
							v += counterValue(m)
						}
					}
				}
			}
		}
	}
	return v
}

// TestWaitFollowsSlowClaims: once the worker's claims take longer than
// Config.Wait (a loaded host, a far home), a request that finds the pool
// empty waits up to two claim latencies, within the claim timeout, and is
// decided by the claim that answers rather than by the fail mode.
func TestWaitFollowsSlowClaims(t *testing.T) {
	const wait = 150 * time.Millisecond
	r := newRealPoPs(t, 1, 1, minute, global.Config{Wait: wait, HomeTimeout: 2 * time.Second}, global.FallbackClosed)
	now := midWindow()
	a := r.allow[0][0]
	slowHome := func(d time.Duration) {
		if err := r.home.Pause(); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(d, func() { _ = r.home.Resume() })
	}
	defer r.home.Resume()
	// A first claim of 600ms teaches the worker its claim latency; the
	// request behind it is past the wait and refused (fail_mode closed).
	slowHome(600 * time.Millisecond)
	if res, err := a.AllowN(context.Background(), "slowclaim{a}", now, 1); err != nil || res.Allowed {
		t.Fatalf("first request behind a 600ms claim: %+v, %v; want refused by the closed fail mode", res, err)
	}
	r.wait()
	slowHome(400 * time.Millisecond)
	begin := time.Now()
	res, err := a.AllowN(context.Background(), "slowclaim{b}", now, 1)
	took := time.Since(begin)
	if err != nil || !res.Allowed {
		t.Fatalf("request behind a 400ms claim after a 600ms one: %+v, %v after %v; want admitted by the claim", res, err, took)
	}
	if took < 300*time.Millisecond {
		t.Errorf("admitted after %v: the home store was paused for 400ms", took)
	}
}

// TestSteadyTrafficOnAColdKeyGetsAPool: a fresh key's steady traffic,
// arriving faster than the home store answers, waits on its first claims
// only: the claims for waiting requests seed the PoP's pool, whose refills
// then serve most requests at once (at least half here).
func TestSteadyTrafficOnAColdKeyGetsAPool(t *testing.T) {
	lim := counter.Limit{Name: "g", Algorithm: counter.FixedWindow, Quantity: 100000, Window: time.Minute}
	r := newRealPoPsHome(t, 1, 2, lim, global.Config{}, global.FallbackClosed,
		func(s counter.Store) counter.Store { return slowPipe{s.(*memcached.PipeStore), 40 * time.Millisecond} })
	midWindow()
	var wg sync.WaitGroup
	var refused atomic.Int64
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < 300; i++ { // 500/s for 0.6s, alternating workers
		<-tick.C
		a := r.allow[0][i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := a.AllowN(context.Background(), "steady{cold}", time.Now(), 1)
			if err != nil || !res.Allowed {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := refused.Load(); n != 0 {
		t.Fatalf("%d of 300 requests refused or failed with the home store up and the limit far away", n)
	}
	pool, waited := r.pathSum(t, "pool"), r.pathSum(t, "waited")
	t.Logf("pool %v, waited %v", pool, waited)
	if pool < 150 {
		t.Errorf("%v of 300 requests served from the pool, %v waited: the PoP's requests kept waiting on exact claims", pool, waited)
	}
}

// TestRefusalDuringAClaimIsFalseOnlyIfTheCountHadRoom: a request refused
// while its worker's claim is in flight (its wait ran out, fail mode
// closed) is a false refusal only if the count the claim returns is under
// the limit; here another PoP used the window up first.
func TestRefusalDuringAClaimIsFalseOnlyIfTheCountHadRoom(t *testing.T) {
	lim := counter.Limit{Name: "g", Algorithm: counter.FixedWindow, Quantity: 10, Window: time.Minute}
	r := newRealPoPs(t, 2, 1, lim, global.Config{Wait: 150 * time.Millisecond, HomeTimeout: 2 * time.Second}, global.FallbackClosed)
	now := midWindow()
	key := "usedup{a}"
	for i := 0; i < 10; i++ {
		if res, err := r.allow[0][0].AllowN(context.Background(), key, now, 1); err != nil || !res.Allowed {
			t.Fatalf("PoP 0, request %d of the limit's 10: %+v, %v", i+1, res, err)
		}
	}
	if err := r.home.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.home.Resume()
	if res, err := r.allow[1][0].AllowN(context.Background(), key, now, 1); err != nil || res.Allowed {
		t.Fatalf("PoP 1 behind a paused home, fail mode closed: %+v, %v; want refused", res, err)
	}
	if err := r.home.Resume(); err != nil {
		t.Fatal(err)
	}
	r.wait()
	if got := r.counterSum(t, "poplimit_global_false_refusals_total"); got != 0 {
		t.Errorf("false refusals %v: the claim in flight returned a used-up count", got)
	}
}

// slowPipe is a memcached client whose every call waits d first: a store
// one round trip of d away.
type slowPipe struct {
	*memcached.PipeStore
	d time.Duration
}

func (s slowPipe) Incr(ctx context.Context, key string, delta uint64) (uint64, error) {
	time.Sleep(s.d)
	return s.PipeStore.Incr(ctx, key, delta)
}

func (s slowPipe) Decr(ctx context.Context, key string, delta uint64) (uint64, error) {
	time.Sleep(s.d)
	return s.PipeStore.Decr(ctx, key, delta)
}

func (s slowPipe) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	time.Sleep(s.d)
	return s.PipeStore.Add(ctx, key, value, ttl)
}

func (s slowPipe) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	time.Sleep(s.d)
	return s.PipeStore.GetMulti(ctx, keys)
}

func (s slowPipe) Gets(ctx context.Context, key string) ([]byte, counter.CASToken, error) {
	time.Sleep(s.d)
	return s.PipeStore.Gets(ctx, key)
}

func (s slowPipe) CompareAndSwap(ctx context.Context, key string, value []byte, cas counter.CASToken, ttl time.Duration) error {
	time.Sleep(s.d)
	return s.PipeStore.CompareAndSwap(ctx, key, value, cas, ttl)
}

func (s slowPipe) GetMultiIncr(ctx context.Context, keys []string, incrKey string, delta uint64, ttl time.Duration) (map[string][]byte, uint64, error) {
	time.Sleep(s.d)
	return s.PipeStore.GetMultiIncr(ctx, keys, incrKey, delta, ttl)
}

// TestColdKeyFirstRequestPaysOneHomeRoundTrip: a key's first request at a
// worker, with PoP and home stores each a round trip of 200ms away, is
// decided after its pool read and one claim (400ms), not after a PoP-store
// round trip more for the refill's lock (600ms); later keys the same.
func TestColdKeyFirstRequestPaysOneHomeRoundTrip(t *testing.T) {
	const rtt = 200 * time.Millisecond
	ms := fixture.Memcached(t, 2)
	pipe := func(addr string) slowPipe {
		s := memcached.NewPipeStore(memcached.PipeConfig{Addr: addr, Timeout: 5 * time.Second})
		t.Cleanup(func() { s.Close() })
		return slowPipe{s, rtt}
	}
	m, err := global.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h, err := global.NewHome(global.Config{Local: pipe(ms[1].Addr), Home: pipe(ms[0].Addr), Metrics: m, Wait: time.Second, HomeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Wait()
	a, err := h.New(counter.Limit{Name: "g", Algorithm: counter.FixedWindow, Quantity: 100, Window: time.Minute}, global.FallbackClosed)
	if err != nil {
		t.Fatal(err)
	}
	now := midWindow()
	for i := 0; i < 3; i++ {
		begin := time.Now()
		res, err := a.AllowN(context.Background(), fmt.Sprintf("fresh{%d}", i), now, 1)
		took := time.Since(begin)
		if err != nil || !res.Allowed {
			t.Fatalf("key %d's first request: %+v, %v; want admitted", i, res, err)
		}
		if took >= 2*rtt+rtt/2 {
			t.Errorf("key %d's first request decided after %v: want its pool read and one claim, %v (+ less than %v)", i, took, 2*rtt, rtt/2)
		}
	}
}

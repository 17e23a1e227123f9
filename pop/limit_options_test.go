package pop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memstore"
)

// sharedConfig is storeConfig with Config.Store set too, and metrics.
func sharedConfig(t *testing.T, store counter.Store) (Config, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg := storeConfig(store)
	cfg.Store, cfg.Metrics = store, m
	return cfg, m
}

const shadowDoc = `version: 1
shadow_header: true
tiers:
  t: {limits: [{name: q, algorithm: fixed_window, quantity: 3, window: 1h, SHADOW}]}
policies:
  - {name: p, routes: ["/x"], identity: [ip], tier: t}
`

// TestShadowCountsWouldBeRejections: a dry-run limit, a dry-run file and
// Config.Shadow each admit every request, and mark exactly the requests
// the enforcing limit rejects on the same traffic.
func TestShadowCountsWouldBeRejections(t *testing.T) {
	traffic := func(l *Limiter) (rejected, shadowed int) {
		for i := range 40 {
			ip := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}[i%3]
			r := req("GET", "/x")
			r.RemoteAddr = ip + ":1"
			if i%3 == 2 && i > 20 {
				continue // one client sends less
			}
			d := l.Decide(context.Background(), r, t0.Add(time.Duration(i)*time.Millisecond))
			if !d.Allowed {
				rejected++
			}
			if d.Shadow != "" {
				shadowed++
				if d.Shadow != "q" || !d.Allowed {
					t.Fatalf("shadow decision %+v", d)
				}
			}
		}
		return
	}
	enforce := strings.Replace(shadowDoc, ", SHADOW", "", 1)
	cfg, _ := sharedConfig(t, memstore.New())
	want, sh := traffic(newTestLimiter(t, cfg, enforce))
	if want == 0 || sh != 0 {
		t.Fatalf("enforcing run: %d rejected, %d shadowed", want, sh)
	}
	for name, mk := range map[string]func() *Limiter{
		"limit": func() *Limiter {
			cfg, _ := sharedConfig(t, memstore.New())
			return newTestLimiter(t, cfg, strings.Replace(shadowDoc, "SHADOW", "shadow: true", 1))
		},
		"file": func() *Limiter {
			cfg, _ := sharedConfig(t, memstore.New())
			return newTestLimiter(t, cfg, "shadow: true\n"+enforce)
		},
		"config": func() *Limiter {
			cfg, _ := sharedConfig(t, memstore.New())
			cfg.Shadow = true
			return newTestLimiter(t, cfg, enforce)
		},
	} {
		l := mk()
		rej, sh := traffic(l)
		if rej != 0 || sh != want {
			t.Errorf("%s dry run: %d rejected, %d would-be rejections; want 0 and %d", name, rej, sh, want)
		}
		if got := testutil.ToFloat64(l.cfg.Metrics.lim.shadow.WithLabelValues("p", "q")); int(got) != want {
			t.Errorf("%s dry run: metric %v, want %d", name, got, want)
		}
	}
}

// TestShadowBesideEnforcing: a dry-run limit next to an enforced one
// neither rejects nor changes the enforced one's count or headers; the
// middleware names it in X-RateLimit-Shadow.
func TestShadowBesideEnforcing(t *testing.T) {
	doc := `version: 1
shadow_header: true
headers: seed
tiers:
  t: {limits: [{name: tight, algorithm: fixed_window, quantity: 1, window: 1h, shadow: true}, {name: loose, algorithm: fixed_window, quantity: 5, window: 1m}]}
policies:
  - {name: p, routes: ["/x"], identity: [ip], tier: t}
`
	cfg, _ := sharedConfig(t, memstore.New())
	clk := newTestClock(t0)
	cfg.Clock = clk.Now
	l := newTestLimiter(t, cfg, doc)
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	var codes []int
	for range 7 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req("GET", "/x"))
		codes = append(codes, w.Code)
		if w.Code == 200 && len(codes) > 1 && w.Header().Get(ShadowHeader) != "tight" {
			t.Errorf("request %d: %s %q", len(codes), ShadowHeader, w.Header().Get(ShadowHeader))
		}
		if w.Code == 200 && w.Header().Get("Ratelimit-Limit") != "5" {
			t.Errorf("request %d: RateLimit-Limit %q: the dry run leaked into the headers", len(codes), w.Header().Get("Ratelimit-Limit"))
		}
	}
	if want := []int{200, 200, 200, 200, 200, 429, 429}; !equalInts(codes, want) {
		t.Errorf("codes %v, want %v", codes, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

const concDoc = `version: 1
api_key: {header: X-API-Key}
tiers:
  t: {limits: [{name: inflight, algorithm: concurrency, quantity: 2, max_request_time: 40s, retry_after: 2s}]}
policies:
  - {name: p, routes: ["/x"], identity: [api_key], tier: t}
`

// TestConcurrencySlots: two in flight, the third refused with the
// configured Retry-After; a finished request frees its slot (once, however
// often Finish is called); a slot never finished stops counting within
// 1.25 × max_request_time, and not before max_request_time.
func TestConcurrencySlots(t *testing.T) {
	clk := newTestClock(t0.Add(3 * time.Second))
	store := memstore.NewClock(clk.Now)
	cfg, _ := sharedConfig(t, store)
	l := newTestLimiter(t, cfg, concDoc)
	w2, _ := sharedConfig(t, store) // a second worker of the PoP
	l2 := newTestLimiter(t, w2, concDoc)
	ctx := context.Background()
	r := func() *http.Request { return req("GET", "/x", "X-API-Key", "k") }
	a := l.Decide(ctx, r(), clk.Now())
	b := l2.Decide(ctx, r(), clk.Now())
	c := l.Decide(ctx, r(), clk.Now())
	if !a.Allowed || !b.Allowed || c.Allowed || c.Reason != ReasonConcurrency || c.RetryAfter() != 2*time.Second {
		t.Fatalf("a %v b %v c %+v", a.Allowed, b.Allowed, c)
	}
	l.Finish(ctx, a, clk.Now(), 200, nil)
	l.Finish(ctx, a, clk.Now(), 200, nil) // a second call gives nothing back
	d := l2.Decide(ctx, r(), clk.Now())
	if !d.Allowed {
		t.Fatalf("after a finished: %+v", d)
	}
	if e := l.Decide(ctx, r(), clk.Now()); e.Allowed {
		t.Fatalf("b and d in flight, a's double Finish freed two slots: %+v", e)
	}
	// b and d are never finished (their worker crashed).
	clk.Add(39 * time.Second)
	if e := l.Decide(ctx, r(), clk.Now()); e.Allowed {
		t.Fatalf("slots freed before max_request_time: %+v", e)
	}
	clk.Add(11 * time.Second) // 50s = 1.25 × 40s after admission
	e := l.Decide(ctx, r(), clk.Now())
	if !e.Allowed {
		t.Fatalf("slots still held 1.25 × max_request_time after a crash: %+v", e)
	}
	l.Finish(ctx, e, clk.Now(), 499, nil)
}

// TestConcurrencyStoreDown: fail_mode closed answers 503, open admits
// without a slot; a slot's release outlives a canceled request context.
func TestConcurrencyStoreDown(t *testing.T) {
	store := newFlakyStore(time.Now)
	cfg, m := sharedConfig(t, store)
	l := newTestLimiter(t, cfg, concDoc)
	ctx, cancel := context.WithCancel(context.Background())
	d := l.Decide(ctx, req("GET", "/x", "X-API-Key", "k"), t0)
	cancel()
	l.Finish(ctx, d, t0, statusClientClosed, nil)
	if got := testutil.ToFloat64(m.lim.conc.WithLabelValues("p", "released")); got != 1 {
		t.Errorf("released after a canceled request: %v", got)
	}
	store.down.Store(true)
	if d := l.Decide(context.Background(), req("GET", "/x", "X-API-Key", "k"), t0); !d.Allowed {
		t.Errorf("fail open, store down: %+v", d)
	}
	closed := newTestLimiter(t, cfg, strings.Replace(concDoc, "tier: t}", "tier: t, fail_mode: closed}", 1))
	if d := closed.Decide(context.Background(), req("GET", "/x", "X-API-Key", "k"), t0); d.Allowed || d.Status != 503 {
		t.Errorf("fail closed, store down: %+v", d)
	}
}

const countIfDoc = `version: 1
user_header: X-User
tiers:
  t: {limits: [{name: failed, algorithm: fixed_window, quantity: 3, window: 1h, count_if: {status: [401, "403-403"]}}]}
policies:
  - {name: login, routes: ["POST /login"], identity: [user], tier: t}
`

// TestCountIfLocksOutFailures: only 401/403 answers count; after three,
// the user is refused before forwarding on every worker; a user whose
// logins succeed is never limited.
func TestCountIfLocksOutFailures(t *testing.T) {
	store := memstore.New()
	cfg, _ := sharedConfig(t, store)
	l := newTestLimiter(t, cfg, countIfDoc)
	cfg2, _ := sharedConfig(t, store)
	other := newTestLimiter(t, cfg2, countIfDoc)
	ctx := context.Background()
	login := func(l *Limiter, user string, status int, at time.Time) bool {
		d := l.Decide(ctx, req("POST", "/login", "X-User", user), at)
		if d.Allowed {
			l.Finish(ctx, d, at, status, nil)
		}
		return d.Allowed
	}
	for i := range 50 {
		if !login(l, "good", 200, t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("correct login %d refused", i)
		}
	}
	for i, st := range []int{401, 200, 403, 401} {
		if !login(l, "victim", st, t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("attempt %d (%d) refused before three failures", i, st)
		}
	}
	at := t0.Add(time.Minute)
	d := other.Decide(ctx, req("POST", "/login", "X-User", "victim"), at)
	if d.Allowed || d.Reason != ReasonMitigated || d.Binding.Limit.Name != "failed" || d.RetryAfter() != 59*time.Minute {
		t.Fatalf("the other worker after 3 failures: %+v", d)
	}
	if !login(other, "victim", 401, t0.Add(time.Hour)) {
		t.Error("still refused in the next window")
	}
}

// TestCostHeader: a response's cost header is charged, bounded; bad
// values are charged the default and counted.
func TestCostHeader(t *testing.T) {
	doc := `version: 1
tiers:
  t: {limits: [{name: c, algorithm: fixed_window, quantity: 100, window: 1h, cost_header: {name: x-cost, max: 20, default: 2}}]}
policies:
  - {name: p, routes: ["/x"], identity: [ip], tier: t}
`
	cfg, m := sharedConfig(t, memstore.New())
	l := newTestLimiter(t, cfg, doc)
	ctx := context.Background()
	total := int64(0)
	for _, c := range []struct {
		v    string
		want int64
	}{{"5", 5}, {"-3", 2}, {"abc", 2}, {"1e9", 2}, {"", 2}, {"99", 20}, {"99999999999999999999999", 20}, {"0", 0}, {" 7 ", 7}} {
		h := http.Header{}
		if c.v != "" {
			h.Set("X-Cost", c.v)
		}
		r := l.snap.Load().policies["p"].tiers["t"].limits[0]
		if got := r.responseCost(m, "p", h); got != c.want {
			t.Errorf("X-Cost %q: cost %d, want %d", c.v, got, c.want)
		}
		d := l.Decide(ctx, req("GET", "/x"), t0)
		l.Finish(ctx, d, t0, 200, h)
		total += c.want
	}
	res, _ := l.snap.Load().policies["p"].tiers["t"].limits[0].shared.AllowN(ctx, counter.Key("p", "ip", "192.0.2.1"), t0, 1)
	if res.Remaining != 100-total-1 {
		t.Errorf("remaining %d after charging %d (+1)", res.Remaining, total)
	}
	for reason, want := range map[string]float64{"invalid": 6, "missing": 2, "too_large": 4} { // responseCost above and Finish
		if got := testutil.ToFloat64(m.lim.respInvald.WithLabelValues("p", reason)); got != want {
			t.Errorf("invalid cost metric %s: %v, want %v", reason, got, want)
		}
	}
}

// TestMitigationTimeoutShared: once the limit rejects, the identity stays
// rejected for the timeout, also on a worker that never saw it and after
// the window reset; then it is admitted.
func TestMitigationTimeoutShared(t *testing.T) {
	doc := `version: 1
tiers:
  t: {limits: [{name: q, algorithm: fixed_window, quantity: 2, window: 1s, mitigation_timeout: 1m}]}
policies:
  - {name: p, routes: ["/x"], identity: [ip], tier: t}
`
	clk := newTestClock(t0)
	store := memstore.NewClock(clk.Now)
	cfg, m := sharedConfig(t, store)
	a := newTestLimiter(t, cfg, doc)
	cfg2, _ := sharedConfig(t, store)
	b := newTestLimiter(t, cfg2, doc)
	ctx := context.Background()
	for i := range 3 {
		d := a.Decide(ctx, req("GET", "/x"), clk.Now())
		if d.Allowed != (i < 2) {
			t.Fatalf("request %d: %+v", i, d)
		}
		if i == 2 && d.RetryAfter() != time.Minute {
			t.Errorf("Retry-After %v, want the 1m timeout", d.RetryAfter())
		}
	}
	clk.Add(5 * time.Second)
	d := b.Decide(ctx, req("GET", "/x"), clk.Now())
	if d.Allowed || d.Reason != ReasonMitigated || d.RetryAfter() != 55*time.Second {
		t.Fatalf("other worker, window reset, in the timeout: %+v", d)
	}
	if got := testutil.ToFloat64(m.lim.flags.WithLabelValues("p", "raised")); got != 1 {
		t.Errorf("flags raised: %v", got)
	}
	clk.Add(56 * time.Second)
	if d := b.Decide(ctx, req("GET", "/x"), clk.Now()); !d.Allowed {
		t.Fatalf("after the timeout: %+v", d)
	}
}

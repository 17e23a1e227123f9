package pop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop/policy"
)

// compoundPolicy: 10/s AND 50/min on the API key, tier from the key record.
const compoundPolicy = `version: 1
headers: both
api_key: {header: X-API-Key}
keys:
  - {key: secret-free-key, tenant: acme, tier: free}
tiers:
  free:
    limits:
      - {name: second, algorithm: fixed_window, quantity: 10, window: 1s, on_reject: refund}
      - {name: minute, algorithm: fixed_window, quantity: 50, window: 1m, on_reject: refund}
  pro:
    limits:
      - {name: second, algorithm: fixed_window, quantity: 100, window: 1s}
policies:
  - name: api
    routes: ["GET /api/{x}"]
    identity: [tenant, api_key]
    tier: api_key
    default_tier: free
    fail_mode: FAILMODE
`

func policyDoc(failMode string) string {
	return strings.Replace(compoundPolicy, "FAILMODE", failMode, 1)
}

func TestCompoundRuleSteps(t *testing.T) {
	clk := newTestClock(t0)
	store := newFlakyStore(clk.Now)
	cfg := storeConfig(store)
	// Generous: a decision that misses the deadline on a loaded machine
	// fails open uncounted, which would shift the steps below.
	cfg.StoreDeadline = time.Second
	l := newTestLimiter(t, cfg, policyDoc("open"))
	type step struct {
		at          time.Duration
		n           int // requests sent at this instant
		wantAllowed int
		wantBinding string // binding limit of the last request
		wantRetry   time.Duration
	}
	steps := []step{
		{0, 12, 10, "second", time.Second},
		{1 * time.Second, 10, 10, "second", 0},
		{2 * time.Second, 10, 10, "second", 0},
		{3 * time.Second, 10, 10, "second", 0},
		{4 * time.Second, 12, 10, "minute", 56 * time.Second}, // 50th admitted; then the minute binds
		{5 * time.Second, 1, 0, "minute", 55 * time.Second},
		{60 * time.Second, 3, 3, "second", 0},
	}
	for i, s := range steps {
		now := t0.Add(s.at)
		clk.Set(now)
		allowed := 0
		var last Decision
		for j := 0; j < s.n; j++ {
			last = l.Decide(context.Background(), req("GET", "/api/items", "X-API-Key", "secret-free-key"), now)
			if last.Allowed {
				allowed++
			}
		}
		if allowed != s.wantAllowed {
			t.Fatalf("step %d: %d admitted, want %d", i, allowed, s.wantAllowed)
		}
		if last.Binding.Limit.Name != s.wantBinding && s.wantRetry > 0 {
			t.Errorf("step %d: binding %q, want %q", i, last.Binding.Limit.Name, s.wantBinding)
		}
		if !last.Allowed && last.RetryAfter() > s.wantRetry {
			t.Errorf("step %d: RetryAfter %v, want ≤ %v", i, last.RetryAfter(), s.wantRetry)
		}
		if last.Policy != "api" || last.Tier != "free" {
			t.Errorf("step %d: policy/tier %q/%q", i, last.Policy, last.Tier)
		}
	}
	// The clear API key never reaches the store.
	for k := range store.keys {
		if strings.Contains(k, "secret") {
			t.Fatalf("store key %q contains the API key", k)
		}
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	clk := newTestClock(t0.Add(300 * time.Millisecond))
	l := newTestLimiter(t, storeConfig(newFlakyStore(clk.Now)), policyDoc("open"))
	now := clk.Now()
	var d Decision
	for i := 0; i < 11; i++ {
		d = l.Decide(context.Background(), req("GET", "/api/a", "X-API-Key", "secret-free-key"), now)
	}
	if d.Allowed {
		t.Fatal("11th request admitted")
	}
	wait := time.Duration(ceilSeconds(d.RetryAfter())) * time.Second
	if wait < 700*time.Millisecond || wait > time.Second {
		t.Fatalf("Retry-After %v (raw %v) for a fixed second window at +300ms", wait, d.RetryAfter())
	}
	// Just before the RetryAfter instant: still blocked (mitigation cache).
	if d2 := l.Decide(context.Background(), req("GET", "/api/a", "X-API-Key", "secret-free-key"), now.Add(d.RetryAfter()-time.Millisecond)); d2.Allowed || d2.Reason != ReasonMitigated {
		t.Fatalf("before RetryAfter: %+v", d2)
	}
	clk.Set(now.Add(wait))
	if d3 := l.Decide(context.Background(), req("GET", "/api/a", "X-API-Key", "secret-free-key"), now.Add(wait)); !d3.Allowed {
		t.Fatalf("a client waiting Retry-After was rejected: %+v", d3)
	}
}

// freeKeyReq is a request with policyDoc's free API key (10 per second).
func freeKeyReq() *http.Request { return req("GET", "/api/a", "X-API-Key", "secret-free-key") }

// exhaustFreeKey sends the free key's 10 admitted requests and one more at t0.
func exhaustFreeKey(l *Limiter) {
	for i := 0; i < 11; i++ {
		l.Decide(context.Background(), freeKeyReq(), t0)
	}
}

func TestMitigationCacheSavesStoreCalls(t *testing.T) {
	clk := newTestClock(t0)
	store := newFlakyStore(clk.Now)
	l := newTestLimiter(t, storeConfig(store), policyDoc("open"))
	ctx := context.Background()
	exhaustFreeKey(l)
	before := store.calls.Load()
	for i := 0; i < 1000; i++ {
		d := l.Decide(ctx, freeKeyReq(), t0.Add(time.Duration(i)*time.Microsecond))
		if d.Allowed || d.Reason != ReasonMitigated || d.Status != http.StatusTooManyRequests {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	if got := store.calls.Load() - before; got != 0 {
		t.Fatalf("%d store calls for a blocked client", got)
	}
	// Another identity is not blocked.
	if d := l.Decide(ctx, req("GET", "/api/a"), t0); !d.Allowed {
		t.Fatalf("anonymous client blocked: %+v", d)
	}
	// Once the estimate falls back, the store is asked again.
	clk.Set(t0.Add(time.Second))
	if d := l.Decide(ctx, freeKeyReq(), t0.Add(time.Second)); !d.Allowed || d.Reason != ReasonStore {
		t.Fatalf("after the window: %+v", d)
	}
}

func TestMitigationCacheInvalidatedOnPolicyChange(t *testing.T) {
	clk := newTestClock(t0)
	l := newTestLimiter(t, storeConfig(newFlakyStore(clk.Now)), policyDoc("open"))
	ctx := context.Background()
	exhaustFreeKey(l)
	if d := l.Decide(ctx, freeKeyReq(), t0); d.Reason != ReasonMitigated {
		t.Fatalf("not mitigated: %+v", d)
	}
	// Reloading an identical file keeps the cache.
	if err := l.LoadBytes("same.yml", []byte(policyDoc("open"))); err != nil {
		t.Fatal(err)
	}
	if d := l.Decide(ctx, freeKeyReq(), t0); d.Reason != ReasonMitigated {
		t.Fatalf("identical reload dropped the cache: %+v", d)
	}
	// Raising the limit must take effect at once (envoy ratelimit #1077).
	raised := strings.Replace(policyDoc("open"), "quantity: 10, window: 1s", "quantity: 1000, window: 1s", 1)
	if err := l.LoadBytes("raised.yml", []byte(raised)); err != nil {
		t.Fatal(err)
	}
	if d := l.Decide(ctx, freeKeyReq(), t0); !d.Allowed {
		t.Fatalf("raised limit still blocked: %+v", d)
	}
}

func TestTierChangeAppliesAtOnce(t *testing.T) {
	clk := newTestClock(t0)
	l := newTestLimiter(t, storeConfig(newFlakyStore(clk.Now)), policyDoc("open"))
	ctx := context.Background()
	exhaustFreeKey(l)
	upgraded := strings.Replace(policyDoc("open"), "tier: free}", "tier: pro}", 1)
	if err := l.LoadBytes("pro.yml", []byte(upgraded)); err != nil {
		t.Fatal(err)
	}
	d := l.Decide(ctx, freeKeyReq(), t0)
	if !d.Allowed || d.Tier != "pro" || d.Binding.Result.Limit != 100 {
		t.Fatalf("after upgrade: %+v", d)
	}
}

func TestInvalidReloadKeepsOld(t *testing.T) {
	clk := newTestClock(t0)
	l := newTestLimiter(t, storeConfig(newFlakyStore(clk.Now)), policyDoc("open"))
	err := l.LoadBytes("bad.yml", []byte(strings.Replace(policyDoc("open"), "window: 1m", "window: soon", 1)))
	if err == nil || !strings.Contains(err.Error(), "bad.yml:10: tiers.free.limits[1].window") || strings.Contains(err.Error(), "required") {
		t.Fatalf("err = %v", err)
	}
	if l.LastLoadError() == nil {
		t.Fatal("LastLoadError not kept")
	}
	for i := 0; i < 11; i++ {
		d := l.Decide(context.Background(), req("GET", "/api/a", "X-API-Key", "secret-free-key"), t0)
		if d.Allowed != (i < 10) {
			t.Fatalf("old policy not in force at request %d: %+v", i, d)
		}
	}
}

func TestFailModes(t *testing.T) {
	tests := []struct {
		mode       string
		wantAdmit  int // of 10 requests while the store is down
		wantReason Reason
		wantStatus int
	}{
		{"open", 10, ReasonFailOpen, 0},
		{"closed", 0, ReasonFailClosed, http.StatusServiceUnavailable},
		{"local", 2, ReasonFailLocal, http.StatusTooManyRequests}, // 10/s ÷ 4 workers
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			clk := newTestClock(t0)
			store := newFlakyStore(clk.Now)
			cfg := storeConfig(store)
			cfg.WorkersPerPoP = 4
			cfg.Breaker = BreakerConfig{Failures: 3, OpenFor: 500 * time.Millisecond}
			l := newTestLimiter(t, cfg, policyDoc(tc.mode))
			ctx := context.Background()
			store.down.Store(true)
			admitted := 0
			var last Decision
			for i := 0; i < 10; i++ {
				last = l.Decide(ctx, req("GET", "/api/a", "X-API-Key", "secret-free-key"), t0)
				if last.Allowed {
					admitted++
				} else if last.Status != tc.wantStatus {
					t.Fatalf("status %d, want %d", last.Status, tc.wantStatus)
				}
				if last.Reason != tc.wantReason {
					t.Fatalf("request %d: reason %s, want %s", i, last.Reason, tc.wantReason)
				}
			}
			if admitted != tc.wantAdmit {
				t.Fatalf("%d admitted, want %d", admitted, tc.wantAdmit)
			}
			if l.Breaker().State() != BreakerOpen {
				t.Fatalf("breaker %v after 10 failures", l.Breaker().State())
			}
			// While open: zero store calls.
			calls := store.calls.Load()
			for i := 0; i < 100; i++ {
				l.Decide(ctx, req("GET", "/api/a", "X-API-Key", "secret-free-key"), t0.Add(100*time.Millisecond))
			}
			if got := store.calls.Load() - calls; got != 0 {
				t.Fatalf("%d store calls while the breaker is open", got)
			}
			// Store back: after OpenFor a probe closes the breaker and
			// traffic is counted again.
			store.down.Store(false)
			at := t0.Add(2 * time.Second)
			clk.Set(at)
			d := l.Decide(ctx, req("GET", "/api/a", "X-API-Key", "secret-free-key"), at)
			if !d.Allowed || d.Reason != ReasonStore || l.Breaker().State() != BreakerClosed {
				t.Fatalf("after recovery: %+v, breaker %v", d, l.Breaker().State())
			}
		})
	}
}

func TestStoreDeadline(t *testing.T) {
	clk := newTestClock(t0)
	store := newFlakyStore(clk.Now)
	cfg := storeConfig(store)
	cfg.StoreDeadline = 30 * time.Millisecond
	l := newTestLimiter(t, cfg, policyDoc("closed"))
	store.hang.Store(true)
	start := time.Now()
	d := l.Decide(context.Background(), req("GET", "/api/a", "X-API-Key", "secret-free-key"), t0)
	// A bound on correctness, not speed: the decision must not wait for
	// the hung store beyond its deadline (generous slack for -race on a
	// shared machine).
	if el := time.Since(start); el > time.Second {
		t.Fatalf("decision took %v with a 30ms deadline", el)
	}
	if d.Reason != ReasonFailClosed || d.Status != http.StatusServiceUnavailable {
		t.Fatalf("hung store: %+v", d)
	}
}

func TestPrefilter(t *testing.T) {
	clk := newTestClock(t0)
	store := newFlakyStore(clk.Now)
	doc := policyDoc("open") + "prefilter: {quantity: 5, window: 1s, burst: 5}\n"
	l := newTestLimiter(t, storeConfig(store), doc)
	rejected := 0
	for i := 0; i < 20; i++ {
		d := l.Decide(context.Background(), req("GET", "/nothing-limited"), t0)
		if !d.Allowed {
			rejected++
			if d.Reason != ReasonPrefilter {
				t.Fatalf("reason %s", d.Reason)
			}
		}
	}
	if rejected != 15 {
		t.Fatalf("prefilter rejected %d of 20, want 15", rejected)
	}
	if store.calls.Load() != 0 {
		t.Fatalf("prefilter made %d store calls", store.calls.Load())
	}
}

func TestMiddlewareHeadersAndBody(t *testing.T) {
	clk := newTestClock(t0)
	cfg := storeConfig(newFlakyStore(clk.Now))
	cfg.Clock = clk.Now
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = m
	var sink bytes.Buffer
	cfg.Events = NewEvents(&sink, EventsConfig{Queue: 100})
	l := newTestLimiter(t, cfg, policyDoc("open"))
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hi")) }))
	clk.Set(t0.Add(900 * time.Millisecond))
	var rec *httptest.ResponseRecorder
	for i := 0; i < 10; i++ {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req("GET", "/api/x", "X-API-Key", "secret-free-key"))
	}
	if rec.Code != 200 || rec.Body.String() != "hi" {
		t.Fatalf("10th: %d %q", rec.Code, rec.Body)
	}
	hd := rec.Header()
	want := map[string]string{
		"RateLimit-Limit":     "10",
		"RateLimit-Remaining": "0",
		"RateLimit-Reset":     "1",
		"RateLimit-Policy":    `"second";q=10;w=1, "minute";q=50;w=60`,
		"RateLimit":           `"second";r=0;t=1`,
	}
	for k, v := range want {
		if got := hd.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req("GET", "/api/x", "X-API-Key", "secret-free-key"))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("11th: %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	var body struct {
		Error      string `json:"error"`
		RetryAfter int    `json:"retry_after"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error != "rate_limit_exceeded" || body.RetryAfter != 1 {
		t.Fatalf("body %q: %+v %v", rec.Body, body, err)
	}
	// Unlimited routes get no headers.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req("GET", "/other"))
	if rec.Code != 200 || rec.Header().Get("RateLimit-Limit") != "" {
		t.Fatalf("unlimited route: %d %v", rec.Code, rec.Header())
	}
	// Metrics counted, without the API key.
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("api", "free", "store", "true")); got != 10 {
		t.Errorf("admitted decisions metric %v, want 10", got)
	}
	// Events: one rejection, written asynchronously, no key in clear.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg.Events.Run(ctx) // drains and flushes
	if cfg.Events.Written() != 1 || strings.Contains(sink.String(), "secret") || !strings.Contains(sink.String(), policy.KeyID("secret-free-key")) {
		t.Fatalf("events: %d written: %s", cfg.Events.Written(), sink.String())
	}
	var out bytes.Buffer
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		out.WriteString(mf.String())
	}
	if strings.Contains(out.String(), "secret") {
		t.Fatal("metrics contain the API key")
	}
}

func TestHeaderModes(t *testing.T) {
	d := Decision{Allowed: true, Binding: LimitResult{
		Limit:  counter.Limit{Name: "burst", Quantity: 100, Window: time.Second},
		Result: counter.Result{Allowed: true, Limit: 100, Remaining: 41, Reset: 400 * time.Millisecond},
	}}
	tests := []struct {
		mode policy.HeaderMode
		want map[string]string
	}{
		{policy.HeadersSeed, map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "41", "RateLimit-Reset": "1", "RateLimit": ""}},
		{policy.HeadersDraft11, map[string]string{"RateLimit-Policy": `"burst";q=100;w=1`, "RateLimit": `"burst";r=41;t=1`, "RateLimit-Limit": ""}},
		{policy.HeadersNone, map[string]string{"RateLimit": "", "RateLimit-Limit": ""}},
	}
	for _, tc := range tests {
		h := http.Header{}
		WriteHeaders(h, d, tc.mode)
		for k, v := range tc.want {
			if got := h.Get(k); got != v {
				t.Errorf("mode %d %s = %q, want %q", tc.mode, k, got, v)
			}
		}
	}
}

func TestEventsNeverBlock(t *testing.T) {
	e := NewEvents(&bytes.Buffer{}, EventsConfig{Queue: 4})
	// Nobody runs the writer: the queue fills and the rest is dropped.
	for i := 0; i < 100; i++ {
		e.Emit(Event{Policy: "p"})
	}
	if e.Dropped() != 96 {
		t.Fatalf("dropped %d, want 96", e.Dropped())
	}
}

// TestUnknownKeysAreAnonymous: with key records, a made-up key cannot mint
// a fresh identity; it is counted with the anonymous traffic of its IP.
func TestUnknownKeysAreAnonymous(t *testing.T) {
	clk := newTestClock(t0)
	l := newTestLimiter(t, storeConfig(newFlakyStore(clk.Now)), policyDoc("open"))
	admitted := 0
	for i := 0; i < 30; i++ {
		d := l.Decide(context.Background(), req("GET", "/api/a", "X-API-Key", fmt.Sprint("made-up-", i)), t0)
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("rotating unknown keys admitted %d, want 10 (the free tier of the IP)", admitted)
	}
}

// TestCanceledClientNotAdmitted: a client that goes away while the store is
// being asked is neither admitted as "fail open" nor counted as a store
// fallback, whatever the fail mode.
func TestCanceledClientNotAdmitted(t *testing.T) {
	for _, mode := range []string{"open", "closed", "local"} {
		t.Run(mode, func(t *testing.T) {
			clk := newTestClock(t0)
			store := newFlakyStore(clk.Now)
			cfg := storeConfig(store)
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			cfg.Metrics = m
			var sink bytes.Buffer
			cfg.Events = NewEvents(&sink, EventsConfig{Queue: 10})
			l := newTestLimiter(t, cfg, policyDoc(mode))
			store.hang.Store(true)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			d := l.Decide(ctx, req("GET", "/api/a", "X-API-Key", "secret-free-key"), t0)
			if d.Allowed || d.Reason != "canceled" || d.Status != 499 {
				t.Errorf("decision %+v, want refused, reason canceled, status 499", d)
			}
			if n := testutil.CollectAndCount(m.fallback); n != 0 {
				t.Errorf("%d fallback series counted for a canceled client, want 0", n)
			}
			if store.calls.Load() == 0 {
				t.Error("the store was never asked: the test does not exercise cancellation mid-call")
			}
			if l.Breaker().State() != BreakerClosed {
				t.Errorf("breaker %v after a canceled client, want closed", l.Breaker().State())
			}
			if q := len(cfg.Events.q); q != 0 {
				t.Errorf("%d rejection events queued for a canceled client, want 0", q)
			}
		})
	}
}

// Reloads are counted by result: a file that fails validation is
// "invalid", one that cannot be read "unreadable".
func TestReloadMetricsByResult(t *testing.T) {
	clk := newTestClock(t0)
	cfg := storeConfig(newFlakyStore(clk.Now))
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = m
	l := newTestLimiter(t, cfg, policyDoc("open")) // ok: 1
	if err := l.LoadBytes("bad.yml", []byte("tiers: [")); err == nil {
		t.Fatal("a broken file loaded")
	}
	if err := l.LoadFile(filepath.Join(t.TempDir(), "missing.yml")); err == nil {
		t.Fatal("a missing file loaded")
	}
	for result, want := range map[string]float64{"ok": 1, "invalid": 1, "unreadable": 1} {
		if got := testutil.ToFloat64(m.reloads.WithLabelValues(result)); got != want {
			t.Errorf("reloads{result=%q} = %v, want %v", result, got, want)
		}
	}
}

// TestVerdictBinding: the binding limit is counter.Closest over the limits
// consulted; the ones after a lease that refused were not asked and never
// bind nor reject.
func TestVerdictBinding(t *testing.T) {
	lr := func(name string, allowed bool, rem, lim int64, retry time.Duration) LimitResult {
		return LimitResult{Limit: counter.Limit{Name: name, Quantity: max(lim, 1), Window: time.Second},
			Result: counter.Result{Allowed: allowed, Remaining: rem, Limit: lim, RetryAfter: retry}}
	}
	unasked := func(name string) LimitResult {
		return LimitResult{Limit: counter.Limit{Name: name, Quantity: 5, Window: time.Second}}
	}
	for _, tc := range []struct {
		name        string
		all         []LimitResult
		consulted   int
		wantAllowed bool
		wantBinding string
	}{
		{"nothing consulted admits", []LimitResult{unasked("a")}, 0, true, ""},
		{"least remaining share binds", []LimitResult{lr("a", true, 5, 10, 0), lr("b", true, 1, 10, 0)}, 2, true, "b"},
		{"share tie: the first", []LimitResult{lr("a", true, 1, 2, 0), lr("b", true, 5, 10, 0)}, 2, true, "a"},
		{"a zero limit counts as nothing used", []LimitResult{lr("a", true, 0, 0, 0), lr("b", true, 9, 10, 0)}, 2, true, "b"},
		{"longest retry among rejections", []LimitResult{lr("a", false, 0, 10, time.Second), lr("b", true, 0, 10, 0), lr("c", false, 0, 10, time.Hour)}, 3, false, "c"},
		{"retry tie: the first", []LimitResult{lr("a", false, 0, 10, time.Minute), lr("b", false, 0, 10, time.Minute)}, 2, false, "a"},
		{"a lease that refused first", []LimitResult{lr("a", false, 0, 10, time.Second), unasked("b"), unasked("c")}, 1, false, "a"},
		{"a lease that refused second", []LimitResult{lr("a", true, 0, 10, 0), lr("b", false, 0, 10, time.Second), unasked("c")}, 2, false, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := verdict(tc.all, tc.consulted, ReasonStore)
			if d.Allowed != tc.wantAllowed || d.Binding.Limit.Name != tc.wantBinding || len(d.All) != len(tc.all) || d.Reason != ReasonStore {
				t.Fatalf("verdict = allowed %v binding %q (%d limits), want allowed %v binding %q", d.Allowed, d.Binding.Limit.Name, len(d.All), tc.wantAllowed, tc.wantBinding)
			}
		})
	}
}

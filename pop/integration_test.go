package pop_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/counter/memcached"
	"github.com/poplimit/poplimit/pop"
	"github.com/poplimit/poplimit/pop/policy"
)

// onePoP starts 3 memcached shards and one mcproxy in front of them.
func onePoP(t *testing.T, mcproxyBin string, shards int) (*proc, []*procs.Memcached) {
	t.Helper()
	ms := fixture.Memcached(t, shards)
	return startMcproxy(t, mcproxyBin, "", ms), ms
}

// blast sends n GETs spread round-robin over workers from 8 goroutines and
// returns the number of 200 answers; any other status than 200/429 fails.
func blast(t *testing.T, workers []string, path, key string, n int) int {
	t.Helper()
	var admitted, next atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				code, _ := get(t, "http://"+workers[i%int64(len(workers))]+path, key)
				switch code {
				case 200:
					admitted.Add(1)
				case 429:
				default:
					t.Errorf("%s: status %d", path, code)
				}
			}
		}()
	}
	wg.Wait()
	return int(admitted.Load())
}

const algoPolicy = `version: 1
api_key: {header: X-API-Key}
tiers:
  fw: {limits: [{name: fw, algorithm: fixed_window, quantity: LIMIT, window: 1h}]}
  tb: {limits: [{name: tb, algorithm: token_bucket, quantity: LIMIT, window: 1h, burst: LIMIT}]}
  sw: {limits: [{name: sw, algorithm: sliding_window, quantity: LIMIT, window: 1h}]}
policies:
  - {name: fw, routes: ["GET /fw"], identity: [api_key], tier: fw}
  - {name: tb, routes: ["GET /tb"], identity: [api_key], tier: tb}
  - {name: sw, routes: ["GET /sw"], identity: [api_key], tier: sw}
  - {name: fwl, routes: ["GET /fwl"], identity: [api_key], tier: fw, lease: {enabled: true}}
`

// Done-when 1: three shards, one mcproxy, four edge processes; a client
// sending 2× its limit spread over the workers is admitted, in total,
// within 1% of the limit (fixed window and token bucket: the PoP shares one
// count); the sliding window's admitted count is reported. Workers 0 and 2
// use edge's pipelining client, 1 and 3 gomemcache.
func TestIntegrationPoPSharesOneCount(t *testing.T) {
	edgeBin, mcBin := binaries(t)
	px, _ := onePoP(t, mcBin, 3)
	const limit = 200
	policyPath := writePolicy(t, t.TempDir(), strings.ReplaceAll(algoPolicy, "LIMIT", strconv.Itoa(limit)))
	up := upstream(t)
	var workers []string
	var edges []*edgeProc
	for i := 0; i < 4; i++ {
		// A generous deadline: this test checks sharing, not latency, on a
		// shared 2-core machine (a timed-out decision would fail open).
		// Half the workers use each memcached client: both must count in
		// the same items.
		client := []string{"pipe", "gomemcache"}[i%2]
		e := startEdge(t, edgeBin, up, px.addr, policyPath, "--workers-per-pop", "4", "--store-deadline", "1s", "--store-client", client)
		edges = append(edges, e)
		workers = append(workers, e.addr)
	}
	defer func() {
		for i, e := range edges {
			if fb := metric(t, e.admin, "poplimit_fallback_decisions_total", ""); fb != 0 {
				t.Errorf("worker %d: %v decisions fell back (store errors: %v)", i, fb, metric(t, e.admin, "poplimit_store_errors_total", ""))
			}
		}
	}()
	key := fmt.Sprintf("client-%d", rand.Uint64())
	hour := time.Now().Truncate(time.Hour)
	for _, route := range []string{"/fw", "/tb", "/sw", "/fwl"} {
		got := blast(t, workers, route, key, 2*limit)
		t.Logf("%s: %d of %d admitted over 4 workers (limit %d)", route, got, 2*limit, limit)
		if route == "/fwl" {
			// Leased fixed window: never above the limit; what leases
			// strand at the end is reported (under-admission).
			if got > limit {
				t.Errorf("/fwl: leased fixed window admitted %d above %d", got, limit)
			}
			continue
		}
		if route == "/fw" && time.Now().Truncate(time.Hour) != hour {
			t.Log("the run straddled an hour boundary: fixed window not checked")
			continue
		}
		if route != "/sw" && (got > limit || got < limit-limit/100) {
			t.Errorf("%s: admitted %d, want within 1%% below %d", route, got, limit)
		}
		if route == "/sw" && got > limit {
			t.Errorf("/sw: admitted %d above %d in the first window", got, limit)
		}
	}
}

// Done-when 2: two PoPs (separate shard sets and proxies) each admit the
// limit independently for the same client.
func TestIntegrationTwoPoPsIndependent(t *testing.T) {
	edgeBin, mcBin := binaries(t)
	const limit = 50
	policyPath := writePolicy(t, t.TempDir(), strings.ReplaceAll(algoPolicy, "LIMIT", strconv.Itoa(limit)))
	up := upstream(t)
	var pops [2][]string
	for p := range pops {
		px, _ := onePoP(t, mcBin, 2)
		for i := 0; i < 2; i++ {
			pops[p] = append(pops[p], startEdge(t, edgeBin, up, px.addr, policyPath, "--workers-per-pop", "2", "--store-deadline", "1s").addr)
		}
	}
	key := fmt.Sprintf("roamer-%d", rand.Uint64())
	for p, workers := range pops {
		if got := blast(t, workers, "/tb", key, 2*limit); got != limit {
			t.Errorf("PoP %d admitted %d, want %d", p, got, limit)
		}
	}
}

const compoundDoc = `version: 1
api_key: {header: X-API-Key}
keys: [{key: k-compound, tenant: acme, tier: t}]
tiers:
  t:
    limits:
      - {name: second, algorithm: fixed_window, quantity: 10, window: 1s}
      - {name: minute, algorithm: fixed_window, quantity: 50, window: 1m, on_reject: refund}
policies:
  - {name: api, routes: ["/"], identity: [tenant, api_key], tier: api_key, default_tier: t}
`

// Done-when 3: a compound rule (10/s AND 50/min) through gomemcache →
// mcproxy → real memcached: enforced, headers correct, and a client that
// honours Retry-After is admitted. The library runs in process so the
// decision instants are chosen by the test.
func TestIntegrationCompoundRuleThroughProxy(t *testing.T) {
	_, mcBin := binaries(t)
	px, _ := onePoP(t, mcBin, 3)
	store := memcached.NewStore(memcached.NewClient(memcached.Config{Servers: []string{px.addr}, Timeout: time.Second}))
	var nowNS atomic.Int64
	start := time.Now().Truncate(time.Minute).Add(time.Minute) // a fresh minute, in the future
	nowNS.Store(start.UnixNano())
	l, err := pop.New(pop.Config{
		NewShared: func(lim counter.Limit) (counter.Allower, error) { return counter.New(store, lim) },
		NewLocal:  func(lim counter.Limit) (counter.Allower, error) { return counter.NewLocal(lim) },
		Clock:     func() time.Time { return time.Unix(0, nowNS.Load()) },
		// Generous: -race and a shared machine; the deadline is not what
		// this test checks.
		StoreDeadline: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LoadBytes("compound.yml", []byte(compoundDoc)); err != nil {
		t.Fatal(err)
	}
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	key := "k-compound"
	do := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("X-API-Key", key)
		h.ServeHTTP(rec, r)
		return rec
	}
	admitted := 0
	var sec int
	for sec = 0; sec < 7; sec++ {
		nowNS.Store(start.Add(time.Duration(sec)*time.Second + 100*time.Millisecond).UnixNano())
		for i := 0; i < 12; i++ {
			rec := do()
			if rec.Code == 200 {
				admitted++
				continue
			}
			if rec.Code != 429 || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), `"error":"rate_limit_exceeded"`) {
				t.Fatalf("rejection: %d %v %s", rec.Code, rec.Header(), rec.Body)
			}
		}
		if sec < 5 && admitted != 10*(sec+1) {
			t.Fatalf("second %d: %d admitted in total, want %d", sec, admitted, 10*(sec+1))
		}
	}
	if admitted != 50 {
		t.Fatalf("%d admitted in a minute, want 50", admitted)
	}
	// Headers at this point: the minute binds.
	rec := do()
	hd := rec.Header()
	ra, _ := strconv.Atoi(hd.Get("Retry-After"))
	wantRA := 60 - 6 // at +6.1s, the minute ends in 53.9s → 54
	if rec.Code != 429 || ra != wantRA || hd.Get("RateLimit-Limit") != "50" || hd.Get("RateLimit-Remaining") != "0" ||
		hd.Get("RateLimit") != fmt.Sprintf(`"minute";r=0;t=%d`, wantRA) || hd.Get("RateLimit-Policy") != `"second";q=10;w=1, "minute";q=50;w=60` {
		t.Fatalf("headers after the minute is spent: %d %v", rec.Code, hd)
	}
	// A client honouring Retry-After is admitted.
	nowNS.Add(int64(ra) * int64(time.Second))
	if rec := do(); rec.Code != 200 || rec.Header().Get("RateLimit-Remaining") != "9" {
		t.Fatalf("after Retry-After: %d %v", rec.Code, rec.Header())
	}
}

const failDoc = `version: 1
api_key: {header: X-API-Key}
tiers:
  t: {limits: [{name: h, algorithm: fixed_window, quantity: 40, window: 1h}]}
policies:
  - {name: open, routes: ["GET /open"], identity: [api_key], tier: t, fail_mode: open}
  - {name: closed, routes: ["GET /closed"], identity: [api_key], tier: t, fail_mode: closed}
  - {name: local, routes: ["GET /local"], identity: [api_key], tier: t, fail_mode: local}
`

// Done-when 4 (deadline 50ms, breaker: 3 failures, open 5s): with mcproxy killed, each fail mode behaves as configured
// within one store deadline, with zero store calls while the breaker is
// open; traffic recovers when mcproxy returns.
func TestIntegrationFailModesProxyKilled(t *testing.T) {
	edgeBin, mcBin := binaries(t)
	px, shards := onePoP(t, mcBin, 3)
	policyPath := writePolicy(t, t.TempDir(), failDoc)
	e := startEdge(t, edgeBin, upstream(t), px.addr, policyPath,
		"--workers-per-pop", "4", "--store-deadline", "50ms", "--breaker-failures", "3", "--breaker-open", "5s")
	base := "http://" + e.addr
	for _, r := range []string{"/open", "/closed", "/local"} {
		// On a loaded machine a first call may miss the 50ms deadline.
		waitUntil(t, r+" admitted before the failure", func() bool {
			code, _ := get(t, base+r, "warm")
			return code == 200
		})
	}
	px.kill()

	// The breaker opens after 3 failed decisions; each answered by its
	// fail mode, promptly.
	for i := 0; i < 3; i++ {
		start := time.Now()
		code, _ := get(t, base+"/open", "k")
		// Bound on correctness (a dead proxy must not stall requests), not
		// speed: 50ms deadline, generous slack for a loaded machine.
		if el := time.Since(start); el > 2*time.Second || code != 200 {
			t.Fatalf("open while failing: %d after %v", code, el)
		}
	}
	storeCalls := metric(t, e.admin, "poplimit_store_latency_seconds_count", "")
	if st := metric(t, e.admin, "poplimit_breaker_state", ""); st != 1 {
		t.Fatalf("breaker state %v after 3 failures, want 1 (open)", st)
	}
	counts := map[string]map[int]int{}
	var slowest time.Duration
	for _, r := range []string{"/open", "/closed", "/local"} {
		counts[r] = map[int]int{}
		for i := 0; i < 20; i++ {
			start := time.Now()
			code, hd := get(t, base+r, "k")
			slowest = max(slowest, time.Since(start))
			counts[r][code]++
			if code == 503 && hd.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
		}
	}
	t.Logf("while mcproxy is down: %v; slowest HTTP round trip with the breaker open %v", counts, slowest)
	if counts["/open"][200] != 20 || counts["/closed"][503] != 20 || counts["/local"][200] != 10 || counts["/local"][429] != 10 {
		t.Errorf("fail modes: %v; want open 20×200, closed 20×503, local 10×200 (40 ÷ 4 workers) + 10×429", counts)
	}
	after := metric(t, e.admin, "poplimit_store_latency_seconds_count", "")
	if st := metric(t, e.admin, "poplimit_breaker_state", ""); st == 1 && after != storeCalls {
		t.Errorf("%v store calls while the breaker was open", after-storeCalls)
	}
	if fb := metric(t, e.admin, "poplimit_fallback_decisions_total", ""); fb < 63 {
		t.Errorf("fallback decisions metric %v, want ≥ 63", fb)
	}

	// Recovery: mcproxy back on the same address.
	startMcproxy(t, mcBin, px.addr, shards)
	waitUntil(t, "recovery through the store", func() bool {
		code, _ := get(t, base+"/closed", "k2")
		return code == 200 && metric(t, e.admin, "poplimit_breaker_state", "") == 0
	})
}

const tierDoc = `version: 1
api_key: {header: X-API-Key}
keys:
  - {key: upgrade-me, tenant: acme, tier: TIER}
  - {key: steady, tenant: other, tier: pro}
tiers:
  free: {limits: [{name: h, algorithm: fixed_window, quantity: 5, window: 1h}]}
  pro: {limits: [{name: h, algorithm: fixed_window, quantity: 1000000, window: 1h}]}
policies:
  - {name: api, routes: ["/"], identity: [tenant, api_key], tier: api_key, default_tier: free}
`

// Done-when 5: a tier change in the policy file applies to all four
// workers within 1s, with no restart and no failed request.
func TestIntegrationTierChangeReachesAllWorkers(t *testing.T) {
	edgeBin, mcBin := binaries(t)
	px, _ := onePoP(t, mcBin, 3)
	dir := t.TempDir()
	policyPath := writePolicy(t, dir, strings.Replace(tierDoc, "TIER", "free", 1))
	up := upstream(t)
	var workers []*edgeProc
	for i := 0; i < 4; i++ {
		workers = append(workers, startEdge(t, edgeBin, up, px.addr, policyPath, "--workers-per-pop", "4", "--store-deadline", "1s"))
	}
	// Spend the free tier.
	for _, w := range workers {
		for i := 0; i < 3; i++ {
			get(t, "http://"+w.addr+"/x", "upgrade-me")
		}
	}
	if code, hd := get(t, "http://"+workers[0].addr+"/x", "upgrade-me"); code != 429 || hd.Get("RateLimit-Limit") != "5" {
		t.Fatalf("free tier not enforced: %d %v", code, hd)
	}
	// Background traffic from another client must never fail.
	ctx, cancel := context.WithCancel(context.Background())
	var failed, sent atomic.Int64
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r, _ := http.NewRequest("GET", "http://"+w.addr+"/bg", nil)
				r.Header.Set("X-API-Key", "steady")
				resp, err := httpClient.Do(r)
				sent.Add(1)
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	changed := time.Now()
	writePolicy(t, dir, strings.Replace(tierDoc, "TIER", "pro", 1))
	var slowest time.Duration
	for i, w := range workers {
		waitUntil(t, fmt.Sprintf("worker %d on the pro tier", i), func() bool {
			code, hd := get(t, "http://"+w.addr+"/x", "upgrade-me")
			return code == 200 && hd.Get("RateLimit-Limit") == "1000000"
		})
		slowest = max(slowest, time.Since(changed))
	}
	cancel()
	wg.Wait()
	t.Logf("tier change visible on all 4 workers after %v; %d background requests, %d failed", slowest, sent.Load(), failed.Load())
	if slowest > time.Second {
		t.Errorf("tier change took %v to reach every worker, want ≤ 1s", slowest)
	}
	if failed.Load() != 0 {
		t.Errorf("%d of %d background requests failed during the reload", failed.Load(), sent.Load())
	}
}

// cmd/edge without --memcached: in-process store, admin endpoints, events.
func TestIntegrationEdgeStandalone(t *testing.T) {
	edgeBin, _ := binaries(t)
	dir := t.TempDir()
	policyPath := writePolicy(t, dir, strings.ReplaceAll(algoPolicy, "LIMIT", "3"))
	events := dir + "/events.jsonl"
	e := startEdge(t, edgeBin, upstream(t), "", policyPath, "--events", events)
	codes := map[int]int{}
	for i := 0; i < 5; i++ {
		code, _ := get(t, "http://"+e.addr+"/fw", "standalone-secret")
		codes[code]++
	}
	if codes[200] != 3 || codes[429] != 2 {
		t.Fatalf("statuses %v, want 3×200 and 2×429", codes)
	}
	resp, err := http.Post("http://"+e.admin+"/reload", "", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /reload: %v %v", resp, err)
	}
	resp.Body.Close()
	if got := metric(t, e.admin, "poplimit_decisions_total", `allowed="false"`); got != 2 {
		t.Errorf("rejected decisions metric %v, want 2", got)
	}
	// Events are flushed at least every second.
	waitUntil(t, "2 rejection events", func() bool {
		b, _ := os.ReadFile(events)
		return strings.Count(string(b), "\n") == 2
	})
	b, _ := os.ReadFile(events)
	if strings.Contains(string(b), "standalone-secret") || !strings.Contains(string(b), policy.KeyID("standalone-secret")) {
		t.Errorf("events must carry the key digest, never the key: %s", b)
	}
}

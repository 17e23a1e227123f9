package pop_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/pop"
)

// onePoP starts 3 memcached shards and one mcproxy in front of them.
func onePoP(t *testing.T, mcproxyBin string, shards int) (*proc, []*bench.Memcached) {
	t.Helper()
	ms := bench.MemcachedForTest(t, shards)
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
`

// Done-when 1: three shards, one mcproxy, four edge processes; a client
// sending 2× its limit spread over the workers is admitted, in total,
// within 1% of the limit (fixed window and token bucket: the PoP shares one
// count); the sliding window's admitted count is reported.
func TestIntegrationPoPSharesOneCount(t *testing.T) {
	edgeBin, mcBin := binaries(t)
	px, _ := onePoP(t, mcBin, 3)
	const limit = 200
	policy := writePolicy(t, t.TempDir(), strings.ReplaceAll(algoPolicy, "LIMIT", strconv.Itoa(limit)))
	up := upstream(t)
	var workers []string
	for i := 0; i < 4; i++ {
		workers = append(workers, startEdge(t, edgeBin, up, px.addr, policy, "--workers-per-pop", "4").addr)
	}
	key := fmt.Sprintf("client-%d", rand.Uint64())
	hour := time.Now().Truncate(time.Hour)
	for _, route := range []string{"/fw", "/tb", "/sw"} {
		got := blast(t, workers, route, key, 2*limit)
		t.Logf("%s: %d of %d admitted over 4 workers (limit %d)", route, got, 2*limit, limit)
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
	policy := writePolicy(t, t.TempDir(), strings.ReplaceAll(algoPolicy, "LIMIT", strconv.Itoa(limit)))
	up := upstream(t)
	var pops [2][]string
	for p := range pops {
		px, _ := onePoP(t, mcBin, 2)
		for i := 0; i < 2; i++ {
			pops[p] = append(pops[p], startEdge(t, edgeBin, up, px.addr, policy, "--workers-per-pop", "2").addr)
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
	store := counter.NewMemcacheStore(counter.NewMemcacheClient(counter.MemcacheConfig{Servers: []string{px.addr}, Timeout: time.Second}))
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

package pop_test

// The limit options beside the rate algorithms (dry run, concurrency,
// count_if, mitigation timeout) across one PoP: four edge processes, one
// mcproxy, three memcached.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fourEdges starts one PoP (3 memcached, mcproxy) and four edge workers
// on policy.
func fourEdges(t *testing.T, up, policy string, extra ...string) []*edgeProc {
	t.Helper()
	edgeBin, mcBin := binaries(t)
	px, _ := onePoP(t, mcBin, 3)
	var edges []*edgeProc
	for range 4 {
		args := append([]string{"--workers-per-pop", "4", "--store-deadline", "1s"}, extra...)
		edges = append(edges, startEdge(t, edgeBin, up, px.addr, policy, args...))
	}
	return edges
}

// send issues method url with header pairs and returns status and headers.
func send(t *testing.T, method, url string, hdr ...string) (int, http.Header) {
	t.Helper()
	r, _ := http.NewRequestWithContext(context.Background(), method, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := httpClient.Do(r)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

const concIntegrationDoc = `version: 1
api_key: {header: X-API-Key}
tiers:
  t: {limits: [{name: inflight, algorithm: concurrency, quantity: 10, max_request_time: 3s, retry_after: 1s}]}
policies:
  - {name: slow, routes: ["/slow", "/hold"], identity: [api_key], tier: t}
`

// TestIntegrationConcurrencyLimit: 100 concurrent slow requests of one key
// over four workers never have more than 10 in flight at the upstream;
// with 10 held on a worker that is then killed, the slots come back within
// 1.25 × max_request_time (3s) of their admission, and not at once.
func TestIntegrationConcurrencyLimit(t *testing.T) {
	var inFlight, peak, served atomic.Int64
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		wait := 300 * time.Millisecond
		if r.URL.Path == "/hold" {
			wait = 20 * time.Second
		}
		select {
		case <-time.After(wait):
		case <-release:
		case <-r.Context().Done():
		}
		served.Add(1)
	}))
	defer up.Close()
	defer close(release)
	edges := fourEdges(t, up.URL, writePolicy(t, t.TempDir(), concIntegrationDoc))

	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, h := send(t, "GET", "http://"+edges[i%4].addr+"/slow", "X-API-Key", "c1")
			switch {
			case code == 200:
				ok.Add(1)
			case code == 429 && h.Get("Retry-After") == "1":
				refused.Add(1)
			default:
				t.Errorf("status %d, Retry-After %q", code, h.Get("Retry-After"))
			}
		}()
	}
	wg.Wait()
	t.Logf("100 concurrent slow requests over 4 workers: %d admitted, %d refused, peak %d in flight at the upstream", ok.Load(), refused.Load(), peak.Load())
	// Racing requests may refuse one another (each sees the others'
	// increments): fewer than 10 may be admitted, never more in flight.
	if peak.Load() > 10 || ok.Load() == 0 {
		t.Errorf("peak %d in flight (limit 10), %d admitted", peak.Load(), ok.Load())
	}

	// Ten held requests on worker 0, which is killed with them in flight.
	var held sync.WaitGroup
	start := time.Now()
	for range 10 {
		held.Add(1)
		go func() {
			defer held.Done()
			r, _ := http.NewRequest("GET", "http://"+edges[0].addr+"/hold", nil)
			r.Header.Set("X-API-Key", "c2")
			if resp, err := httpClient.Do(r); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitUntil(t, "10 held at the upstream", func() bool { return inFlight.Load() == 10 })
	admittedBy := time.Since(start)
	edges[0].kill()
	held.Wait()
	if code, _ := send(t, "GET", "http://"+edges[1].addr+"/slow", "X-API-Key", "c2"); code != 429 {
		t.Fatalf("right after the kill: %d, want 429 (the dead worker's slots still count)", code)
	}
	// Timing-proof bounds: a request is decided after it is sent and
	// before its answer arrives. Every refusal must have been sent within
	// 1.25 × 3s of the held requests' admission, and the first admission
	// answered no earlier than 3s after it.
	var lastRefused, back time.Duration
	for {
		sent := time.Since(start)
		code, _ := send(t, "GET", "http://"+edges[1+int(time.Now().UnixNano()%3)].addr+"/slow", "X-API-Key", "c2")
		if code == 200 {
			back = time.Since(start)
			break
		}
		lastRefused = sent
		if time.Since(start) > 10*time.Second {
			t.Fatal("slots of the killed worker still held after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("killed worker's slots: last refusal sent %v, first admission answered %v after the held requests were sent (admitted within %v; max_request_time 3s, bound 3.75s)", lastRefused, back, admittedBy)
	if back < 3*time.Second {
		t.Errorf("admitted %v after the held requests, before max_request_time (3s): they stopped counting early", back)
	}
	if lastRefused > 3750*time.Millisecond+admittedBy {
		t.Errorf("refused %v after the held requests were admitted, beyond 1.25 × max_request_time (3.75s)", lastRefused-admittedBy)
	}
}

const shadowIntegrationDoc = `version: 1
SHADOWapi_key: {header: X-API-Key}
tiers:
  t: {limits: [{name: hourly, algorithm: fixed_window, quantity: 20, window: 1h}]}
policies:
  - {name: api, routes: ["/api"], identity: [api_key], tier: t}
`

// TestIntegrationShadowMatchesEnforcing: the same seeded traffic (8 keys,
// skewed) is sent in dry run and, after a reload that promotes the limit,
// enforcing: the dry run admits everything and its metric counts exactly
// the enforcing run's rejections.
func TestIntegrationShadowMatchesEnforcing(t *testing.T) {
	dir := t.TempDir()
	policy := writePolicy(t, dir, strings.Replace(shadowIntegrationDoc, "SHADOW", "shadow: true\nshadow_header: true\n", 1))
	edges := fourEdges(t, upstream(t), policy)
	run := func(prefix string) (admitted, refused, shadowHeaders int64) {
		rng := rand.New(rand.NewPCG(42, 14))
		keys := make([]string, 400)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d", prefix, int(rng.ExpFloat64()*2)%8)
		}
		var next, a, r, s atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
					code, h := send(t, "GET", "http://"+edges[i%4].addr+"/api", "X-API-Key", keys[i])
					switch code {
					case 200:
						a.Add(1)
						if h.Get("X-Ratelimit-Shadow") == "hourly" {
							s.Add(1)
						}
					case 429:
						r.Add(1)
					default:
						t.Errorf("status %d", code)
					}
				}
			}()
		}
		wg.Wait()
		return a.Load(), r.Load(), s.Load()
	}
	shadowMetric := func() float64 {
		var sum float64
		for _, e := range edges {
			sum += metric(t, e.admin, "poplimit_shadow_rejections_total", `limit="hourly"`)
		}
		return sum
	}
	stamp := fmt.Sprint(rand.Uint64())
	hour := time.Now().Truncate(time.Hour)
	dA, dR, dH := run("dry" + stamp)
	would := shadowMetric()
	writePolicy(t, dir, strings.Replace(shadowIntegrationDoc, "SHADOW", "", 1))
	for _, e := range edges {
		r, _ := http.NewRequest("POST", "http://"+e.admin+"/reload", nil)
		resp, err := httpClient.Do(r)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("reload: %v %v", err, resp)
		}
		resp.Body.Close()
	}
	eA, eR, _ := run("enf" + stamp)
	t.Logf("dry run: %d admitted, %d refused, %v would-be rejections (%d answers named the limit); enforcing: %d admitted, %d refused", dA, dR, would, dH, eA, eR)
	if time.Now().Truncate(time.Hour) != hour {
		t.Skip("the runs straddled an hour boundary: the fixed windows differ")
	}
	if dR != 0 || dA != 400 || eR == 0 || int64(would) != eR || dH != eR {
		t.Errorf("dry run refused %d, would-be %v (headers %d); enforcing refused %d: want 0 and equal", dR, would, dH, eR)
	}
}

const stuffingDoc = `version: 1
trusted_proxies: [127.0.0.1/32]
tiers:
  t: {limits: [{name: failed_logins, algorithm: fixed_window, quantity: 5, window: 1h, count_if: {status: [401]}}]}
policies:
  - {name: login, routes: ["POST /login"], identity: [ip], tier: t}
`

// TestIntegrationCountIfStopsCredentialStuffing: failed logins (401) from
// one address lock it out on every worker after 5; a user logging in
// correctly from another address is never limited.
func TestIntegrationCountIfStopsCredentialStuffing(t *testing.T) {
	var wrong atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") != "right" {
			wrong.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome")
	}))
	defer up.Close()
	edges := fourEdges(t, up.URL, writePolicy(t, t.TempDir(), stuffingDoc))
	codes := map[string]map[int]int{"stuffer": {}, "user": {}}
	for i := range 60 {
		base := "http://" + edges[i%4].addr + "/login"
		c, _ := send(t, "POST", base, "X-Forwarded-For", "203.0.113.66", "X-Password", fmt.Sprint("guess", i))
		codes["stuffer"][c]++
		c, _ = send(t, "POST", base, "X-Forwarded-For", "198.51.100.7", "X-Password", "right")
		codes["user"][c]++
	}
	t.Logf("60 attempts each over 4 workers: %v; the upstream saw %d wrong passwords", codes, wrong.Load())
	if codes["user"][200] != 60 {
		t.Errorf("the correct user was limited: %v", codes["user"])
	}
	if w := wrong.Load(); w < 5 || w > 6 || codes["stuffer"][429] < 54 {
		t.Errorf("stuffer: %d wrong passwords reached the upstream, %v; want 5 (6 if one raced the flag), the rest 429", w, codes["stuffer"])
	}
}

const mitigationIntegrationDoc = `version: 1
api_key: {header: X-API-Key}
tiers:
  t: {limits: [{name: burst, algorithm: fixed_window, quantity: 3, window: 2s, mitigation_timeout: 10s}]}
policies:
  - {name: api, routes: ["/api"], identity: [api_key], tier: t}
`

// TestIntegrationMitigationTimeoutOnAllWorkers: an attacker refused on
// worker 0 is refused, once its window has ended, by workers 1-3 that never
// saw it, until the timeout ends; other keys pass meanwhile.
func TestIntegrationMitigationTimeoutOnAllWorkers(t *testing.T) {
	edges := fourEdges(t, upstream(t), writePolicy(t, t.TempDir(), mitigationIntegrationDoc))
	attacker := fmt.Sprint("attacker-", rand.Uint64())
	var refusedAt time.Time // sent at or before the refusal
	for i := 0; refusedAt.IsZero(); i++ {
		sent := time.Now()
		if c, _ := send(t, "GET", "http://"+edges[0].addr+"/api", "X-API-Key", attacker); c == 429 {
			refusedAt = sent
		}
		if i == 50 {
			t.Fatal("worker 0 never refused 50 requests (limit 3 in 2s)")
		}
	}
	// The refusal's window ends by the next 2s boundary after it was
	// answered; the flag lasts 10s from the refusal, so until ≥ refusedAt+10s.
	time.Sleep(time.Until(time.Now().Truncate(2 * time.Second).Add(2*time.Second + 50*time.Millisecond)))
	for i, e := range edges[1:] {
		c, h := send(t, "GET", "http://"+e.addr+"/api", "X-API-Key", attacker)
		if time.Since(refusedAt) >= 10*time.Second {
			t.Skip("the host is too slow to check inside the 10s timeout")
		}
		ra, _ := strconv.Atoi(h.Get("Retry-After"))
		if c != 429 || ra < 1 || ra > 10 {
			t.Errorf("worker %d, which never saw the attacker, after its window ended: %d (Retry-After %q)", i+1, c, h.Get("Retry-After"))
		}
		if c, _ := send(t, "GET", "http://"+e.addr+"/api", "X-API-Key", "bystander"+attacker); c != 200 {
			t.Errorf("worker %d refused a bystander: %d", i+1, c)
		}
	}
	for i, e := range edges[1:] {
		if metric(t, e.admin, "poplimit_mitigation_flags_total", `event="hit"`) < 1 {
			t.Errorf("worker %d: no mitigation flag hit", i+1)
		}
	}
	// The flag ends at most 10s after the refusal was answered (the
	// answer came within 1s here); the new window has no count.
	time.Sleep(time.Until(refusedAt.Add(11 * time.Second)))
	if c, _ := send(t, "GET", "http://"+edges[2].addr+"/api", "X-API-Key", attacker); c != 200 {
		t.Errorf("after the 10s timeout: %d", c)
	}
}

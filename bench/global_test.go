package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// globalSetup is a home store behind a relay and PoPs whose edges count
// GET /g with a global limit of quantity per hour.
type globalSetup struct {
	home *PoP
	pops []*PoP
}

// launchGlobal starts the home store (one memcached behind mcproxy and a
// relay of delay each way) and pops PoPs of edges edge workers each. The
// hour-long window is chosen so a test never straddles two; a test that
// would start within a minute of the hour waits for it to pass.
func launchGlobal(t *testing.T, pops, edges int, quantity int64, delay time.Duration, edgeArgs ...string) *globalSetup {
	t.Helper()
	fixture.RequireMemcached(t)
	env := newTestEnv(t, true)
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < time.Minute {
		time.Sleep(left + time.Second)
	}
	ctx := context.Background()
	home, err := env.Launch(ctx, PoPConfig{Name: "home", Shards: 1, Proxies: 1, StoreDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	s := &globalSetup{home: home}
	for i := 0; i < pops; i++ {
		p, err := env.Launch(ctx, PoPConfig{Name: fmt.Sprintf("pop%d", i), Shards: 2, Proxies: 1, Edges: edges,
			Policy:   globalPolicy(quantity, time.Hour, true),
			EdgeArgs: append([]string{"--global-memcached", home.StoreRelays[0].Addr, "--pops", fmt.Sprint(pops)}, edgeArgs...)})
		if err != nil {
			t.Fatal(err)
		}
		s.pops = append(s.pops, p)
	}
	return s
}

// get sends one GET /g as the test's client to an edge.
func get(ctx context.Context, t *HTTPTarget) Outcome {
	return t.Do(ctx, 0, &Client{ID: "roamer"}, &Route{Path: "/g"})
}

// metric sums a metric over the edges given.
func metric(t *testing.T, name string, edges ...*edgeProc) float64 {
	t.Helper()
	var v float64
	for _, e := range edges {
		m, err := ScrapeMetrics(e.Admin)
		if err != nil {
			t.Fatal(err)
		}
		v += m.Sum(name, "", "")
	}
	return v
}

// health reads an edge's /healthz.
func health(t *testing.T, e *edgeProc) (status string, reasons []string) {
	t.Helper()
	resp, err := http.Get(e.Admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Status  string   `json:"status"`
		Reasons []string `json:"reasons"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h.Status, h.Reasons
}

// TestGlobalBurstFromAllPoPs: 8 edge workers (4 PoPs × 2) × 32 goroutines
// at one global key at once, the home store 20 ms away each way: the
// admissions never exceed the limit (the bound with no overdraft, one
// clock: L).
func TestGlobalBurstFromAllPoPs(t *testing.T) {
	const limit = 300
	s := launchGlobal(t, 4, 2, limit, 20*time.Millisecond)
	ctx := context.Background()
	var admitted, rejected, failed atomic.Int64
	var wg sync.WaitGroup
	for _, p := range s.pops {
		for _, e := range p.Edges {
			target := NewHTTPTarget([]string{e.URL}, 32)
			defer target.Close()
			for g := 0; g < 32; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 8; i++ {
						switch get(ctx, target) {
						case Admitted:
							admitted.Add(1)
						case Rejected:
							rejected.Add(1)
						default:
							failed.Add(1)
						}
						time.Sleep(5 * time.Millisecond)
					}
				}()
			}
		}
	}
	wg.Wait()
	var edges []*edgeProc
	for _, p := range s.pops {
		edges = append(edges, p.Edges...)
	}
	claimed := metric(t, "poplimit_global_tokens_claimed_total", edges...)
	t.Logf("admitted %d, rejected %d, failed %d of %d; tokens claimed %v", admitted.Load(), rejected.Load(), failed.Load(), 8*32*8, claimed)
	// Units lent to requests whose wait ran out (path "timeout") are the
	// only admissions no grant may back (the package's bound).
	var lent float64
	for _, e := range edges {
		m, err := ScrapeMetrics(e.Admin)
		if err != nil {
			t.Fatal(err)
		}
		lent += m.Sum("poplimit_global_decisions_total", "path", "timeout")
	}
	if n := admitted.Load(); float64(n) > limit+lent || n == 0 {
		t.Fatalf("admitted %d under a global limit of %d (%v waits ran out)", n, limit, lent)
	}
	if failed.Load() > 0 {
		t.Errorf("%d requests failed", failed.Load())
	}
	if claimed > limit {
		t.Errorf("PoPs claimed %v tokens of %d", claimed, limit)
	}
}

// TestGlobalHomeStoreKilledAndRestored: with the home store's memcached
// killed, a PoP (fail_mode local) keeps admitting on its allocation, then
// its share (limit ÷ 2 PoPs) and no more; /healthz and the metrics say
// so; once the store is back the PoP claims from it again without a
// restart.
func TestGlobalHomeStoreKilledAndRestored(t *testing.T) {
	const limit, share = 100, 50
	s := launchGlobal(t, 2, 1, limit, 5*time.Millisecond)
	ctx := context.Background()
	edge := s.pops[0].Edges[0]
	target := NewHTTPTarget([]string{edge.URL}, 4)
	defer target.Close()
	drive := func(n int) (admitted int) {
		for i := 0; i < n; i++ {
			if get(ctx, target) == Admitted {
				admitted++
			}
			time.Sleep(20 * time.Millisecond)
		}
		return admitted
	}
	before := drive(10)
	if st, _ := health(t, edge); st != "ok" || before == 0 {
		t.Fatalf("before the kill: health %s, admitted %d", st, before)
	}
	s.home.Shards[0].Kill()
	during := drive(150)
	claimed := metric(t, "poplimit_global_tokens_claimed_total", edge)
	st, reasons := health(t, edge)
	t.Logf("admitted %d before the kill, %d while the home store was down (claimed %v); health %s %v", before, during, claimed, st, reasons)
	if st != "degraded" || !strings.Contains(strings.Join(reasons, " "), "global store unreachable") {
		t.Errorf("health %s %v while the home store is down", st, reasons)
	}
	if up := metric(t, "poplimit_global_home_up", edge); up != 0 {
		t.Errorf("poplimit_global_home_up %v while down", up)
	}
	if total := float64(before + during); total > max(share, claimed) {
		t.Errorf("PoP admitted %v in the window, bound max(share %d, claimed %v)", total, share, claimed)
	}
	if during == 0 {
		t.Error("nothing admitted on the allocation and share while the home store was down")
	}
	if err := s.home.Shards[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		drive(5)
		if st, _ := health(t, edge); st == "ok" {
			break
		}
		if time.Now().After(deadline) {
			st, reasons := health(t, edge)
			t.Fatalf("20s after the home store came back: health %s %v", st, reasons)
		}
	}
	if up := metric(t, "poplimit_global_home_up", edge); up != 1 {
		t.Errorf("poplimit_global_home_up %v after recovery", up)
	}
	if failures := metric(t, "poplimit_global_refill_failures_total", edge); failures == 0 {
		t.Error("no refill failure counted")
	}
}

// TestGlobalWorkerKilledMidRefill: a worker is SIGKILLed while its claim
// is in flight to a home store 400 ms away each way (after the home store
// counted it, before the answer is back); its PoP's other worker claims
// for its own requests (and takes over the refills once the lock's
// deadline passes), and the PoP never admits more than the limit (the
// lost batch is under-admission). Requests wait up to 1s for a claim (the
// home round trip is 800ms).
func TestGlobalWorkerKilledMidRefill(t *testing.T) {
	const limit = 60
	s := launchGlobal(t, 1, 2, limit, 400*time.Millisecond, "--global-wait", "1s")
	ctx := context.Background()
	p := s.pops[0]
	first := NewHTTPTarget([]string{p.Edges[0].URL}, 4)
	defer first.Close()
	admitted := 0
	if get(ctx, first) == Admitted { // an empty pool: this starts the refill
		admitted++
	}
	time.Sleep(600 * time.Millisecond)
	p.Edges[0].Proc.Kill()
	s.home.StoreRelays[0].SetDelay(5 * time.Millisecond)
	second := NewHTTPTarget([]string{p.Edges[1].URL}, 4)
	defer second.Close()
	for i := 0; i < 300; i++ {
		if get(ctx, second) == Admitted {
			admitted++
		}
		time.Sleep(15 * time.Millisecond)
	}
	claimed := metric(t, "poplimit_global_tokens_claimed_total", p.Edges[1])
	t.Logf("admitted %d of %d; the surviving worker claimed %v (the rest went to the killed worker's lost batch)", admitted, limit, claimed)
	if admitted > limit {
		t.Fatalf("admitted %d under a global limit of %d", admitted, limit)
	}
	if claimed == 0 {
		t.Fatal("the surviving worker never took over the refills")
	}
}

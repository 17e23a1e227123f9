package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

func popctl(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), append([]string{"--dsn", dsn}, args...), &out); err != nil {
		t.Fatalf("popctl %v: %v", args, err)
	}
	return out.String()
}

// TestFourEdges: popctl migrates (twice: nothing the second time), writes
// tiers and a key; four edge processes on --policy-source serve it; under
// load from all four, a tier upgrade and a revocation (403) reach every
// edge (delays logged: the issue wants under 1 s) with no failed request;
// an edge started while PostgreSQL is down serves its cached snapshot.
func TestFourEdges(t *testing.T) {
	pg := fixture.Postgres(t)
	edgeBin := fixture.Binary(t, "edge")
	dsn := pg.DSN
	if out := popctl(t, dsn, "migrate"); !strings.Contains(out, "applied 3") {
		t.Fatalf("migrate: %q", out)
	}
	if out := popctl(t, dsn, "migrate"); !strings.Contains(out, "applied 0") {
		t.Fatalf("second migrate: %q", out)
	}
	popctl(t, dsn, "set-tier", "--tier", "free", "--route", "GET /api/", "--max", "2", "--window", "60", "--anonymous")
	popctl(t, dsn, "set-tier", "--tier", "pro", "--route", "GET /api/", "--max", "1000000", "--window", "60")
	popctl(t, dsn, "issue-key", "--tier", "free", "cust-1")
	if out := popctl(t, dsn, "tiers"); !strings.Contains(out, "free") || !strings.Contains(out, "pro") {
		t.Fatalf("tiers: %q", out)
	}
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	dir := t.TempDir()
	var admins []string
	start := func(i int) string {
		addr, admin := fixture.FreeAddr(t), fixture.FreeAddr(t)
		admins = append(admins, "http://"+admin)
		p, err := procs.StartProc(fmt.Sprintf("edge-%d", i), edgeBin, []string{"--listen", addr, "--admin", admin, "--upstream", up.URL,
			"--policy-source", dsn, "--policy-cache", filepath.Join(dir, fmt.Sprintf("cache-%d.json", i%4))}, filepath.Join(dir, fmt.Sprintf("edge-%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(5 * time.Second) })
		return "http://" + addr
	}
	var edges []string
	for i := range 4 {
		edges = append(edges, start(i))
	}
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(base, key string) (int, string) {
		req, _ := http.NewRequest("GET", base+"/api/x", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("RateLimit-Policy")
	}
	pro := func(code int, pol string) bool { return code == 200 && strings.Contains(pol, "q=1000000") }
	waitAll := func(ok func(int, string) bool) time.Duration {
		t0 := time.Now()
		for _, e := range edges {
			for {
				if ok(get(e, "cust-1")) {
					break
				}
				if time.Since(t0) > 15*time.Second {
					code, pol := get(e, "cust-1")
					t.Fatalf("%s: still %d %q", e, code, pol)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		return time.Since(t0)
	}
	waitAll(func(code int, pol string) bool { return strings.Contains(pol, "q=2") })
	var fails, n atomic.Int64
	var last atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, e := range edges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, _ := get(e, "cust-1")
				n.Add(1)
				if code != 200 && code != 429 && code != 403 {
					fails.Add(1)
					last.Store(code)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	t0 := time.Now()
	popctl(t, dsn, "issue-key", "--tier", "pro", "cust-1")
	waitAll(pro)
	t.Logf("tier upgrade: all 4 edges answer pro %v after popctl returned", time.Since(t0).Round(time.Millisecond))
	pg.Down()
	time.Sleep(time.Second)
	late := start(4) // cache of edge 0, PostgreSQL down
	for t2 := time.Now(); time.Since(t2) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		if code, _ := get(late, "cust-1"); code != 0 {
			break
		}
	}
	if code, pol := get(late, "cust-1"); !pro(code, pol) {
		t.Fatalf("edge started while PostgreSQL is down: %d %q, want the cached pro tier", code, pol)
	}
	if err := pg.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	tUp := time.Now()
	edges = append(edges, late)
	waitAll(pro)
	for _, a := range admins { // reconnected (backoff up to 5 s)
		for t2 := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			resp, err := client.Get(a + "/healthz")
			if err == nil {
				var b bytes.Buffer
				b.ReadFrom(resp.Body)
				resp.Body.Close()
				if strings.Contains(b.String(), `"status":"ok"`) {
					break
				}
			}
			if time.Since(t2) > 10*time.Second {
				t.Fatalf("%s/healthz not ok after PostgreSQL came back", a)
			}
		}
	}
	t.Logf("all 5 edges healthy again %v after PostgreSQL came back", time.Since(tUp).Round(time.Millisecond))
	t1 := time.Now()
	popctl(t, dsn, "revoke-key", "cust-1")
	waitAll(func(code int, _ string) bool { return code == http.StatusForbidden })
	t.Logf("revocation: all 5 edges answer 403 %v after popctl returned", time.Since(t1).Round(time.Millisecond))
	close(stop)
	wg.Wait()
	if fails.Load() > 0 {
		t.Fatalf("%d of %d requests failed (last status %v)", fails.Load(), n.Load(), last.Load())
	}
	t.Logf("%d requests through 4 edges, none failed, across an upgrade, a PostgreSQL outage and a revocation", n.Load())
}

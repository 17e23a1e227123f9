package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

const popConfig = `domain: pop
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: %d, fail_mode: open}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket, burst: 100}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 1000, fail_mode: closed}
  - key: local
    rate_limit: {unit: minute, requests_per_unit: 40, fail_mode: local}
`

// rlsPoP is 3 memcached, one mcproxy and n rls processes over it.
type rlsPoP struct {
	dir     string
	mcproxy *procs.Proc
	shards  []string
	clients []rlv3.RateLimitServiceClient
	http    []string
}

func startPoP(t *testing.T, n int) *rlsPoP {
	t.Helper()
	rlsBin, mcBin := fixture.Binary(t, "rls"), fixture.Binary(t, "mcproxy")
	p := &rlsPoP{dir: t.TempDir(), shards: fixture.Addrs(fixture.Memcached(t, 3))}
	p.mcproxy = fixture.Mcproxy(t, mcBin, "", p.shards, "--admin", "")
	p.startRLS(t, rlsBin, n, "--memcached", p.mcproxy.Addr)
	return p
}

// startRLS starts n rls processes over the store named by storeArgs, all
// loading popConfig (limit 100) from p.dir.
func (p *rlsPoP) startRLS(t *testing.T, rlsBin string, n int, storeArgs ...string) {
	t.Helper()
	writeConfig(t, p.dir, fmt.Sprintf(popConfig, 100))
	for range n {
		g, h := fixture.FreeAddr(t), fixture.FreeAddr(t)
		args := append([]string{"--grpc", g, "--http", h, "--config-dir", p.dir, "--workers-per-pop", strconv.Itoa(n),
			"--store-deadline", "300ms", "--breaker-failures", "3", "--breaker-open", "5s"}, storeArgs...)
		pr := fixture.Start(t, rlsBin, args...)
		err := pr.WaitReady(context.Background(), 15*time.Second, func() error {
			resp, err := http.Get("http://" + h + "/healthcheck")
			if err == nil {
				resp.Body.Close()
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(g, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		p.clients = append(p.clients, rlv3.NewRateLimitServiceClient(cc))
		p.http = append(p.http, h)
	}
}

func writeConfig(t *testing.T, dir, body string) {
	t.Helper()
	tmp := filepath.Join(dir, ".pop.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "pop.yaml")); err != nil {
		t.Fatal(err)
	}
}

func ask(ctx context.Context, c rlv3.RateLimitServiceClient, key, value string) (*rlv3.RateLimitResponse, error) {
	return c.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "pop", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
}

// burst sends total requests for (key, value) from workers concurrent
// callers spread over every process and counts the OK answers.
func (p *rlsPoP) burst(t *testing.T, key, value string, total, workers int) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ok, sent, errs atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := p.clients[w%len(p.clients)]
			for sent.Add(1) <= int64(total) {
				resp, err := ask(ctx, c, key, value)
				switch {
				case err != nil:
					errs.Add(1)
				case resp.OverallCode == rlv3.RateLimitResponse_OK:
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d errors", errs.Load())
	}
	return ok.Load()
}

// awayFromMinuteEnd waits, if needed, so that a burst of a few seconds
// stays inside one minute (the fixed window).
func awayFromMinuteEnd() {
	if s := time.Now().Second(); s >= 50 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
}

// TestExactAcrossFourProcesses: 1,000 requests from 256 concurrent gRPC
// clients over 4 rls processes at one descriptor limited to 100 get
// exactly 100 OK, for a fixed window (100/minute) and a token bucket (100
// per hour, burst 100: no refill within the test), 5 runs each.
func TestExactAcrossFourProcesses(t *testing.T) {
	p := startPoP(t, 4)
	for run := range 5 {
		awayFromMinuteEnd()
		for _, key := range []string{"fixed", "bucket"} {
			v := fmt.Sprintf("run%d-%d", run, time.Now().UnixNano())
			if ok := p.burst(t, key, v, 1000, 256); ok != 100 {
				t.Errorf("run %d %s: %d OK of 1000, want exactly 100", run, key, ok)
			}
		}
	}
}

// TestFailModesMcproxyKilled: with mcproxy killed every descriptor answers
// by its fail mode, each answer within one store deadline (plus slack for
// a loaded host), and answers come from the store again once mcproxy is
// back, without restarting rls.
func TestFailModesMcproxyKilled(t *testing.T) {
	p := startPoP(t, 1)
	c := p.clients[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, k := range []string{"fixed", "closed", "local"} {
		if resp, err := ask(ctx, c, k, "warm"); err != nil || resp.OverallCode != rlv3.RateLimitResponse_OK {
			t.Fatalf("%s before the failure: %v %v", k, resp, err)
		}
	}
	p.mcproxy.Kill()
	codes := map[string]map[string]int{}
	var slowest time.Duration
	for _, k := range []string{"fixed", "closed", "local"} {
		codes[k] = map[string]int{}
		for range 20 {
			start := time.Now()
			resp, err := ask(ctx, c, k, "x")
			slowest = max(slowest, time.Since(start))
			if err != nil {
				t.Fatal(err)
			}
			codes[k][resp.OverallCode.String()]++
		}
	}
	t.Logf("mcproxy down: %v, slowest answer %v", codes, slowest)
	// local: 40/minute ÷ 1 process, but the first decisions (before the
	// breaker opens) may fail open or be counted: at least 20 OK of 20.
	if codes["fixed"]["OK"] != 20 || codes["closed"]["OVER_LIMIT"] != 20 || codes["local"]["OK"] != 20 {
		t.Errorf("fail modes %v: want fixed (open) 20 OK, closed 20 OVER_LIMIT, local 20 OK (under its local 40)", codes)
	}
	if slowest > 300*time.Millisecond+2*time.Second {
		t.Errorf("slowest answer %v with the store dead, want within the 300ms deadline (+2s slack)", slowest)
	}
	if err := p.mcproxy.Restart(ctx, func() error { return procs.Ping(p.mcproxy.Addr, 200*time.Millisecond) }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := ask(ctx, c, "closed", "after")
		if err == nil && resp.OverallCode == rlv3.RateLimitResponse_OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after mcproxy came back: %v %v", resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConfigEditReachesEveryProcess: a raised limit is in every process's
// answers soon after the file changes (the time is logged; the bound
// asserted is generous), no request fails meanwhile, and a broken file
// changes nothing.
func TestConfigEditReachesEveryProcess(t *testing.T) {
	p := startPoP(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	limitOf := func(c rlv3.RateLimitServiceClient) uint32 {
		resp, err := ask(ctx, c, "fixed", "probe")
		if err != nil {
			t.Fatalf("request failed during the reload: %v", err)
		}
		return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	for _, c := range p.clients {
		if got := limitOf(c); got != 100 {
			t.Fatalf("initial limit %d", got)
		}
	}
	start := time.Now()
	writeConfig(t, p.dir, fmt.Sprintf(popConfig, 250))
	waitAll := func(want uint32) time.Duration {
		for i, c := range p.clients {
			for limitOf(c) != want {
				if time.Since(start) > 20*time.Second {
					t.Fatalf("process %d still not at limit %d", i, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		return time.Since(start)
	}
	t.Logf("limit raised 100 → 250 in all 4 processes after %v", waitAll(250))
	writeConfig(t, p.dir, "domain: pop\ndescriptors:\n  - key: fixed\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	deadline := time.Now().Add(20 * time.Second)
	for _, h := range p.http {
		for loadErrors(t, h) < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s never reported the broken file", h)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i, c := range p.clients {
		if got := limitOf(c); got != 250 {
			t.Errorf("process %d: limit %d after a broken file, want 250 kept", i, got)
		}
	}
	start = time.Now()
	writeConfig(t, p.dir, fmt.Sprintf(popConfig, 50))
	t.Logf("limit lowered 250 → 50 in all 4 processes after %v", waitAll(50))
}

// loadErrors is poplimit_rls_config_loads_total{result="error"} of the
// rls at h.
func loadErrors(t *testing.T, h string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + h + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, l := range strings.Split(string(b), "\n") {
		if _, err := fmt.Sscanf(l, `poplimit_rls_config_loads_total{result="error"} %g`, &v); err == nil {
			return v
		}
	}
	return 0
}

// TestRLSProcs: by default an idle rls runs on one P (daemon.GovernProcs,
// as edge and mcproxy: it raises the count when the load calls for it);
// --procs N, or GOMAXPROCS in the environment, fixes the count instead.
// Read from go_sched_gomaxprocs_threads on /metrics.
func TestRLSProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing to govern")
	}
	bin, dir := fixture.Binary(t, "rls"), t.TempDir()
	writeConfig(t, dir, fmt.Sprintf(popConfig, 100))
	fixture.CheckProcs(t, func(t *testing.T, admin string, args []string) func() bool {
		p := fixture.Start(t, bin, append([]string{"--grpc", fixture.FreeAddr(t), "--http", admin, "--config-dir", dir}, args...)...)
		return p.Exited
	})
}

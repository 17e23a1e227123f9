package rls_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/pop/rls/conformance"
)

// peerBinEnv names envoyproxy/ratelimit's binary for the tests that check
// the expectations against it.
const peerBinEnv = "POPLIMIT_RATELIMIT_BIN"

// startPeer starts envoyproxy/ratelimit (the binary in $POPLIMIT_RATELIMIT_BIN,
// else the test is skipped) over the shared Redis Cluster with the config
// files write puts in its config directory and the environment env, and
// returns a client of it. It is stopped when the test ends.
func startPeer(t *testing.T, write func(dir string) error, env ...string) rlv3.RateLimitServiceClient {
	t.Helper()
	bin := os.Getenv(peerBinEnv)
	if bin == "" {
		t.Skipf("set %s to envoyproxy/ratelimit's binary to check the expectations against it", peerBinEnv)
	}
	c := fixture.SharedRedisCluster(t)
	root := t.TempDir()
	if err := write(filepath.Join(root, "ratelimit", "config")); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "peer.log")
	p, err := bench.StartPeerRLS(context.Background(), bin, root, log, append(bench.PeerRedisEnv(c.Addrs()), env...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("envoyproxy/ratelimit log:\n%s", b)
		}
	})
	cc, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlv3.NewRateLimitServiceClient(cc)
}

// TestConformanceAgainstPeer replays every suite not marked rls_only
// against envoyproxy/ratelimit itself (Redis Cluster backend, real time):
// the expectations TestConformance holds rls to are the peer's answers.
func TestConformanceAgainstPeer(t *testing.T) {
	suites, err := conformance.LoadFile("testdata/conformance.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range suites {
		if s.RLSOnly {
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			run := conformance.NewRun()
			client := startPeer(t, func(dir string) error { return s.WriteConfig(dir, run) }, s.Settings.Env()...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			bad, err := conformance.Replay(ctx, client, s, run, time.Now, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range bad {
				t.Error(m)
			}
		})
	}
}

// TestStatsAgainstPeer runs statsScript on envoyproxy/ratelimit with its
// Prometheus statistics and requires the statistics the script expects
// (those TestStatsSplitHitsAsEnvoyRatelimit holds rls to).
func TestStatsAgainstPeer(t *testing.T) {
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metrics := "127.0.0.1:" + strconv.Itoa(port)
	domain := fmt.Sprintf("stats_peer_%d", time.Now().UnixNano())
	client := startPeer(t, func(dir string) error {
		return bench.WriteRLSConfig(dir, "stats.yaml", fmt.Sprintf(statsConfig, domain))
	}, "USE_PROMETHEUS=true", "PROMETHEUS_ADDR="+metrics, "STATS_FLUSH_INTERVAL=50ms")
	// Every request in one minute-unit window.
	if s := time.Now().Second(); s >= 50 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	runStatsScript(t, client, domain)
	var total float64
	for _, w := range statsScript.want {
		total += w.total
	}
	// The sink publishes at each flush: wait until every hit is in.
	var got map[string]keyStats
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err = scrape("http://"+metrics+"/metrics", domain)
		var sum float64
		for _, ks := range got {
			sum += ks.total
		}
		if err == nil && sum >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the flush that carried total_hits carried the rest
	if got, err = scrape("http://"+metrics+"/metrics", domain); err != nil {
		t.Fatal(err)
	}
	checkStats(t, got)
}

// scrape reads envoyproxy/ratelimit's per-key statistics of domain.
func scrape(url, domain string) (map[string]keyStats, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	list := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		list = append(list, f)
	}
	return statsOf(list, domain, "key1"), nil
}

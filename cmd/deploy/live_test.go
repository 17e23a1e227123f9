package deploy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// Families is one binary's scrape: metric families by name.
type Families map[string]*dto.MetricFamily

// live holds the scrapes of the reference run, made once per test binary.
var live struct {
	once sync.Once
	fams map[string]Families // by binary name
	err  error
}

// liveMetrics returns the /metrics families of every binary after the
// reference run (referenceRun), which the first caller's test performs.
func liveMetrics(t *testing.T) map[string]Families {
	t.Helper()
	live.once.Do(func() { live.fams, live.err = referenceRun(t) })
	if live.err != nil {
		t.Fatal(live.err)
	}
	if live.fams == nil {
		t.Fatal("the reference run failed in an earlier test")
	}
	return live.fams
}

// referenceRun starts a PoP of real processes (2 memcached, mcproxy with
// auto-eject, edge with testdata/policies/example.yml in front of an
// upstream) and drives it through what operators alert on, scraping each
// binary's /metrics at the end of its part:
//
//   - traffic on every policy of the example (admitted, rejected, the
//     mitigation cache, leases, rejection events);
//   - a policy reload that succeeds and one that fails validation;
//   - one shard stopped: mcproxy's calls to it fail and it is ejected
//     (mcproxy is scraped then);
//   - mcproxy stopped: edge's store calls fail, its breaker opens and the
//     fail modes decide (edge is scraped then).
func referenceRun(t *testing.T) (map[string]Families, error) {
	fixture.RequireMemcached(t)
	shards := fixture.Memcached(t, 2)
	mc := fixture.Binary(t, "mcproxy")
	edgeBin := fixture.Binary(t, "edge")
	mcAdmin := fixture.FreeAddr(t)
	proxy := fixture.Mcproxy(t, mc, "", fixture.Addrs(shards), "--auto-eject", "--failure-limit", "1",
		"--retry-timeout", "10m", "--timeout", "200ms", "--admin", mcAdmin)

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	example, err := os.ReadFile(filepath.Join(moduleRoot(t), "testdata/policies/example.yml"))
	if err != nil {
		return nil, err
	}
	policy := filepath.Join(dir, "policy.yml")
	if err := os.WriteFile(policy, example, 0o644); err != nil {
		return nil, err
	}
	listen, admin := fixture.FreeAddr(t), fixture.FreeAddr(t)
	fixture.Start(t, edgeBin, "--listen", listen, "--admin", admin, "--upstream", up.URL, "--memcached", proxy.Addr,
		"--policy", policy, "--events", filepath.Join(dir, "events.jsonl"), "--breaker-window", "500ms")
	if err := waitFor(10*time.Second, func() bool { return status(admin, "/healthz") == http.StatusOK }); err != nil {
		return nil, fmt.Errorf("edge /healthz: %w", err)
	}

	drive(t, "http://"+listen, 40)
	if code := post(t, "http://"+admin+"/reload"); code != http.StatusOK {
		return nil, fmt.Errorf("POST /reload of a valid policy: %d", code)
	}
	if err := os.WriteFile(policy, []byte("version: 1\npolicies: nonsense\n"), 0o644); err != nil {
		return nil, err
	}
	if code := post(t, "http://"+admin+"/reload"); code == http.StatusOK {
		return nil, fmt.Errorf("POST /reload of an invalid policy: %d, want a failure", code)
	}

	rlsFams, err := rlsRun(t, proxy.Addr)
	if err != nil {
		return nil, fmt.Errorf("rls: %w", err)
	}

	shards[1].Stop()
	for i := 0; i < 64; i++ {
		memcachedGet(proxy.Addr, fmt.Sprintf("k%d", i))
	}
	mcFams, err := scrape(mcAdmin)
	if err != nil {
		return nil, fmt.Errorf("mcproxy: %w", err)
	}
	if !ejected(mcFams) {
		return nil, fmt.Errorf("mcproxy: no shard ejected after a shard was stopped")
	}

	proxy.Kill()
	if err := waitFor(15*time.Second, func() bool { drive(t, "http://"+listen, 2); return breakerOpen(admin) }); err != nil {
		return nil, fmt.Errorf("edge breaker with mcproxy stopped: %w", err)
	}
	drive(t, "http://"+listen, 5)
	edgeFams, err := scrape(admin)
	if err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	return map[string]Families{"edge": edgeFams, "mcproxy": mcFams, "rls": rlsFams}, nil
}

// rlsRun starts rls counting through the mcproxy at store, with one domain
// of 2 requests a minute, sends it 5 /json requests (3 over the limit) and
// one it must refuse, and scrapes its /metrics.
func rlsRun(t *testing.T, store string) (Families, error) {
	dir := t.TempDir()
	cfg := "domain: ref\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "ref.yaml"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	httpAddr := fixture.FreeAddr(t)
	fixture.Start(t, fixture.Binary(t, "rls"), "--grpc", fixture.FreeAddr(t), "--http", httpAddr, "--config-dir", dir, "--memcached", store)
	if err := waitFor(10*time.Second, func() bool { return status(httpAddr, "/healthcheck") == http.StatusOK }); err != nil {
		return nil, fmt.Errorf("/healthcheck: %w", err)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	for _, body := range []string{
		`{"domain":"ref","descriptors":[{"entries":[{"key":"k","value":"x"}]}]}`, `{"domain":"ref","descriptors":[{"entries":[{"key":"k","value":"x"}]}]}`,
		`{"domain":"ref","descriptors":[{"entries":[{"key":"k","value":"x"}]}]}`, `{"domain":"ref","descriptors":[{"entries":[{"key":"k","value":"x"}]}]}`,
		`{"domain":"ref","descriptors":[{"entries":[{"key":"k","value":"x"}]}]}`, `{"domain":"","descriptors":[]}`,
	} {
		resp, err := c.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return scrape(httpAddr)
}

// drive sends rounds of requests on every policy of the example file:
// anonymous API calls (per IP, 20/s: rejected after the first 20 of a
// round), a free key's calls, searches, logins, leased ingestion and an
// unmatched path.
func drive(t *testing.T, base string, rounds int) {
	reqs := []struct{ method, path, key string }{
		{"GET", "/api/widgets", ""}, {"GET", "/api/widgets/7", "demo-free-key"}, {"POST", "/search", "demo-pro-key"},
		{"POST", "/login", ""}, {"POST", "/ingest/clicks", "demo-free-key"}, {"GET", "/other", ""},
	}
	c := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < rounds; i++ {
		for _, r := range reqs {
			req, _ := http.NewRequest(r.method, base+r.path, nil)
			if r.key != "" {
				req.Header.Set("X-API-Key", r.key)
			}
			if resp, err := c.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
}

func status(addr, path string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func post(t *testing.T, url string) int {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post(url, "text/plain", nil)
	if err != nil {
		t.Logf("POST %s: %v", url, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// memcachedGet sends one get to addr and reads its first reply line
// (errors are the point: the shard behind may be down).
func memcachedGet(addr, key string) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "get %s\r\n", key)
	_, _ = bufio.NewReader(c).ReadString('\n')
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// scrape parses GET http://addr/metrics.
func scrape(addr string) (Families, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	return Families(fams), err
}

// values are the gauge or counter values of f's samples that match.
func values(f *dto.MetricFamily, match func(*dto.Metric) bool) []float64 {
	var out []float64
	for _, m := range f.GetMetric() {
		if match(m) {
			out = append(out, m.GetGauge().GetValue()+m.GetCounter().GetValue())
		}
	}
	return out
}

func ejected(f Families) bool {
	for _, v := range values(f["mcproxy_shard_ejections_total"], func(*dto.Metric) bool { return true }) {
		if v > 0 {
			return true
		}
	}
	return false
}

func breakerOpen(admin string) bool {
	f, err := scrape(admin)
	if err != nil {
		return false
	}
	v := values(f["poplimit_breaker_state"], func(*dto.Metric) bool { return true })
	return len(v) == 1 && v[0] != 0
}

// moduleRoot is the module's root directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := procs.ModuleRoot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// labelNames are the label names of f's samples, sorted, without the
// histogram's le and the summary's quantile.
func labelNames(f *dto.MetricFamily) []string {
	seen := map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			seen[l.GetName()] = true
		}
	}
	var out []string
	for n := range seen {
		if n == "le" || n == "quantile" {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

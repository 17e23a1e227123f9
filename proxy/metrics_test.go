package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/proxy"
)

// metricValue returns the value of the sample "name{labels}" in a
// Prometheus text exposition, or -1.
func metricValue(t *testing.T, text, sample string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return -1
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metricsYAML is two pools: alpha over two real memcached (one named, as
// Twemproxy allows), and dead over a port nothing listens on, with
// ejection after one failure.
func metricsYAML(a0, a1, dead, listenA, listenD string) string {
	return fmt.Sprintf(`alpha:
  listen: %s
  timeout: 300
  servers:
   - %s:1 one
   - %s:1
dead:
  listen: %s
  auto_eject_hosts: true
  server_failure_limit: 1
  server_retry_timeout: 60000
  servers:
   - %s:1
`, listenA, a0, a1, listenD, dead)
}

// TestMetricsHealthAndStats drives requests, a timeout (paused memcached)
// and an ejection (dead shard) through the proxy, then reads /metrics,
// /healthz and /stats.json from the admin handler and the raw stats port.
func TestMetricsHealthAndStats(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 2)
	dead := fixture.FreeAddr(t)
	specs, err := proxy.ParseConfig([]byte(metricsYAML(ms[0].Addr, ms[1].Addr, dead, "127.0.0.1:0", "127.0.0.2:0")), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := newTestProxy(t, proxy.ProxyConfig{}, specs)
	reg := prometheusRegistry(t, p)
	h, err := proxy.AdminHandler(proxy.AdminConfig{Proxy: p, Registry: reg, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(h)
	defer admin.Close()

	if code, body := httpGet(t, admin.URL+"/healthz"); code != 200 || !strings.HasPrefix(body, `{"status":"ok"`) {
		t.Fatalf("healthz before: %d %q", code, body)
	}
	c := dialMC(t, "tcp", p.Addr("alpha").String())
	const n = 50
	for i := range n {
		if rep, err := c.do(fmt.Sprintf("set k%d 0 0 1\r\nx\r\n", i)); err != nil || rep != "STORED\r\n" {
			t.Fatalf("set: %q %v", rep, err)
		}
	}
	// One timeout on shard 1: pause it, send a get for a key it owns.
	rt := p.Server("alpha").Router()
	key := ""
	for i := 0; key == ""; i++ {
		if k := "t" + strconv.Itoa(i); rt.Locate([]byte(k)) == 1 {
			key = k
		}
	}
	if err := ms[1].Pause(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "memcached stopped", func() bool { return procs.Stopped(ms[1].Pid()) })
	rep, err := c.do("get " + key + "\r\n")
	if rerr := ms[1].Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil || !strings.HasPrefix(rep, "SERVER_ERROR") {
		t.Fatalf("get on a paused shard: %q %v", rep, err)
	}
	// The dead pool's only shard fails once and is ejected.
	d := dialMC(t, "tcp", p.Addr("dead").String())
	if rep, _ := d.do("get x\r\n"); !strings.HasPrefix(rep, "SERVER_ERROR") {
		t.Fatalf("dead pool answered %q", rep)
	}
	waitUntil(t, "dead shard ejected", func() bool { ok, _ := p.Healthy(); return !ok })

	code, body := httpGet(t, admin.URL+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"dead"`) {
		t.Errorf("healthz with a dead pool: %d %q", code, body)
	}
	_, text := httpGet(t, admin.URL+"/metrics")
	one, two := `{pool="alpha",shard="one"}`, fmt.Sprintf(`{pool="alpha",shard=%q}`, ms[1].Addr)
	deadL := fmt.Sprintf(`{pool="dead",shard=%q}`, dead)
	req0 := metricValue(t, text, "mcproxy_shard_requests_total"+one)
	req1 := metricValue(t, text, "mcproxy_shard_requests_total"+two)
	checks := []struct {
		sample string
		want   float64
	}{
		{"mcproxy_shard_timeouts_total" + two, 1},
		{"mcproxy_shard_errors_total" + two, 1},
		{"mcproxy_shard_errors_total" + one, 0},
		{"mcproxy_shard_latency_seconds_count" + one, req0},
		{"mcproxy_shard_latency_seconds_count" + two, req1},
		{"mcproxy_shard_in_flight" + one, 0},
		{"mcproxy_shard_live" + one, 1},
		{"mcproxy_shard_live" + deadL, 0},
		{"mcproxy_shard_ejections_total" + deadL, 1},
		{"mcproxy_shard_errors_total" + deadL, 1},
		{`mcproxy_client_connections{pool="alpha"}`, 1},
		{`mcproxy_client_connections_total{pool="alpha"}`, 1},
		{`mcproxy_pool_live_shards{pool="dead"}`, 0},
		{`mcproxy_reloads_total{result="ok"}`, 1},
		{`mcproxy_reloads_total{result="error"}`, 0},
	}
	if req0+req1 != n+1 {
		t.Errorf("requests %v + %v, want %d", req0, req1, n+1)
	}
	for _, ck := range checks {
		if got := metricValue(t, text, ck.sample); got != ck.want {
			t.Errorf("%s = %v, want %v", ck.sample, got, ck.want)
		}
	}
	if !strings.Contains(text, "go_goroutines") {
		t.Errorf("registry lacks the Go collector")
	}

	_, js := httpGet(t, admin.URL+"/stats.json")
	var st map[string]any
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatalf("stats.json: %v\n%s", err, js)
	}
	alpha := st["alpha"].(map[string]any)
	if got := alpha["one"].(map[string]any)["requests"].(float64); got != req0 {
		t.Errorf("stats.json alpha.one.requests = %v, want %v", got, req0)
	}
	if got := alpha[ms[1].Addr].(map[string]any)["server_timedout"].(float64); got != 1 {
		t.Errorf("stats.json server_timedout = %v, want 1", got)
	}
	if got := st["dead"].(map[string]any)["server_ejects"].(float64); got != 1 {
		t.Errorf("stats.json dead.server_ejects = %v, want 1", got)
	}
	if got := st["curr_connections"].(float64); got != 2 {
		t.Errorf("curr_connections = %v, want 2", got)
	}

	// The raw stats port serves the same document.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.ServeStats(ln, "test") }()
	sc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(sc)
	_ = sc.Close()
	_ = ln.Close()
	if err != nil || !json.Valid(raw) || !strings.HasPrefix(string(raw), `{"service":"nutcracker", "source":`) {
		t.Errorf("stats port: %v %s", err, raw)
	}
	if err := <-done; err != nil {
		t.Errorf("ServeStats: %v", err)
	}
	if want := nutcrackerStats(t, metricsYAML(ms[0].Addr, ms[1].Addr, dead, "", "")); want != nil {
		var got map[string]any
		_ = json.Unmarshal(raw, &got)
		if g, w := jsonShape(got, ""), jsonShape(want, ""); g != w {
			t.Errorf("stats shape differs from nutcracker's:\n got %s\nwant %s", g, w)
		}
	}
}

// jsonShape lists every key path of v with its JSON type, sorted.
func jsonShape(v any, path string) string {
	var out []string
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(e, path+"/"+k)
			}
		case float64:
			out = append(out, path+":number")
		case string:
			out = append(out, path+":string")
		default:
			out = append(out, fmt.Sprintf("%s:%T", path, v))
		}
	}
	walk(v, path)
	sort.Strings(out)
	return strings.Join(out, " ")
}

// nutcrackerStats runs Debian's nutcracker on the YAML (listen addresses
// filled in) and returns its stats document; nil when not installed (the
// shape is then not compared; under make test a missing nutcracker fails).
func nutcrackerStats(t *testing.T, yml string) map[string]any {
	t.Helper()
	if !procs.NutcrackerInstalled() && !fixture.Required() {
		t.Log("nutcracker not installed: stats shape not compared")
		return nil
	}
	yml = strings.Replace(yml, "listen: \n", "listen: "+fixture.FreeAddr(t)+"\n", 1)
	yml = strings.Replace(yml, "listen: \n", "listen: "+fixture.FreeAddr(t)+"\n", 1)
	raw, err := fixture.NutcrackerConfig(t, yml, "").Stats()
	if err != nil {
		t.Fatalf("nutcracker stats port: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("nutcracker stats %q: %v", raw, err)
	}
	return m
}

// TestMetricsDuplicateServer: a pool listing one address twice (ketama
// allows it) still scrapes: the series are kept apart.
func TestMetricsDuplicateServer(t *testing.T) {
	noLeaks(t)
	p := newTestProxy(t, proxy.ProxyConfig{NewBackend: memoryBackend}, []proxy.PoolSpec{spec("dup", "e0", "e0")})
	reg := prometheusRegistry(t, p)
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather: %v", err)
	}
}

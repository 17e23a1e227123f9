package edgecmp

// The two proxies: edge → mcproxy → memcached shards, and nginx with
// limit_req, each on a kernel-chosen loopback port.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// edgePolicy counts a sliding window per API key so high that every
// request is admitted: the cost of the path, not of refusals.
const edgePolicy = `version: 1
headers: both
api_key:
  header: X-API-Key
default_policy: perkey
tiers:
  t: {limits: [{name: w, algorithm: sliding_window, quantity: 1000000000, window: 1m}]}
policies:
  - {name: perkey, identity: [api_key], tier: t}
`

// noLimitPolicy limits only a route the load never asks for (Config.NoLimit).
const noLimitPolicy = `version: 1
api_key:
  header: X-API-Key
tiers:
  t: {limits: [{name: w, algorithm: sliding_window, quantity: 1000000000, window: 1m}]}
policies:
  - {name: unused, routes: ["/never-requested"], identity: [api_key], tier: t}
`

func (c Config) binaries(ctx context.Context, dir string) (edge, mcproxy string, err error) {
	edge, mcproxy = c.Edge, c.Mcproxy
	for _, b := range []struct {
		path *string
		name string
	}{{&edge, "edge"}, {&mcproxy, "mcproxy"}} {
		if *b.path == "" {
			if *b.path, err = procs.BuildPackage(ctx, dir, "cmd/"+b.name); err != nil {
				return "", "", err
			}
		}
	}
	return edge, mcproxy, nil
}

func (c Config) startEdge(ctx context.Context, dir, upstream string, stops *[]func()) (target, error) {
	edgeBin, mcproxyBin, err := c.binaries(ctx, dir)
	if err != nil {
		return target{}, err
	}
	var shardPids []int
	args := []string{"--admin", ""}
	for range c.Shards {
		m, err := procs.StartMemcached(ctx, procs.MemcachedConfig{})
		if err != nil {
			return target{}, err
		}
		*stops = append(*stops, m.Stop)
		shardPids = append(shardPids, m.Pid())
		args = append(args, "--shard", m.Addr)
	}
	mcAddr, err := freeAddr()
	if err != nil {
		return target{}, err
	}
	mc, err := startWaiting(ctx, "mcproxy", mcproxyBin, append([]string{"--listen", mcAddr}, args...), dir, stops,
		func() error { return procs.Ping(mcAddr, time.Second) })
	if err != nil {
		return target{}, err
	}
	mcPid := mc.Pid()
	policy := filepath.Join(dir, "policy.yml")
	doc := edgePolicy
	if c.NoLimit {
		doc = noLimitPolicy
	}
	if err := os.WriteFile(policy, []byte(doc), 0o644); err != nil {
		return target{}, err
	}
	listen, err := freeAddr()
	if err != nil {
		return target{}, err
	}
	admin, err := freeAddr()
	if err != nil {
		return target{}, err
	}
	eargs := append([]string{"--listen", listen, "--admin", admin, "--upstream", "http://" + upstream,
		"--memcached", mcAddr, "--policy", policy}, c.EdgeArgs...)
	if c.Pprof {
		eargs = append(eargs, "--pprof")
	}
	e, err := startWaiting(ctx, "edge", edgeBin, eargs, dir, stops, func() error { return httpOK("http://" + admin + "/healthz") })
	if err != nil {
		return target{}, err
	}
	if c.Pprof {
		c.Progress("edge pprof: http://" + admin + "/debug/pprof/")
	}
	edgePid := e.Pid()
	parts := []part{{"edge", func() []int { return []int{edgePid} }}, {"mcproxy", func() []int { return []int{mcPid} }},
		{"memcached", func() []int { return shardPids }}}
	return target{name: "edge", url: "http://" + listen + "/", parts: parts}, nil
}

// nginxConf is nginx.conf for prefix dir: workers, limit_req keyed by
// X-API-Key at a rate admitting everything, keep-alive to the upstream,
// X-Forwarded-For replaced by the peer as edge does.
func nginxConf(dir, listen, upstream string, workers int) string {
	return fmt.Sprintf(`worker_processes %d;
daemon off;
pid %[2]s/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[2]s/body; proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fcgi; uwsgi_temp_path %[2]s/uwsgi; scgi_temp_path %[2]s/scgi;
  limit_req_zone $http_x_api_key zone=perkey:16m rate=1000000r/s;
  upstream up { server %[4]s; keepalive 1024; }
  server {
    listen %[3]s;
    location / {
      limit_req zone=perkey burst=1000000 nodelay;
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $remote_addr;
    }
  }
}
`, workers, dir, listen, upstream)
}

func (c Config) startNginx(ctx context.Context, dir, upstream string, stops *[]func()) (target, error) {
	ndir := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(filepath.Join(ndir, "logs"), 0o755); err != nil {
		return target{}, err
	}
	listen, err := freeAddr()
	if err != nil {
		return target{}, err
	}
	conf := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(ndir, listen, upstream, c.NginxWorkers)), 0o644); err != nil {
		return target{}, err
	}
	p, err := startWaiting(ctx, "nginx", c.Nginx, []string{"-p", ndir, "-c", conf, "-e", "stderr"}, dir, stops,
		func() error { return httpOK("http://" + listen + "/") })
	if err != nil {
		return target{}, err
	}
	master := p.Pid()
	pids := func() []int { return append([]int{master}, children(master)...) }
	if n := len(pids()) - 1; n != c.NginxWorkers {
		return target{}, fmt.Errorf("edgecmp: nginx has %d workers, want %d", n, c.NginxWorkers)
	}
	return target{name: "nginx", url: "http://" + listen + "/", parts: []part{{"nginx", pids}}}, nil
}

// startWaiting starts bin, logging to dir/name.log, and waits until ready
// answers nil.
func startWaiting(ctx context.Context, name, bin string, args []string, dir string, stops *[]func(), ready func() error) (*procs.Proc, error) {
	p, err := procs.StartProc(name, bin, args, filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	*stops = append(*stops, func() { p.Stop(5 * time.Second) })
	if err := p.WaitReady(ctx, 20*time.Second, ready); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, name+".log"))
		return nil, fmt.Errorf("edgecmp: %s: %w\n%s", name, err, procs.LastLines(string(log), 20))
	}
	return p, nil
}

func freeAddr() (string, error) {
	port, err := procs.FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

func httpOK(url string) error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// children are the pids of pid's child processes (/proc/PID/task/PID/children).
func children(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// ratios sets edge ÷ peer of the medians over rounds.
func (r *report) ratios() {
	med := func(proxy string, f func(round) float64) float64 {
		var v []float64
		for _, run := range r.Runs {
			if run.Proxy == proxy {
				v = append(v, f(run))
			}
		}
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	ratio := func(f func(round) float64) float64 {
		if p := med("nginx", f); p > 0 {
			return med("edge", f) / p
		}
		return 0
	}
	r.CPURatio = ratio(func(x round) float64 { return float64(x.CPUPerRq) })
	r.RPSRatio = ratio(func(x round) float64 { return x.RPS })
	r.P99Ratio = ratio(func(x round) float64 { return float64(x.P99) })
}

// Tables are the runs, round by round.
func (r *report) Tables() []*bench.Table {
	t := &bench.Table{Header: []string{"round", "proxy", "req/s", "p50", "p99", "p999", "CPU/req", "by process", "errors", "load1"}}
	for _, x := range r.Runs {
		var by []string
		for _, p := range x.Parts {
			by = append(by, p.Name+" "+p.CPUPerRq.Round(100*time.Nanosecond).String())
		}
		t.Add(x.Round, x.Proxy, fmt.Sprintf("%.0f", x.RPS), x.P50.Round(10*time.Microsecond).String(), x.P99.Round(10*time.Microsecond).String(),
			x.P999.Round(10*time.Microsecond).String(), x.CPUPerRq.Round(100*time.Nanosecond).String(), strings.Join(by, " + "), x.Errors, fmt.Sprintf("%.2f", x.Load1))
	}
	return []*bench.Table{t}
}

// WriteSummary writes the ratios of the medians.
func (r *report) WriteSummary(w io.Writer) {
	if r.CPURatio > 0 {
		fmt.Fprintf(w, "edge/nginx (medians): CPU per request %.2fx, requests/s %.2fx, p99 %.2fx\n", r.CPURatio, r.RPSRatio, r.P99Ratio)
	}
}

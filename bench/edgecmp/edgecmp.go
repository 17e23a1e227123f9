// Package edgecmp compares the cost of edge with the proxy a team runs
// today: nginx with limit_req keyed by the same API key, in front of the
// same upstream, under the same wrk load, in interleaved rounds. It
// reports requests/s, p50/p99/p999 latency (wrk's HDR histogram) and the
// CPU per request of each proxy's own processes read from /proc (edge,
// mcproxy and the memcached shards; nginx's master and workers).
//
// Everything runs on loopback, on ports the kernel chose, under a
// temporary directory removed at the end; every process started is
// stopped before Run returns.
package edgecmp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// Config configures Run. Zero means default.
type Config struct {
	// Peer is the proxy compared with edge: "nginx" (default) or "none".
	Peer string
	// Rounds is the number of interleaved rounds (edge, peer, edge,
	// peer, ...); default 2.
	Rounds int
	// Duration of one wrk run; default 6s.
	Duration time.Duration
	// Conns and Threads are wrk's -c and -t; default 64 and 2.
	Conns, Threads int
	// Keys is the number of distinct X-API-Key values sent at random;
	// default 10,000.
	Keys int
	// Shards is the number of memcached shards behind mcproxy; default 3.
	Shards int
	// NginxWorkers is nginx's worker_processes; default 2.
	NginxWorkers int
	// Edge and Mcproxy are binaries to run; default: built from the
	// module's ./cmd/edge and ./cmd/mcproxy.
	Edge, Mcproxy string
	// EdgeArgs are extra edge flags (e.g. --core net/http).
	EdgeArgs []string
	// NoLimit gives edge a policy that limits no route: it forwards
	// without deciding, so the run measures the proxying alone.
	NoLimit bool
	// Pprof serves /debug/pprof/ on edge's admin listener, whose URL is
	// reported through Progress.
	Pprof bool
	// Nginx and Wrk are the binaries; default /usr/sbin/nginx and wrk on
	// PATH.
	Nginx, Wrk string
	// Dir keeps configurations and logs when set; default a temporary
	// directory removed at the end.
	Dir string
	// Progress, when set, is called with a status line per run.
	Progress func(string)
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Rounds, 2)
	def(&c.Conns, 64)
	def(&c.Threads, 2)
	def(&c.Keys, 10000)
	def(&c.Shards, 3)
	def(&c.NginxWorkers, 2)
	if c.Duration <= 0 {
		c.Duration = 6 * time.Second
	}
	if c.Peer == "" {
		c.Peer = "nginx"
	}
	if c.Nginx == "" {
		c.Nginx = "/usr/sbin/nginx"
	}
	if c.Wrk == "" {
		c.Wrk = "wrk"
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return c
}

// round is one measured run of wrk against a proxy.
type round struct {
	Proxy    string        `json:"proxy"`
	Round    int           `json:"round"`
	Requests int64         `json:"requests"`
	Errors   int64         `json:"errors"` // wrk's socket errors and non-2xx/3xx answers
	RPS      float64       `json:"rps"`
	P50      time.Duration `json:"p50"`
	P99      time.Duration `json:"p99"`
	P999     time.Duration `json:"p999"`
	CPU      time.Duration `json:"cpu"`         // the proxy processes' user+system CPU over the run
	CPUPerRq time.Duration `json:"cpu_per_req"` // CPU / Requests
	Parts    []partCPU     `json:"parts"`       // CPU per request of each kind of process
	Load1    float64       `json:"load1"`       // the host's 1-minute load average after the run
}

// partCPU is the CPU per request of one kind of a proxy's processes.
type partCPU struct {
	Name     string        `json:"name"`
	CPUPerRq time.Duration `json:"cpu_per_req"`
}

// report is the result of Run.
type report struct {
	Runs []round `json:"runs"`
	// Ratios are edge ÷ peer of the medians over rounds (absent without
	// a peer): CPU per request, requests/s, p99.
	CPURatio, RPSRatio, P99Ratio float64
}

// Run starts the upstream, edge (with mcproxy and its shards) and the
// peer, runs the interleaved rounds and stops everything.
func (c Config) Run(ctx context.Context) (bench.Result, error) {
	c = c.withDefaults()
	if c.Peer != "nginx" && c.Peer != "none" {
		return nil, fmt.Errorf("edgecmp: peer %q: want nginx or none", c.Peer)
	}
	wrk, err := exec.LookPath(c.Wrk)
	if err != nil {
		return nil, fmt.Errorf("edgecmp: wrk: %w (apt-get install wrk)", err)
	}
	dir, done, err := bench.WorkDir(c.Dir, "edgecmp-")
	if err != nil {
		return nil, err
	}
	defer done()
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	up, stopUp, err := startUpstream()
	if err != nil {
		return nil, err
	}
	stops = append(stops, stopUp)
	targets, err := c.startTargets(ctx, dir, up, &stops)
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "keys.lua")
	if err := os.WriteFile(script, []byte(wrkScript(c.Keys)), 0o644); err != nil {
		return nil, err
	}
	rep := &report{}
	for round := 1; round <= c.Rounds; round++ {
		for _, t := range targets {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r, err := c.measure(ctx, wrk, script, t)
			if err != nil {
				return nil, err
			}
			r.Round = round
			c.Progress(fmt.Sprintf("round %d %-6s %8.0f req/s p99 %v cpu/req %v load %.2f", round, t.name, r.RPS, r.P99, r.CPUPerRq, r.Load1))
			rep.Runs = append(rep.Runs, r)
		}
	}
	rep.ratios()
	return rep, nil
}

// target is one proxy under test: its URL and the processes whose CPU is
// its cost, by kind.
type target struct {
	name  string
	url   string
	parts []part
}

// part is one kind of a target's processes (edge, mcproxy, memcached).
type part struct {
	name string
	pids func() []int
}

// startTargets starts edge (mcproxy and shards) and the peer.
func (c Config) startTargets(ctx context.Context, dir, upstream string, stops *[]func()) ([]target, error) {
	edge, err := c.startEdge(ctx, dir, upstream, stops)
	if err != nil {
		return nil, err
	}
	targets := []target{edge}
	if c.Peer == "nginx" {
		ng, err := c.startNginx(ctx, dir, upstream, stops)
		if err != nil {
			return nil, err
		}
		targets = append(targets, ng)
	}
	return targets, nil
}

// startUpstream serves "hello" on a kernel-chosen loopback port.
func startUpstream() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	body := []byte("hello\n")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) })}
	go srv.Serve(ln)
	return ln.Addr().String(), func() { srv.Close() }, nil
}

// wrkScript sends GET / with a random X-API-Key out of keys and prints
// the latency percentiles of wrk's histogram in microseconds.
func wrkScript(keys int) string {
	return `math.randomseed(os.time())
request = function()
  wrk.headers["X-API-Key"] = "key-" .. math.random(1, ` + strconv.Itoa(keys) + `)
  return wrk.format("GET", "/")
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("EDGECMP requests=%d errors=%d p50=%d p99=%d p999=%d\n",
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
`
}

// measure runs wrk once against t and reads t's processes' CPU around it.
func (c Config) measure(ctx context.Context, wrk, script string, t target) (round, error) {
	pids := make([][]int, len(t.parts))
	for i, p := range t.parts {
		pids[i] = p.pids()
	}
	cpu := func() ([]time.Duration, error) {
		sums := make([]time.Duration, len(pids))
		for i, ps := range pids {
			for _, pid := range ps {
				s, err := procs.ReadStat(pid)
				if err != nil {
					return nil, err
				}
				sums[i] += s.CPU
			}
		}
		return sums, nil
	}
	before, err := cpu()
	if err != nil {
		return round{}, err
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, wrk, "-t", strconv.Itoa(c.Threads), "-c", strconv.Itoa(c.Conns),
		"-d", strconv.Itoa(int(c.Duration.Seconds()))+"s", "--latency", "-s", script, t.url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return round{}, fmt.Errorf("edgecmp: wrk %s: %w\n%s", t.name, err, out)
	}
	elapsed := time.Since(start)
	after, err := cpu()
	if err != nil {
		return round{}, err
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return round{}, fmt.Errorf("edgecmp: %s: %w", t.name, err)
	}
	r.Proxy = t.name
	for i, p := range t.parts {
		used := after[i] - before[i]
		r.CPU += used
		if r.Requests > 0 {
			r.Parts = append(r.Parts, partCPU{Name: p.name, CPUPerRq: used / time.Duration(r.Requests)})
		}
	}
	r.RPS = float64(r.Requests) / elapsed.Seconds()
	if r.Requests > 0 {
		r.CPUPerRq = r.CPU / time.Duration(r.Requests)
	}
	r.Load1 = load1()
	return r, nil
}

// parseWrk reads the EDGECMP line wrkScript's done prints.
func parseWrk(out string) (round, error) {
	var r round
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "EDGECMP ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return r, fmt.Errorf("wrk output %q: %w", line, err)
			}
			switch k {
			case "requests":
				r.Requests = n
			case "errors":
				r.Errors = n
			case "p50":
				r.P50 = time.Duration(n) * time.Microsecond
			case "p99":
				r.P99 = time.Duration(n) * time.Microsecond
			case "p999":
				r.P999 = time.Duration(n) * time.Microsecond
			}
		}
		return r, nil
	}
	return r, errors.New("no EDGECMP line in wrk's output")
}

// load1 is the host's 1-minute load average (0 when unreadable).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

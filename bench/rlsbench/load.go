// Package rlsbench is popbench rls: closed-loop gRPC load on any address
// that speaks envoy.service.ratelimit.v3 (rls, envoyproxy/ratelimit), a
// launched PoP of rls processes (and the peer beside it) to point it at,
// and the conformance replay.
package rlsbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poplimit/poplimit/bench"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

func (c Config) withDefaults() Config {
	defaultTo(&c.Clients, 64)
	defaultTo(&c.Conns, 4)
	defaultTo(&c.Descriptors, 3)
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Domain == "" {
		c.Domain = "bench"
	}
	if c.Key == "" {
		c.Key = "user"
	}
	if c.Keys == 0 {
		c.Keys = 10000
	}
	if c.ZipfS <= 1 {
		c.ZipfS = 1.1
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

// result is one load run.
type result struct {
	Target   string        `json:"target"`
	Requests int64         `json:"requests"`
	Duration time.Duration `json:"duration_ns"`
	// PerSec is answered requests per second; DecisionsPerSec counts each
	// descriptor of an answered request.
	PerSec          float64          `json:"requests_per_s"`
	DecisionsPerSec float64          `json:"decisions_per_s"`
	Latency         bench.Summary    `json:"latency"`
	Codes           map[string]int64 `json:"codes"` // overall codes, and gRPC error codes
	Errors          int64            `json:"errors"`
	// ServerCPU is the CPU of all Config.pids per decision, CPU
	// that of each group, Generator this process's (the load's clients)
	// per decision: on a shared machine, steadier than decisions/s.
	ServerCPU procs.PerRequest            `json:"server_cpu_per_decision"`
	CPU       map[string]procs.PerRequest `json:"cpu_per_decision,omitempty"`
	// Syscalls are each group's read and write system calls per decision
	// (/proc/PID/io syscr + syscw: sockets included; epoll and futex not).
	Syscalls  map[string]float64 `json:"syscalls_per_decision,omitempty"`
	Generator procs.PerRequest   `json:"generator_cpu_per_decision"`
	// Processes are the server-side processes measured, by group.
	Processes map[string]int `json:"processes,omitempty"`
}

// ProcessList is Processes as "rls×1 mcproxy×1 memcached×3" (groups in
// name order), "" when none were measured.
func (r *result) processList() string {
	gs := make([]string, 0, len(r.Processes))
	for g, n := range r.Processes {
		if n > 0 {
			gs = append(gs, fmt.Sprintf("%s×%d", g, n))
		}
	}
	slices.Sort(gs)
	return strings.Join(gs, " ")
}

// runLoad drives cfg.Targets for cfg.Duration and reports.
func runLoad(ctx context.Context, cfg Config) (*result, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Targets) == 0 {
		return nil, errors.New("bench: rls load needs a target")
	}
	var clients []rlv3.RateLimitServiceClient
	for _, t := range cfg.Targets {
		for range cfg.Conns {
			cc, err := grpc.NewClient(t, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, err
			}
			defer cc.Close()
			clients = append(clients, rlv3.NewRateLimitServiceClient(cc))
		}
	}
	// Warm every connection up before timing.
	for _, c := range clients {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.ShouldRateLimit(wctx, rlsRequest(cfg, func() uint64 { return 0 }))
		cancel()
		if err != nil && status.Code(err) == codes.Unavailable { // Unavailable: nothing listens
			return nil, fmt.Errorf("bench: rls target: %w", err)
		}
	}
	// Calls start until stop; the context (stop + 5 s) lets the last ones
	// finish (gRPC's own deadline timer may fire before the context's
	// Err is set: a loop on runCtx.Err alone would spin on instant
	// DeadlineExceeded errors).
	stop := time.Now().Add(cfg.Duration)
	runCtx, cancel := context.WithDeadline(ctx, stop.Add(5*time.Second))
	defer cancel()
	ws := make([]worker, cfg.Clients)
	// Each client cycles through requests drawn before timing: building
	// them costs generator CPU, which shares the cores with the server
	// measured. And its collector runs less often for the run
	// (the generator allocates a lot and keeps little).
	ring := make([][]*rlv3.RateLimitRequest, len(ws))
	for i := range ring {
		z := rand.NewZipf(rand.New(rand.NewPCG(cfg.Seed, uint64(i))), cfg.ZipfS, 1, cfg.Keys-1)
		ring[i] = make([]*rlv3.RateLimitRequest, rlsRing)
		for j := range ring[i] {
			ring[i][j] = rlsRequest(cfg, z.Uint64)
		}
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	var wg sync.WaitGroup
	srv0, gen0, io0 := sampleGroups(cfg.pids), procs.SelfUsage(), ioGroups(cfg.pids)
	start := time.Now()
	for i := range ws {
		w := &ws[i]
		w.lat, w.codes = bench.NewLatency(), map[string]int64{}
		client := clients[i%len(clients)]
		reqs := ring[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; runCtx.Err() == nil && time.Now().Before(stop); n++ {
				req := reqs[n%len(reqs)]
				t := time.Now()
				resp, err := client.ShouldRateLimit(runCtx, req)
				if runCtx.Err() != nil {
					return
				}
				w.lat.Record(time.Since(t))
				w.n++
				if err != nil {
					w.err++
					w.codes[status.Code(err).String()]++
					continue
				}
				w.codes[resp.OverallCode.String()]++
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	srv, gen, io := sampleGroups(cfg.pids), procs.SelfUsage().Sub(gen0), ioGroups(cfg.pids)
	return summarize(cfg, ws, el, srv0, srv, gen, io0, io), nil
}

// sampleGroups is sampleProcs of each group.
func sampleGroups(groups map[string][]int) map[string]procs.Usage {
	out := make(map[string]procs.Usage, len(groups))
	for g, pids := range groups {
		out[g] = procs.SampleUsage(pids)
	}
	return out
}

// ioGroups are each group's read and write system calls so far
// (/proc/PID/io syscr + syscw); processes that cannot be read count 0.
func ioGroups(groups map[string][]int) map[string]int64 {
	out := make(map[string]int64, len(groups))
	for g, pids := range groups {
		for _, pid := range pids {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				k, v, _ := strings.Cut(line, ": ")
				if k == "syscr" || k == "syscw" {
					n, _ := strconv.ParseInt(v, 10, 64)
					out[g] += n
				}
			}
		}
	}
	return out
}

// rlsRing is the number of requests each client draws before timing and
// cycles through (with 64 clients, 3 descriptors: 98,304 draws, ten per
// value of the default 10,000).
const rlsRing = 512

func rlsRequest(cfg Config, next func() uint64) *rlv3.RateLimitRequest {
	req := &rlv3.RateLimitRequest{Domain: cfg.Domain, Descriptors: make([]*rlcommon.RateLimitDescriptor, cfg.Descriptors)}
	for j := range req.Descriptors {
		req.Descriptors[j] = &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{
			{Key: cfg.Key, Value: strconv.FormatUint(next(), 10)}}}
	}
	return req
}

// defaultTo sets *v to def when it is zero or negative: the "zero means
// default" rule of every Config in this package.
func defaultTo[T int | int64 | uint64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// summarize is the Result of a run of ws over el: server CPU from srv0 to
// srv, generator CPU gen, system calls from io0 to io.
func summarize(cfg Config, ws []worker, el time.Duration, srv0, srv map[string]procs.Usage, gen procs.Usage, io0, io map[string]int64) *result {
	res := &result{Target: cfg.Targets[0], Duration: el, Codes: map[string]int64{}}
	lat := bench.NewLatency()
	for _, w := range ws {
		lat.Merge(w.lat)
		res.Requests += w.n
		res.Errors += w.err
		for k, v := range w.codes {
			res.Codes[k] += v
		}
	}
	res.Latency = lat.Summary()
	res.PerSec = float64(res.Requests) / el.Seconds()
	decisions := (res.Requests - res.Errors) * int64(cfg.Descriptors)
	res.DecisionsPerSec = float64(decisions) / el.Seconds()
	if len(cfg.pids) > 0 {
		res.Processes = map[string]int{}
		for g, pids := range cfg.pids {
			res.Processes[g] = len(pids)
		}
		var all procs.Usage
		res.CPU, res.Syscalls = map[string]procs.PerRequest{}, map[string]float64{}
		for g, n := range io {
			res.Syscalls[g] = float64(n-io0[g]) / float64(max(decisions, 1))
		}
		for g, s := range srv {
			d := s.Sub(srv0[g])
			all = all.Add(d)
			res.CPU[g] = d.Per(decisions)
		}
		res.ServerCPU = all.Per(decisions)
	}
	res.Generator = gen.Per(decisions)
	return res
}

// worker is one client's tally.
type worker struct {
	lat    *bench.Latency
	codes  map[string]int64
	n, err int64
}

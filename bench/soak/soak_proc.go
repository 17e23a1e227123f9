package soak

import (
	"fmt"
	"os"
	"runtime"

	"github.com/poplimit/poplimit/bench"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// resources is what one process holds at one instant (procs.Resources).
type resources = procs.Resources

// SoakProcess is one process a soak watches: its name, pid, and how to
// count its goroutines (nil: it has none, e.g. memcached).
type soakProcess struct {
	Name       string
	Pid        int
	Goroutines func() (int64, error)
	// Judged says whether the process counts for the verdict (the
	// benchmark's own process, which also runs the load generator, is
	// reported only).
	Judged bool
}

// Sample reads the process's resources now.
func (p soakProcess) sample() (resources, error) {
	r, err := procs.ReadResources(p.Pid)
	if err != nil {
		return r, err
	}
	if p.Goroutines != nil {
		if r.Goroutines, err = p.Goroutines(); err != nil {
			r.Goroutines = -1
			return r, fmt.Errorf("bench: goroutines of %s: %w", p.Name, err)
		}
	}
	return r, nil
}

// metricsGoroutines counts goroutines from the go_goroutines metric of an
// admin base URL.
func metricsGoroutines(admin string) func() (int64, error) {
	return func() (int64, error) {
		m, err := bench.ScrapeMetrics(admin)
		if err != nil {
			return -1, err
		}
		for _, s := range m {
			if s.Name == "go_goroutines" {
				return int64(s.Value), nil
			}
		}
		return -1, fmt.Errorf("bench: %s/metrics has no go_goroutines", admin)
	}
}

// soakProcesses lists every process of p (shards, proxies, edges; admins
// maps a proxy's address to its admin base URL) and this one (the upstream
// and the load generator).
func soakProcesses(p *bench.PoP, admins map[string]string) []soakProcess {
	var out []soakProcess
	for i, s := range p.Shards {
		sp := soakProcess{Name: fmt.Sprintf("shard-%d (%s)", i, p.Store), Pid: s.Pid(), Judged: true}
		if p.Store == bench.StoreEmbedded { // an embedded shard is an mcproxy: no admin listener of its own
			sp.Name = fmt.Sprintf("shard-%d (embedded)", i)
		}
		out = append(out, sp)
	}
	for i, pr := range p.Proxies {
		sp := soakProcess{Name: fmt.Sprintf("mcproxy-%d", i), Pid: pr.Pid(), Judged: true}
		if a, ok := admins[pr.Addr]; ok {
			sp.Goroutines = metricsGoroutines(a)
		}
		out = append(out, sp)
	}
	for i, e := range p.Edges {
		out = append(out, soakProcess{Name: fmt.Sprintf("edge-%d", i), Pid: e.Proc.Pid(), Goroutines: metricsGoroutines(e.Admin), Judged: true})
	}
	out = append(out, soakProcess{Name: "popbench (upstream, load generator)", Pid: os.Getpid(),
		Goroutines: func() (int64, error) { return int64(runtime.NumGoroutine()), nil }})
	return out
}

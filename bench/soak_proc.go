package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Resources is what one process holds at one instant. A field that cannot
// be read is -1 (a memcached shard has no goroutines).
type Resources struct {
	RSSKB      int64 `json:"rss_kb"`
	Threads    int64 `json:"threads"`
	FDs        int64 `json:"fds"`
	Goroutines int64 `json:"goroutines"`
}

// ProcResources reads pid's resident set (VmRSS) and thread count from
// /proc/PID/status and counts its open file descriptors (/proc/PID/fd).
// Goroutines is left -1: only the process knows (see its go_goroutines
// metric).
func ProcResources(pid int) (Resources, error) {
	r := Resources{RSSKB: -1, Threads: -1, FDs: -1, Goroutines: -1}
	dir := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return r, fmt.Errorf("bench: resources of pid %d: %w", pid, err)
	}
	r.RSSKB, r.Threads = parseProcStatus(status)
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return r, fmt.Errorf("bench: fds of pid %d: %w", pid, err)
	}
	r.FDs = int64(len(fds))
	return r, nil
}

// parseProcStatus returns the VmRSS (kB) and Threads fields of a
// /proc/PID/status file, -1 for a field that is missing.
func parseProcStatus(status []byte) (rssKB, threads int64) {
	rssKB, threads = -1, -1
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			rssKB = n
		case "Threads":
			threads = n
		}
	}
	return rssKB, threads
}

// SoakProcess is one process a soak watches: its name, pid, and how to
// count its goroutines (nil: it has none, e.g. memcached).
type SoakProcess struct {
	Name       string
	Pid        int
	Goroutines func() (int64, error)
	// Judged says whether the process counts for the verdict (the
	// benchmark's own process, which also runs the load generator, is
	// reported only).
	Judged bool
}

// Sample reads the process's resources now.
func (p SoakProcess) Sample() (Resources, error) {
	r, err := ProcResources(p.Pid)
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
		m, err := ScrapeMetrics(admin)
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
func soakProcesses(p *PoP, admins map[string]string) []SoakProcess {
	var out []SoakProcess
	for i, s := range p.Shards {
		sp := SoakProcess{Name: fmt.Sprintf("shard-%d (%s)", i, p.Store), Pid: s.Pid(), Judged: true}
		if s.proc != nil { // an embedded shard is an mcproxy: no admin listener of its own
			sp.Name = fmt.Sprintf("shard-%d (embedded)", i)
		}
		out = append(out, sp)
	}
	for i, pr := range p.Proxies {
		sp := SoakProcess{Name: fmt.Sprintf("mcproxy-%d", i), Pid: pr.Pid(), Judged: true}
		if a, ok := admins[pr.Addr]; ok {
			sp.Goroutines = metricsGoroutines(a)
		}
		out = append(out, sp)
	}
	for i, e := range p.Edges {
		out = append(out, SoakProcess{Name: fmt.Sprintf("edge-%d", i), Pid: e.Proc.Pid(), Goroutines: metricsGoroutines(e.Admin), Judged: true})
	}
	out = append(out, SoakProcess{Name: "popbench (upstream, load generator)", Pid: os.Getpid(),
		Goroutines: func() (int64, error) { return int64(runtime.NumGoroutine()), nil }})
	return out
}

package proxycmp

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/poplimit/poplimit/bench"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// Systems compared by RunProxyCompare, in the order they run each round.
const (
	systemMemcached  = "memcached"  // one shard, driven directly
	systemNutcracker = "nutcracker" // Debian's Twemproxy 0.5.0 over 3 shards
	systemMcproxy    = "mcproxy"    // ./cmd/mcproxy over the same 3 shards
)

// ProxyCompareConfig configures RunProxyCompare. Zero means default.
type ProxyCompareConfig struct {
	// Mixes to measure, in order; default incr, getset, mget.
	Mixes []string
	// Conns per run; default 64.
	Conns int
	// ConnsList runs every mix at each of these connection counts, in
	// order (e.g. 1, 64, 512); default Conns alone.
	ConnsList []int
	// Syscalls counts each system's system calls and context switches per
	// request over each run's timed phase (perf stat attached to its pid;
	// the run fails without perf).
	Syscalls bool
	// Duration of each run; default 5s.
	Duration time.Duration
	// Rounds of the interleaved sequence memcached, nutcracker, mcproxy
	// per mix; default 2.
	Rounds int
	// Keys is the key space per mix; default 10000.
	Keys int
	// Hash is the pool's "hash:"; default fnv1a_64 (distribution ketama).
	Hash string
	// McproxyBin is the mcproxy binary; default: built from ./cmd/mcproxy
	// of the current module into Dir.
	McproxyBin string
	// McproxyFlags starts mcproxy with --listen/--shard flags (its own
	// defaults) instead of the default: --config with the nutcracker YAML,
	// listen address changed, so both proxies run the same configuration.
	McproxyFlags bool
	// McproxyArgs are extra mcproxy arguments.
	McproxyArgs []string
	// SkipMcproxy leaves mcproxy out. Without it, an mcproxy that cannot
	// be built or started is left out with a note, unless RequireMcproxy.
	SkipMcproxy    bool
	RequireMcproxy bool
	// Dir holds configs, logs and binaries; default a temporary directory
	// removed at the end.
	Dir string
	// Progress receives one line per run; nil is silent.
	Progress io.Writer
}

func (c ProxyCompareConfig) mixes() []string {
	if len(c.Mixes) > 0 {
		return c.Mixes
	}
	return []string{mixIncr, mixGetSet, mixMGet}
}

func (c ProxyCompareConfig) connsList(conns int) []int {
	if len(c.ConnsList) > 0 {
		return c.ConnsList
	}
	return []int{conns}
}

func (c ProxyCompareConfig) duration() time.Duration {
	if c.Duration > 0 {
		return c.Duration
	}
	return 5 * time.Second
}

// ProxySystem describes one system under test.
type proxySystem struct {
	Name   string `json:"name"`
	Addr   string `json:"addr"`
	Pid    int    `json:"pid"`
	Detail string `json:"detail"`
}

// ProxySystemSummary aggregates every run of one system on one mix.
type proxySystemSummary struct {
	System  string  `json:"system"`
	Runs    int     `json:"runs"`
	Ops     int64   `json:"ops"`
	Errors  int64   `json:"errors"`
	Seconds float64 `json:"seconds"`
	// OpsPerSec is the sum of ops over the sum of seconds.
	OpsPerSec float64 `json:"ops_per_sec"`
	// Latency merges the histograms of every run.
	Latency bench.Summary `json:"latency"`
	// CPUPerMillion is the system process's CPU seconds per million ops
	// (for memcached: the one shard); ClientCPUPerMillion the driver's.
	CPUPerMillion       float64 `json:"cpu_s_per_mop"`
	ClientCPUPerMillion float64 `json:"client_cpu_s_per_mop"`
	// ShardsCPUPerMillion is the 3 memcached shards' CPU seconds per
	// million ops; PathCPUPerMillion the whole path's: driver, proxy (none
	// for memcached direct) and shards. On a machine the load generator
	// shares, cores ÷ PathCPUPerMillion bounds ops/s.
	ShardsCPUPerMillion float64 `json:"shards_cpu_s_per_mop"`
	PathCPUPerMillion   float64 `json:"path_cpu_s_per_mop"`
	// SyscallsPerOp and SwitchesPerOp are the system's system calls and
	// context switches per operation (ProxyCompareConfig.Syscalls).
	SyscallsPerOp float64 `json:"syscalls_per_op,omitempty"`
	SwitchesPerOp float64 `json:"context_switches_per_op,omitempty"`
}

// ProxyMixSummary compares the systems on one mix. Ratios are of sums over
// rounds (0 when a side is missing).
type proxyMixSummary struct {
	Mix     string               `json:"mix"`
	Conns   int                  `json:"conns"`
	Systems []proxySystemSummary `json:"systems"`
	// McproxyOverNutcracker is mcproxy's ops over nutcracker's.
	McproxyOverNutcracker float64 `json:"mcproxy_over_nutcracker,omitempty"`
	// McproxyCPUOverNutcracker is mcproxy's CPU per operation over
	// nutcracker's (< 1 is cheaper).
	McproxyCPUOverNutcracker float64 `json:"mcproxy_cpu_over_nutcracker,omitempty"`
	// McproxyP99OverNutcracker is mcproxy's p99 over nutcracker's (< 1 is
	// better).
	McproxyP99OverNutcracker float64 `json:"mcproxy_p99_over_nutcracker,omitempty"`
	// NutcrackerOverMemcached is nutcracker's ops over direct memcached's.
	NutcrackerOverMemcached float64 `json:"nutcracker_over_memcached,omitempty"`
	// McproxyOverMemcached is mcproxy's ops over direct memcached's.
	McproxyOverMemcached float64 `json:"mcproxy_over_memcached,omitempty"`
}

// ProxyCompareReport is the outcome of RunProxyCompare.
type proxyCompareReport struct {
	Date    string             `json:"date"`
	NumCPU  int                `json:"num_cpu"`
	Conns   int                `json:"conns"`
	Seconds float64            `json:"seconds_per_run"`
	Rounds  int                `json:"rounds"`
	Keys    int                `json:"keys"`
	Systems []proxySystem      `json:"systems"`
	Runs    []*ProxyLoadResult `json:"runs"`
	Summary []proxyMixSummary  `json:"summary"`
	Notes   []string           `json:"notes,omitempty"`
}

// RunProxyCompare starts three memcached shards, Debian's nutcracker with a
// ketama pool over them and mcproxy over the same shards, then for each mix
// runs memcached (one shard, direct), nutcracker, mcproxy, memcached, ...
// for cfg.Rounds rounds with the same duration, connections and key space,
// and summarises. Everything it starts is stopped before it returns.
func RunProxyCompare(ctx context.Context, cfg ProxyCompareConfig) (Report, error) {
	r, err := runProxyCompare(ctx, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runProxyCompare is RunProxyCompare returning the report itself.
func runProxyCompare(ctx context.Context, cfg ProxyCompareConfig) (*proxyCompareReport, error) {
	for _, m := range cfg.mixes() {
		if !knownMix(m) {
			return nil, fmt.Errorf("%w: unknown mix %q", errProxyLoad, m)
		}
	}
	dir, done, err := bench.WorkDir(cfg.Dir, "popbench-proxy-")
	if err != nil {
		return nil, err
	}
	defer done()
	rep := &proxyCompareReport{
		Date: time.Now().UTC().Format(time.RFC3339), NumCPU: runtime.NumCPU(),
		Conns: positiveOr(cfg.Conns, 64), Seconds: cfg.duration().Seconds(),
		Rounds: positiveOr(cfg.Rounds, 2), Keys: positiveOr(cfg.Keys, 10000),
	}

	shards := make([]*procs.Memcached, 0, 3)
	defer func() {
		for _, m := range shards {
			m.Stop()
		}
	}()
	for i := 0; i < 3; i++ {
		m, err := procs.StartMemcached(ctx, procs.MemcachedConfig{})
		if err != nil {
			return nil, err
		}
		shards = append(shards, m)
	}
	var shardPids []int
	for _, m := range shards {
		shardPids = append(shardPids, m.Pid())
	}
	rep.Systems = append(rep.Systems, proxySystem{Name: systemMemcached, Addr: shards[0].Addr,
		Pid: shards[0].Pid(), Detail: "memcached -t 2 -m 64, shard 1 of 3, no proxy"})

	pool := procs.TwemproxyPool{
		Hash: orDefault(cfg.Hash, "fnv1a_64"), Distribution: "ketama", HashTag: "{}",
		TimeoutMS: 2000, ServerConnections: 1,
	}
	for _, m := range shards {
		pool.Servers = append(pool.Servers, m.Addr+":1")
	}
	nc, err := procs.StartNutcracker(ctx, dir, pool)
	if err != nil {
		return nil, err
	}
	defer nc.Stop()
	rep.Systems = append(rep.Systems, proxySystem{Name: systemNutcracker, Addr: nc.Addr, Pid: nc.Pid(),
		Detail: fmt.Sprintf("nutcracker 0.5.0, ketama %s, hash_tag {}, server_connections 1, timeout 2000", pool.Hash)})

	if !cfg.SkipMcproxy {
		mc, detail, err := startMcproxyForCompare(ctx, cfg, dir, pool)
		if err != nil {
			if cfg.RequireMcproxy {
				return nil, err
			}
			rep.Notes = append(rep.Notes, "mcproxy left out: "+err.Error())
		} else {
			defer mc.Stop(2 * time.Second)
			rep.Systems = append(rep.Systems, proxySystem{Name: systemMcproxy, Addr: mc.Addr, Pid: mc.Pid(), Detail: detail})
		}
	}

	for _, mix := range cfg.mixes() {
		for _, conns := range cfg.connsList(rep.Conns) {
			if err := rep.runMix(ctx, cfg, mix, conns, shardPids); err != nil {
				return nil, err
			}
			rep.Summary = append(rep.Summary, summariseMix(mix, conns, rep.Systems, rep.Runs))
		}
	}
	return rep, nil
}

// runMix preloads the keys of mix on every system (but for incr) and runs
// it rep.Rounds times on each, interleaved, each run charged the CPU of
// the system and of every shard it is not.
func (rep *proxyCompareReport) runMix(ctx context.Context, cfg ProxyCompareConfig, mix string, conns int, shardPids []int) error {
	base := ProxyLoadConfig{
		Mix: mix, Conns: conns, Duration: cfg.duration(), Keys: rep.Keys,
		KeyPrefix: "pb:" + mix + ":", NoPreload: true,
	}
	if mix == mixMGet {
		base.KeyPrefix = "pb:" + mixGetSet + ":" // reads what getset wrote
	}
	if mix != mixIncr {
		for _, s := range rep.Systems {
			pc := base
			pc.Addr = s.Addr
			if err := preloadKeys(ctx, pc); err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
		}
	}
	for round := 1; round <= rep.Rounds; round++ {
		for _, s := range rep.Systems {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lc := base
			// The system first, then every shard it is not.
			lc.Addr, lc.CPUPids, lc.Seed = s.Addr, []int{s.Pid}, uint64(round)
			if cfg.Syscalls {
				lc.SyscallPids = []int{s.Pid}
			}
			for _, pid := range shardPids {
				if pid != s.Pid {
					lc.CPUPids = append(lc.CPUPids, pid)
				}
			}
			res, err := RunProxyLoad(ctx, lc)
			if err != nil {
				return fmt.Errorf("%s %s conns %d round %d: %w", s.Name, mix, conns, round, err)
			}
			res.System, res.Round = s.Name, round
			rep.Runs = append(rep.Runs, res)
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "%-7s %4d conns %-10s round %d: %8.0f ops/s  p50 %.3f ms  p99 %.3f ms  p999 %.3f ms  errors %d  cpu %.1f s/Mop%s\n",
					mix, conns, s.Name, round, res.OpsPerSec, res.Latency.P50, res.Latency.P99, res.Latency.P999, res.Errors, res.cpuPerMillion(0), res.syscallNote())
			}
		}
	}
	return nil
}

// startMcproxyForCompare builds (unless given) and starts mcproxy over the
// pool's servers, on a free loopback port, and waits until it answers.
func startMcproxyForCompare(ctx context.Context, cfg ProxyCompareConfig, dir string, pool procs.TwemproxyPool) (*procs.Proc, string, error) {
	p, _, detail, err := StartMcproxyAdmin(ctx, cfg, dir, pool)
	return p, detail, err
}

// startMcproxyAdmin is startMcproxyForCompare, also returning the admin
// base URL (http://HOST:PORT).
func StartMcproxyAdmin(ctx context.Context, cfg ProxyCompareConfig, dir string, pool procs.TwemproxyPool) (*procs.Proc, string, string, error) {
	bin := cfg.McproxyBin
	if bin == "" {
		bins, err := procs.Build(ctx, dir, "mcproxy")
		if err != nil {
			return nil, "", "", err
		}
		bin = bins["mcproxy"]
	}
	port, err := procs.FreePort()
	if err != nil {
		return nil, "", "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var args []string
	detail := "mcproxy "
	if !cfg.McproxyFlags {
		pool.Listen = addr
		path := filepath.Join(dir, "mcproxy.yml")
		if err := os.WriteFile(path, []byte(pool.YAML()), 0o644); err != nil {
			return nil, "", "", err
		}
		args = []string{"--config", path}
		detail += "--config (same YAML as nutcracker, listen changed)"
	} else {
		args = []string{"--listen", addr}
		for _, s := range pool.Servers {
			args = append(args, "--shard", s[:len(s)-len(":1")])
		}
		detail += "--listen --shard x3 (its default ring and pool settings)"
	}
	// Its admin endpoint on a free port, as nutcracker gets a stats port
	// (the default port may be taken by another mcproxy).
	adminPort, err := procs.FreePort()
	if err != nil {
		return nil, "", "", err
	}
	args = append(args, "--admin", net.JoinHostPort("127.0.0.1", strconv.Itoa(adminPort)))
	args = append(args, cfg.McproxyArgs...)
	p, err := procs.StartProc(systemMcproxy, bin, args, filepath.Join(dir, "mcproxy.log"))
	if err != nil {
		return nil, "", "", err
	}
	p.Addr = addr
	if err := p.WaitReady(ctx, 5*time.Second, func() error { return procs.Ping(addr, 200*time.Millisecond) }); err != nil {
		p.Kill()
		log, _ := os.ReadFile(filepath.Join(dir, "mcproxy.log"))
		return nil, "", "", fmt.Errorf("%w; log: %s", err, procs.LastLines(string(log), 5))
	}
	return p, "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(adminPort)), detail, nil
}

func summariseMix(mix string, conns int, systems []proxySystem, runs []*ProxyLoadResult) proxyMixSummary {
	ms := proxyMixSummary{Mix: mix, Conns: conns}
	byName := map[string]*proxySystemSummary{}
	for _, s := range systems {
		sum := proxySystemSummary{System: s.Name}
		hist := bench.NewLatency()
		var cpu, client, shardsCPU, syscalls, switches float64
		for _, r := range runs {
			if r.Mix != mix || r.Conns != conns || r.System != s.Name {
				continue
			}
			if len(r.Syscalls) > 0 {
				syscalls += r.Syscalls[0]
				switches += r.Switches[0]
			}
			sum.Runs++
			sum.Ops += r.Ops
			sum.Errors += r.Errors
			sum.Seconds += r.Seconds
			hist.Merge(r.hist)
			if len(r.CPUSeconds) > 0 {
				cpu += r.CPUSeconds[0]
			}
			for _, c := range r.CPUSeconds[min(1, len(r.CPUSeconds)):] {
				shardsCPU += c
			}
			client += r.ClientCPUSeconds
		}
		if sum.Runs == 0 {
			continue
		}
		sum.OpsPerSec = float64(sum.Ops) / sum.Seconds
		sum.Latency = hist.Summary()
		if sum.Ops > 0 {
			sum.CPUPerMillion = cpu / float64(sum.Ops) * 1e6
			sum.ClientCPUPerMillion = client / float64(sum.Ops) * 1e6
			sum.SyscallsPerOp = syscalls / float64(sum.Ops)
			sum.SwitchesPerOp = switches / float64(sum.Ops)
			if s.Name == systemMemcached { // the system is a shard
				shardsCPU += cpu
			}
			sum.ShardsCPUPerMillion = shardsCPU / float64(sum.Ops) * 1e6
			sum.PathCPUPerMillion = sum.ClientCPUPerMillion + sum.ShardsCPUPerMillion
			if s.Name != systemMemcached {
				sum.PathCPUPerMillion += sum.CPUPerMillion
			}
		}
		ms.Systems = append(ms.Systems, sum)
		byName[s.Name] = &ms.Systems[len(ms.Systems)-1]
	}
	ratio := func(a, b string) float64 {
		x, y := byName[a], byName[b]
		if x == nil || y == nil || y.Ops == 0 {
			return 0
		}
		return float64(x.Ops) / float64(y.Ops)
	}
	ms.McproxyOverNutcracker = ratio(systemMcproxy, systemNutcracker)
	ms.NutcrackerOverMemcached = ratio(systemNutcracker, systemMemcached)
	ms.McproxyOverMemcached = ratio(systemMcproxy, systemMemcached)
	if m, n := byName[systemMcproxy], byName[systemNutcracker]; m != nil && n != nil && n.Latency.P99 > 0 {
		ms.McproxyP99OverNutcracker = m.Latency.P99 / n.Latency.P99
	}
	if m, n := byName[systemMcproxy], byName[systemNutcracker]; m != nil && n != nil && n.CPUPerMillion > 0 {
		ms.McproxyCPUOverNutcracker = m.CPUPerMillion / n.CPUPerMillion
	}
	return ms
}

// WriteTable prints every run, then the per-mix sums and ratios.
// Report is what RunProxyCompare and RunIdleConns return: it encodes to
// JSON as it is and writes itself as a table.
type Report interface {
	WriteTable(w io.Writer) error
}

func (r *proxyCompareReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "popbench proxy --compare  %s  %d CPUs  %d conns  %.1fs x %d rounds  %d keys\n",
		r.Date, r.NumCPU, r.Conns, r.Seconds, r.Rounds, r.Keys)
	for _, s := range r.Systems {
		fmt.Fprintf(w, "  %-10s %s (pid %d): %s\n", s.Name, s.Addr, s.Pid, s.Detail)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nmix\tsystem\tround\tops/s\tp50 ms\tp99 ms\tp999 ms\terrors\tcpu s/Mop\tclient cpu s/Mop\t")
	for _, run := range r.Runs {
		client := 0.0
		if run.Ops > 0 {
			client = run.ClientCPUSeconds / float64(run.Ops) * 1e6
		}
		fmt.Fprintf(tw, "%s c%d\t%s\t%d\t%.0f\t%.3f\t%.3f\t%.3f\t%d\t%.2f\t%.2f\t\n", run.Mix, run.Conns, run.System, run.Round,
			run.OpsPerSec, run.Latency.P50, run.Latency.P99, run.Latency.P999, run.Errors, run.cpuPerMillion(0), client)
	}
	fmt.Fprintln(tw, "\nmix\tsystem (all rounds)\truns\tops/s\tp50 ms\tp99 ms\tp999 ms\terrors\tcpu s/Mop\tclient cpu s/Mop\tshards cpu s/Mop\tpath cpu s/Mop\t")
	for _, ms := range r.Summary {
		for _, s := range ms.Systems {
			fmt.Fprintf(tw, "%s c%d\t%s\t%d\t%.0f\t%.3f\t%.3f\t%.3f\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", ms.Mix, ms.Conns, s.System, s.Runs,
				s.OpsPerSec, s.Latency.P50, s.Latency.P99, s.Latency.P999, s.Errors, s.CPUPerMillion, s.ClientCPUPerMillion,
				s.ShardsCPUPerMillion, s.PathCPUPerMillion)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, run := range r.Runs {
		if run.FirstError != "" {
			fmt.Fprintf(w, "  %s %s round %d: %d errors, first: %s\n", run.Mix, run.System, run.Round, run.Errors, run.FirstError)
		}
	}
	// Side by side: one line per mix, every system's sums, then ratios.
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "\nside by side (sums over rounds):")
	fmt.Fprint(tw, "mix\t")
	for _, s := range r.Systems {
		fmt.Fprintf(tw, "%s ops/s\tp99 ms\tcpu s/Mop\t", s.Name)
	}
	fmt.Fprintln(tw, "nutcracker/memcached\tmcproxy/nutcracker\tp99 mcproxy/nutcracker\t")
	for _, ms := range r.Summary {
		fmt.Fprintf(tw, "%s c%d\t", ms.Mix, ms.Conns)
		for _, s := range r.Systems {
			found := false
			for _, ss := range ms.Systems {
				if ss.System == s.Name {
					fmt.Fprintf(tw, "%.0f\t%.3f\t%.2f\t", ss.OpsPerSec, ss.Latency.P99, ss.CPUPerMillion)
					found = true
				}
			}
			if !found {
				fmt.Fprint(tw, "-\t-\t-\t")
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", fmtRatio(ms.NutcrackerOverMemcached),
			fmtRatio(ms.McproxyOverNutcracker), fmtRatio(ms.McproxyP99OverNutcracker))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := r.writePerRequest(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "(throughput ratios are ratios of summed ops: every run has the same duration;")
	fmt.Fprintln(w, " path cpu = client + proxy + 3 shards per op: with every process on the same cores, cores / path cpu bounds ops/s)")
	return nil
}

func fmtRatio(x float64) string {
	if x == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", x)
}

// syscallNote is the progress line's system calls per operation, when
// counted.
func (r *ProxyLoadResult) syscallNote() string {
	if len(r.Syscalls) == 0 || r.Ops == 0 {
		return ""
	}
	return fmt.Sprintf("  syscalls %.2f/op  switches %.3f/op", r.Syscalls[0]/float64(r.Ops), r.Switches[0]/float64(r.Ops))
}

// writePerRequest prints, per mix and connection count, nutcracker's and
// mcproxy's CPU per request (µs: s/Mop) and, when counted, their system
// calls and context switches per request.
func (r *proxyCompareReport) writePerRequest(w io.Writer) error {
	fmt.Fprintln(w, "\nper request, nutcracker against mcproxy (sums over rounds; cpu of the proxy process alone):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mix\tconns\tnutcracker cpu µs\tmcproxy cpu µs\tmcproxy/nutcracker\tnutcracker syscalls\tmcproxy syscalls\tnutcracker switches\tmcproxy switches\t")
	for _, ms := range r.Summary {
		var n, m proxySystemSummary
		for _, s := range ms.Systems {
			switch s.System {
			case systemNutcracker:
				n = s
			case systemMcproxy:
				m = s
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%s\t%.2f\t%.2f\t%.3f\t%.3f\t\n", ms.Mix, ms.Conns, n.CPUPerMillion, m.CPUPerMillion,
			fmtRatio(ms.McproxyCPUOverNutcracker), n.SyscallsPerOp, m.SyscallsPerOp, n.SwitchesPerOp, m.SwitchesPerOp)
	}
	return tw.Flush()
}

package proxycmp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/poplimit/poplimit/bench"

	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// IdleConnsConfig configures RunIdleConns. Zero means default.
type IdleConnsConfig struct {
	// Conns is the number of idle client connections held open to each
	// proxy at once; default 10,000.
	Conns int
	// Sample is how many of them must still answer a request after the
	// measurement; default 100 (at most Conns).
	Sample int
	// Settle is how long the connections stay idle after the last one
	// was answered before measuring; default 12 s. mcproxy parks an idle
	// connection within 0.1 s when hundreds are idle (1.1 s otherwise:
	// --park-after), and after a wave of parked clients it
	// returns their freed memory to the OS once the wave stops growing,
	// at most every 10 s: 12 s covers a release that an earlier one
	// during the wave delayed. Both proxies get the same settle.
	Settle time.Duration
	// McproxyBin, McproxyArgs, Dir: as in ProxyCompareConfig.
	McproxyBin  string
	McproxyArgs []string
	Dir         string
	// Progress receives a line per step; nil means none.
	Progress io.Writer
}

// IdleConnsResult is one proxy's figures with Conns idle connections.
type idleConnsResult struct {
	System string `json:"system"`
	Pid    int    `json:"pid"`
	Conns  int    `json:"conns"`
	// RSSBeforeKB, RSSHeldKB: VmRSS before the connections opened and
	// after Settle, while they are held idle.
	RSSBeforeKB int64 `json:"rss_before_kb"`
	RSSHeldKB   int64 `json:"rss_held_kb"`
	// BytesPerConn is (RSSHeldKB - RSSBeforeKB) * 1024 / Conns: the
	// resident memory the held connections add over the baseline.
	BytesPerConn float64 `json:"bytes_per_conn"`
	// FDsBefore, FDsHeld: the proxy's open descriptors (/proc/PID/fd)
	// before and at the measurement; OpenAtMeasure is their difference,
	// the client connections the proxy really held then (about Conns;
	// mcproxy adds its parker's epoll and pipe, 3).
	FDsBefore     int64 `json:"fds_before"`
	FDsHeld       int64 `json:"fds_held"`
	OpenAtMeasure int64 `json:"open_at_measure"`
	// ConnectSeconds is how long opening and asking all Conns took;
	// SettleSeconds the idle time after it, before the measurement.
	ConnectSeconds float64 `json:"connect_seconds"`
	SettleSeconds  float64 `json:"settle_seconds"`
	// GoroutinesBefore, GoroutinesHeld: mcproxy's go_goroutines (-1 for
	// nutcracker, an event loop); GoroutinesPerConn their delta / Conns.
	GoroutinesBefore  int64   `json:"goroutines_before"`
	GoroutinesHeld    int64   `json:"goroutines_held"`
	GoroutinesPerConn float64 `json:"goroutines_per_conn"`
	// HeapPerConn is mcproxy's go_memstats_heap_inuse_bytes delta / Conns
	// (what is live or fragmented; RSS also holds freed pages the runtime
	// has not returned yet); 0 for nutcracker.
	HeapPerConn float64 `json:"heap_inuse_bytes_per_conn"`
	// Answered is how many of the sampled connections answered a request
	// after the measurement (all must).
	Answered int `json:"answered"`
	Sampled  int `json:"sampled"`
}

// IdleConnsReport is RunIdleConns' result.
type idleConnsReport struct {
	Date    string            `json:"date"`
	NumCPU  int               `json:"num_cpu"`
	NoFile  uint64            `json:"nofile_limit"`
	Results []idleConnsResult `json:"results"`
}

// RunIdleConns starts 3 memcached, nutcracker and mcproxy over them (as
// RunProxyCompare does) and, for mcproxy then nutcracker, opens Conns
// client connections that each make one request, holds them idle for
// Settle, reads the proxy's VmRSS (and mcproxy's goroutines), checks that
// a sample still answers, and closes them. It raises this process's
// RLIMIT_NOFILE soft limit to the hard limit first (the proxies inherit
// it); it fails when that is below Conns plus a margin.
func RunIdleConns(ctx context.Context, cfg IdleConnsConfig) (Report, error) {
	r, err := runIdleConns(ctx, cfg)
	if r == nil {
		return nil, err
	}
	return r, err
}

// runIdleConns is RunIdleConns returning the report itself.
func runIdleConns(ctx context.Context, cfg IdleConnsConfig) (*idleConnsReport, error) {
	n := positiveOr(cfg.Conns, 10000)
	limit, err := raiseNoFile()
	if err != nil {
		return nil, err
	}
	if limit < uint64(n)+256 {
		return nil, fmt.Errorf("%w: %d idle connections need a file descriptor limit above %d, the hard limit is %d",
			errProxyLoad, n, n+256, limit)
	}
	dir, done, err := bench.WorkDir(cfg.Dir, "popbench-idle-")
	if err != nil {
		return nil, err
	}
	defer done()
	var shards []*procs.Memcached
	defer func() {
		for _, m := range shards {
			m.Stop()
		}
	}()
	pool := procs.TwemproxyPool{Hash: "fnv1a_64", Distribution: "ketama", HashTag: "{}", TimeoutMS: 2000, ServerConnections: 1}
	for range 3 {
		m, err := procs.StartMemcached(ctx, procs.MemcachedConfig{})
		if err != nil {
			return nil, err
		}
		shards = append(shards, m)
		pool.Servers = append(pool.Servers, m.Addr+":1")
	}
	nc, err := procs.StartNutcracker(ctx, dir, pool)
	if err != nil {
		return nil, err
	}
	defer nc.Stop()
	mc, admin, _, err := StartMcproxyAdmin(ctx, ProxyCompareConfig{McproxyBin: cfg.McproxyBin, McproxyArgs: cfg.McproxyArgs}, dir, pool)
	if err != nil {
		return nil, err
	}
	defer mc.Stop(2 * time.Second)
	rep := &idleConnsReport{Date: time.Now().UTC().Format(time.RFC3339), NumCPU: runtime.NumCPU(), NoFile: limit}
	for _, sys := range []struct {
		name, addr, admin string
		pid               int
	}{{systemMcproxy, mc.Addr, admin, mc.Pid()}, {systemNutcracker, nc.Addr, "", nc.Pid()}} {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%s: %d idle connections\n", sys.name, n)
		}
		r, err := holdIdle(ctx, cfg, n, sys.name, sys.addr, sys.admin, sys.pid)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}

// holdIdle measures one proxy (see RunIdleConns).
func holdIdle(ctx context.Context, cfg IdleConnsConfig, n int, name, addr, admin string, pid int) (idleConnsResult, error) {
	r := idleConnsResult{System: name, Pid: pid, Conns: n, GoroutinesBefore: -1, GoroutinesHeld: -1}
	metric := func(name string) float64 {
		if admin == "" {
			return -1
		}
		m, err := bench.ScrapeMetrics(admin)
		if err != nil {
			return -1
		}
		for _, s := range m {
			if s.Name == name {
				return s.Value
			}
		}
		return -1
	}
	goroutines := func() int64 { return int64(metric("go_goroutines")) }
	// Scrape first: serving /metrics costs mcproxy memory of its own
	// (its encoder), which belongs in the baseline, not in the delta.
	r.GoroutinesBefore = goroutines()
	heapBefore := metric("go_memstats_heap_inuse_bytes")
	time.Sleep(200 * time.Millisecond)
	before, err := procs.ReadResources(pid)
	if err != nil {
		return r, err
	}
	r.RSSBeforeKB, r.FDsBefore = before.RSSKB, before.FDs
	conns := make([]net.Conn, 0, n)
	readers := make([]*bufio.Reader, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	ask := func(c net.Conn, br *bufio.Reader) error {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "get idle:none\r\n"); err != nil {
			return err
		}
		l, err := br.ReadString('\n')
		if err == nil && l != "END\r\n" {
			err = fmt.Errorf("%w: %s answered %q to a get", errProxyLoad, name, l)
		}
		return err
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	start := time.Now()
	for i := range n {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return r, fmt.Errorf("%w: connection %d to %s: %v", errProxyLoad, i, name, err)
		}
		conns = append(conns, c)
		readers = append(readers, bufio.NewReaderSize(c, 64))
		if err := ask(c, readers[i]); err != nil {
			return r, fmt.Errorf("connection %d to %s: %w", i, name, err)
		}
	}
	r.ConnectSeconds = time.Since(start).Seconds()
	settle := positiveDur(cfg.Settle, 12*time.Second)
	r.SettleSeconds = settle.Seconds()
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(settle):
	}
	held, err := procs.ReadResources(pid)
	if err != nil {
		return r, err
	}
	r.RSSHeldKB, r.FDsHeld, r.GoroutinesHeld = held.RSSKB, held.FDs, goroutines()
	r.OpenAtMeasure = r.FDsHeld - r.FDsBefore
	if heapBefore >= 0 {
		r.HeapPerConn = (metric("go_memstats_heap_inuse_bytes") - heapBefore) / float64(n)
	}
	r.BytesPerConn = float64(r.RSSHeldKB-r.RSSBeforeKB) * 1024 / float64(n)
	if r.GoroutinesBefore >= 0 && r.GoroutinesHeld >= 0 {
		r.GoroutinesPerConn = float64(r.GoroutinesHeld-r.GoroutinesBefore) / float64(n)
	}
	r.Sampled = min(positiveOr(cfg.Sample, 100), n)
	for k := range r.Sampled {
		i := k * n / r.Sampled
		if ask(conns[i], readers[i]) == nil {
			r.Answered++
		}
	}
	runtime.KeepAlive(conns) // every connection stays open to here (and the deferred close)
	if r.Answered != r.Sampled {
		return r, fmt.Errorf("%w: %d of %d sampled idle connections to %s answered", errProxyLoad, r.Answered, r.Sampled, name)
	}
	return r, nil
}

func positiveDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// raiseNoFile raises RLIMIT_NOFILE's soft limit to the hard limit and
// returns it.
func raiseNoFile() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return uint64(l.Cur), nil
}

// WriteTable writes the report as a table.
func (r *idleConnsReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tconns\topen at measure\tconnect s\tsettle s\tRSS before KB\tRSS held KB\tbytes/conn\tgoroutines before\theld\tper conn\theap/conn\tanswered\t")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.0f\t%d\t%d\t%.0f\t%d\t%d\t%.3f\t%.0f\t%d/%d\t\n", x.System, x.Conns, x.OpenAtMeasure,
			x.ConnectSeconds, x.SettleSeconds, x.RSSBeforeKB, x.RSSHeldKB,
			x.BytesPerConn, x.GoroutinesBefore, x.GoroutinesHeld, x.GoroutinesPerConn, x.HeapPerConn, x.Answered, x.Sampled)
	}
	return tw.Flush()
}

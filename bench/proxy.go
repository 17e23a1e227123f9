package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Proxy load mixes.
const (
	// MixIncr is limiter traffic: "incr key 1", and "add key 0 0 1" when
	// the key is NOT_FOUND (then "incr" again if the add lost a race), one
	// logical operation timed as a whole: every success counts exactly 1.
	MixIncr = "incr"
	// MixGetSet is 90% "get key" and 10% "set key" with a 16-byte value.
	MixGetSet = "getset"
	// MixMGet is "get k1 k2 k3 k4": four random keys, usually on
	// different shards behind a proxy.
	MixMGet = "mget"
)

// ErrProxyLoad reports a bad ProxyLoadConfig.
var ErrProxyLoad = errors.New("bench: proxy load")

// ProxyLoadConfig configures RunProxyLoad. Zero means default.
type ProxyLoadConfig struct {
	// Addr is the memcached-protocol TCP address to drive (required).
	Addr string
	// Mix is MixIncr, MixGetSet or MixMGet; default MixIncr.
	Mix string
	// Conns is the number of closed-loop connections, each with one
	// request in flight; default 64.
	Conns int
	// Duration is the timed phase; default 10s.
	Duration time.Duration
	// Keys is the size of the key space, drawn uniformly; default 10000.
	Keys int
	// KeyPrefix starts every key; default "pb:".
	KeyPrefix string
	// Seed seeds the per-connection key and operation choices; default 1.
	Seed uint64
	// Timeout bounds a stalled request: a reply later than the end of the
	// timed phase plus Timeout is an error; default 2s.
	Timeout time.Duration
	// NoPreload skips setting every key once before the timed phase
	// (done for getset and mget so that gets hit).
	NoPreload bool
	// CPUPids are processes whose CPU time (utime+stime from /proc) is
	// measured over the timed phase, e.g. the proxy under test.
	CPUPids []int
}

func (c ProxyLoadConfig) mix() string       { return orDefault(c.Mix, MixIncr) }
func (c ProxyLoadConfig) conns() int        { return positiveOr(c.Conns, 64) }
func (c ProxyLoadConfig) keys() int         { return positiveOr(c.Keys, 10000) }
func (c ProxyLoadConfig) keyPrefix() string { return orDefault(c.KeyPrefix, "pb:") }
func (c ProxyLoadConfig) duration() time.Duration {
	if c.Duration > 0 {
		return c.Duration
	}
	return 10 * time.Second
}
func (c ProxyLoadConfig) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 2 * time.Second
}
func (c ProxyLoadConfig) seed() uint64 {
	if c.Seed != 0 {
		return c.Seed
	}
	return 1
}

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

func positiveOr(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// ProxyLoadResult is the outcome of one timed run.
type ProxyLoadResult struct {
	// System labels the target in comparisons ("nutcracker", ...).
	System string `json:"system,omitempty"`
	// Round is the comparison round, from 1.
	Round int    `json:"round,omitempty"`
	Addr  string `json:"addr"`
	Mix   string `json:"mix"`
	Conns int    `json:"conns"`
	// Seconds is the measured wall time of the timed phase.
	Seconds float64 `json:"seconds"`
	// Ops counts operations answered as expected; Errors the others
	// (error replies, unexpected replies, I/O errors, timeouts).
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// Hits and Misses count keys found and not found by gets.
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// Latency is over every successful operation.
	Latency Summary `json:"latency"`
	// CPUSeconds is the CPU time of each of ProxyLoadConfig.CPUPids over
	// the timed phase, in the same order; ClientCPUSeconds the driver's.
	CPUSeconds       []float64 `json:"cpu_seconds,omitempty"`
	ClientCPUSeconds float64   `json:"client_cpu_seconds"`
	// FirstError describes the first error seen, if any.
	FirstError string `json:"first_error,omitempty"`

	hist *Latency
}

// CPUPerMillion returns CPU seconds per million operations for
// CPUSeconds[i], or 0 without operations.
func (r *ProxyLoadResult) CPUPerMillion(i int) float64 {
	if r.Ops == 0 || i >= len(r.CPUSeconds) {
		return 0
	}
	return r.CPUSeconds[i] / float64(r.Ops) * 1e6
}

// RunProxyLoad opens cfg.Conns connections to cfg.Addr, preloads the key
// space when the mix reads, then drives the mix for cfg.Duration with one
// request in flight per connection and returns what it measured. The load
// ends early when ctx ends. An error means the run could not be made (bad
// config, no connection); failures during the run are counted in Errors.
func RunProxyLoad(ctx context.Context, cfg ProxyLoadConfig) (*ProxyLoadResult, error) {
	mix := cfg.mix()
	switch mix {
	case MixIncr, MixGetSet, MixMGet:
	default:
		return nil, fmt.Errorf("%w: unknown mix %q (want incr, getset or mget)", ErrProxyLoad, mix)
	}
	if cfg.Addr == "" {
		return nil, fmt.Errorf("%w: no address", ErrProxyLoad)
	}
	if mix != MixIncr && !cfg.NoPreload {
		if err := preloadKeys(ctx, cfg); err != nil {
			return nil, err
		}
	}
	workers := make([]*loadConn, cfg.conns())
	for i := range workers {
		c, err := net.DialTimeout("tcp", cfg.Addr, cfg.timeout())
		if err != nil {
			for _, w := range workers[:i] {
				w.close()
			}
			return nil, fmt.Errorf("%w: dial %s: %v", ErrProxyLoad, cfg.Addr, err)
		}
		workers[i] = newLoadConn(c, cfg, uint64(i))
	}

	var stop atomic.Bool
	end := time.Now().Add(cfg.duration())
	timer := time.AfterFunc(cfg.duration(), func() { stop.Store(true) })
	defer timer.Stop()
	unwatch := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer unwatch()

	cpuBefore := make([]float64, len(cfg.CPUPids))
	for i, pid := range cfg.CPUPids {
		cpuBefore[i], _ = ProcessCPUSeconds(pid)
	}
	clientBefore := selfCPUSeconds()
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(mix, &stop, end.Add(cfg.timeout()))
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := &ProxyLoadResult{
		Addr: cfg.Addr, Mix: mix, Conns: cfg.conns(), Seconds: elapsed.Seconds(),
		ClientCPUSeconds: selfCPUSeconds() - clientBefore,
		hist:             NewLatency(),
	}
	for i, pid := range cfg.CPUPids {
		after, err := ProcessCPUSeconds(pid)
		if err != nil {
			after = cpuBefore[i]
		}
		res.CPUSeconds = append(res.CPUSeconds, after-cpuBefore[i])
	}
	for _, w := range workers {
		w.close()
		res.Ops += w.ops
		res.Errors += w.errs
		res.Hits += w.hits
		res.Misses += w.misses
		res.hist.Merge(w.hist)
		if res.FirstError == "" && w.firstErr != nil {
			res.FirstError = w.firstErr.Error()
		}
	}
	res.OpsPerSec = float64(res.Ops) / res.Seconds
	res.Latency = res.hist.Summary()
	return res, nil
}

// preloadKeys sets every key of the space once, 100 pipelined sets at a
// time on one connection.
func preloadKeys(ctx context.Context, cfg ProxyLoadConfig) error {
	c, err := net.DialTimeout("tcp", cfg.Addr, cfg.timeout())
	if err != nil {
		return fmt.Errorf("%w: preload: dial %s: %v", ErrProxyLoad, cfg.Addr, err)
	}
	defer c.Close()
	w := newLoadConn(c, cfg, 0)
	for lo := 0; lo < cfg.keys(); lo += 100 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = c.SetDeadline(time.Now().Add(cfg.timeout()))
		hi := min(lo+100, cfg.keys())
		for k := lo; k < hi; k++ {
			w.writeSet(uint64(k))
		}
		if err := w.w.Flush(); err != nil {
			return fmt.Errorf("%w: preload: %v", ErrProxyLoad, err)
		}
		for k := lo; k < hi; k++ {
			line, err := w.r.ReadSlice('\n')
			if err != nil {
				return fmt.Errorf("%w: preload: %v", ErrProxyLoad, err)
			}
			if !bytes.Equal(line, replyStored) {
				return fmt.Errorf("%w: preload: set answered %q", ErrProxyLoad, line)
			}
		}
	}
	return nil
}

var (
	replyStored    = []byte("STORED\r\n")
	replyNotStored = []byte("NOT_STORED\r\n")
	replyNotFound  = []byte("NOT_FOUND\r\n")
	replyEnd       = []byte("END\r\n")
	valuePrefix    = []byte("VALUE ")
	value16        = []byte("0123456789abcdef")
)

// errReply is a reply the mix did not expect; the connection stays usable.
type errReply struct {
	op   string
	line []byte
}

func (e *errReply) Error() string { return fmt.Sprintf("%s: unexpected reply %q", e.op, e.line) }

// loadConn is one closed-loop connection with its own buffers, random
// source and histogram: no sharing, no allocation per request.
type loadConn struct {
	cfg      ProxyLoadConfig
	c        net.Conn
	r        *bufio.Reader
	w        *bufio.Writer
	rng      *rand.Rand
	hist     *Latency
	nkeys    uint64
	prefix   string
	ops      int64
	errs     int64
	hits     int64
	misses   int64
	firstErr error
}

func newLoadConn(c net.Conn, cfg ProxyLoadConfig, i uint64) *loadConn {
	return &loadConn{
		cfg: cfg, c: c,
		r:      bufio.NewReaderSize(c, 16<<10),
		w:      bufio.NewWriterSize(c, 4<<10),
		rng:    rand.New(rand.NewPCG(cfg.seed(), i)),
		hist:   NewLatency(),
		nkeys:  uint64(cfg.keys()),
		prefix: cfg.keyPrefix(),
	}
}

func (l *loadConn) close() {
	if l.c != nil {
		_ = l.c.Close()
	}
}

// run loops until stop; deadline bounds any single stalled request. After
// an I/O error it redials (counting the error) unless stopping.
func (l *loadConn) run(mix string, stop *atomic.Bool, deadline time.Time) {
	_ = l.c.SetDeadline(deadline)
	for !stop.Load() {
		t0 := time.Now()
		var err error
		switch mix {
		case MixIncr:
			err = l.incr()
		case MixGetSet:
			err = l.getset()
		case MixMGet:
			err = l.mget()
		}
		if err == nil {
			l.ops++
			l.hist.Record(time.Since(t0))
			continue
		}
		l.errs++
		if l.firstErr == nil {
			l.firstErr = err
		}
		var pe *errReply
		if errors.As(err, &pe) {
			continue
		}
		// I/O error: the connection's state is unknown; start afresh.
		l.close()
		if stop.Load() || time.Now().After(deadline) {
			l.c = nil
			return
		}
		c, derr := net.DialTimeout("tcp", l.cfg.Addr, l.cfg.timeout())
		if derr != nil {
			l.c = nil
			return
		}
		l.c = c
		l.r.Reset(c)
		l.w.Reset(c)
		_ = c.SetDeadline(deadline)
	}
}

func (l *loadConn) writeKey(k uint64) {
	l.w.WriteString(l.prefix)
	l.w.Write(strconv.AppendUint(l.w.AvailableBuffer(), k, 10))
}

func (l *loadConn) randKey() uint64 { return l.rng.Uint64N(l.nkeys) }

func (l *loadConn) writeSet(k uint64) {
	l.w.WriteString("set ")
	l.writeKey(k)
	l.w.WriteString(" 0 0 16\r\n")
	l.w.Write(value16)
	l.w.WriteString("\r\n")
}

func (l *loadConn) incr() error {
	k := l.randKey()
	l.w.WriteString("incr ")
	l.writeKey(k)
	l.w.WriteString(" 1\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	line, err := l.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) > 2 && line[0] >= '0' && line[0] <= '9' {
		return nil
	}
	if !bytes.Equal(line, replyNotFound) {
		return &errReply{"incr", bytes.Clone(line)}
	}
	l.w.WriteString("add ")
	l.writeKey(k)
	l.w.WriteString(" 0 0 1\r\n1\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	if line, err = l.r.ReadSlice('\n'); err != nil {
		return err
	}
	if bytes.Equal(line, replyStored) {
		return nil
	}
	if !bytes.Equal(line, replyNotStored) {
		return &errReply{"add", bytes.Clone(line)}
	}
	// Another connection created the key first: count on it.
	l.w.WriteString("incr ")
	l.writeKey(k)
	l.w.WriteString(" 1\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	if line, err = l.r.ReadSlice('\n'); err != nil {
		return err
	}
	if len(line) > 2 && line[0] >= '0' && line[0] <= '9' {
		return nil
	}
	return &errReply{"incr", bytes.Clone(line)}
}

func (l *loadConn) getset() error {
	k := l.randKey()
	if l.rng.Uint32N(10) == 0 {
		l.writeSet(k)
		if err := l.w.Flush(); err != nil {
			return err
		}
		line, err := l.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if !bytes.Equal(line, replyStored) {
			return &errReply{"set", bytes.Clone(line)}
		}
		return nil
	}
	l.w.WriteString("get ")
	l.writeKey(k)
	l.w.WriteString("\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	return l.readValues("get", 1)
}

func (l *loadConn) mget() error {
	l.w.WriteString("get")
	for i := 0; i < 4; i++ {
		l.w.WriteByte(' ')
		l.writeKey(l.randKey())
	}
	l.w.WriteString("\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	return l.readValues("mget", 4)
}

// readValues reads VALUE blocks up to END for a get of n keys.
func (l *loadConn) readValues(op string, n int) error {
	found := 0
	for {
		line, err := l.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if bytes.Equal(line, replyEnd) {
			l.hits += int64(found)
			l.misses += int64(n - found)
			return nil
		}
		size, ok := parseValueLine(line)
		if !ok {
			return &errReply{op, bytes.Clone(line)}
		}
		if _, err := l.r.Discard(size + 2); err != nil {
			return err
		}
		found++
	}
}

// parseValueLine returns the data length of "VALUE <key> <flags> <bytes>
// [<cas>]\r\n".
func parseValueLine(line []byte) (int, bool) {
	if !bytes.HasPrefix(line, valuePrefix) || !bytes.HasSuffix(line, []byte("\r\n")) {
		return 0, false
	}
	rest := line[len(valuePrefix) : len(line)-2]
	var fields [4][]byte
	nf := 0
	for len(rest) > 0 && nf < len(fields) {
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			i = len(rest)
		}
		if i > 0 {
			fields[nf] = rest[:i]
			nf++
		}
		rest = rest[min(i+1, len(rest)):]
	}
	if (nf != 3 && nf != 4) || len(rest) != 0 {
		return 0, false
	}
	size, err := strconv.ParseUint(string(fields[2]), 10, 31)
	if err != nil {
		return 0, false
	}
	return int(size), true
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// ProcessCPUSeconds returns the user+system CPU time of process pid from
// /proc/PID/stat (Linux only).
func ProcessCPUSeconds(pid int) (float64, error) {
	var buf [1024]byte
	f, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", pid, err)
	}
	defer syscall.Close(f)
	n, err := syscall.Read(f, buf[:])
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", pid, err)
	}
	return parseProcStatCPU(buf[:max(n, 0)])
}

// parseProcStatCPU extracts utime+stime (fields 14 and 15) from a
// /proc/PID/stat line, in seconds. The command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
func parseProcStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: /proc stat: no command field")
	}
	fields := bytes.Fields(stat[i+1:])
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("bench: /proc stat: %d fields after command", len(fields))
	}
	ut, err1 := strconv.ParseUint(string(fields[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: /proc stat: bad utime/stime %q %q", fields[11], fields[12])
	}
	return float64(ut+st) / clockTicks, nil
}

// selfCPUSeconds is this process's user+system CPU time.
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

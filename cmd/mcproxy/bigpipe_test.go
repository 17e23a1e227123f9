package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// bigPipeRuns is how many times TestMcproxyBigValuePipeline runs the
// pipeline (POPLIMIT_BIGPIPE_RUNS overrides, e.g. 8 when measuring).
func bigPipeRuns() int {
	if n, err := strconv.Atoi(os.Getenv("POPLIMIT_BIGPIPE_RUNS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// procStatusKB reads a field (VmRSS, VmHWM) of /proc/PID/status in KB.
func procStatusKB(t *testing.T, pid int, field string) int {
	t.Helper()
	st, err := procs.ReadStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	n := st.Field(field)
	if n < 0 {
		t.Fatalf("no %s in /proc/%d/status", field, pid)
	}
	return int(n)
}

// readBigReplies reads gets replies of one size-byte value each and
// returns the bytes read. A reply that is not the value (a SERVER_ERROR:
// a shard timed out under load) fails at once with its text, instead of
// waiting for bytes that will never come: that wait looked like a stall.
func readBigReplies(br *bufio.Reader, gets, size int) (int64, error) {
	var n int64
	for i := range gets {
		l, err := br.ReadString('\n')
		n += int64(len(l))
		if err != nil {
			return n, fmt.Errorf("reply %d: %w", i, err)
		}
		if !strings.HasPrefix(l, "VALUE ") || !strings.HasSuffix(l, fmt.Sprintf(" %d\r\n", size)) {
			return n, fmt.Errorf("reply %d of %d is %q, not a %d-byte value", i, gets, l, size)
		}
		m, err := io.CopyN(io.Discard, br, int64(size)+2)
		n += m
		if err != nil {
			return n, fmt.Errorf("reply %d: %w", i, err)
		}
		if l, err = br.ReadString('\n'); l != "END\r\n" {
			return n + int64(len(l)), fmt.Errorf("reply %d ends with %q (%v)", i, l, err)
		}
		n += int64(len(l))
	}
	return n, nil
}

// TestMcproxyBigValuePipeline: 300 pipelined gets of 900 KB values from
// real memcached through the mcproxy process complete every run (a
// client that reads gets everything) with the process's peak RSS under
// 100 MB; a client that pipelines them and does not read keeps the
// process's RSS bounded by its reply budget.
func TestMcproxyBigValuePipeline(t *testing.T) {
	bin := buildMcproxy(t)
	ms := fixture.Memcached(t, 3)
	var args []string
	for _, m := range ms {
		args = append(args, "--shard", m.Addr)
	}
	p := startMcproxy(t, bin, "", append(args, "--timeout", "5s", "--admin", "")...)
	pid := p.cmd.Process.Pid
	const size, keys, gets = 900 << 10, 8, 300
	val := strings.Repeat("v", size)
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for k := range keys {
		if l := mcLine(t, c, br, fmt.Sprintf("set big%d 0 0 %d\r\n%s\r\n", k, size, val)); l != "STORED\r\n" {
			t.Fatalf("set: %q", l)
		}
	}
	var req strings.Builder
	for i := range gets {
		fmt.Fprintf(&req, "get big%d\r\n", i%keys)
	}
	want := int64(gets) * int64(len(fmt.Sprintf("VALUE big0 0 %d\r\n", size))+size+len("\r\nEND\r\n"))
	for run := range bigPipeRuns() {
		start := time.Now()
		_ = c.SetDeadline(start.Add(20 * time.Second))
		errc := make(chan error, 1)
		go func() { _, err := io.WriteString(c, req.String()); errc <- err }()
		n, err := readBigReplies(br, gets, size)
		if err != nil {
			if os.Getenv("POPLIMIT_BIGPIPE_DUMP") != "" { // goroutines of the stalled proxy
				_ = p.cmd.Process.Signal(syscall.SIGQUIT)
				time.Sleep(time.Second)
				_ = os.WriteFile(os.Getenv("POPLIMIT_BIGPIPE_DUMP"), []byte(p.logs.String()), 0o644)
			}
			logs := p.logs.String()
			t.Fatalf("run %d: %d of %d reply bytes after %v: %v; mcproxy log tail: %s", run, n, want, time.Since(start), err,
				logs[max(0, len(logs)-600):])
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		t.Logf("run %d: %d gets of %d KB in %v, mcproxy VmHWM %d MB", run, gets, size>>10,
			time.Since(start).Round(time.Millisecond), procStatusKB(t, pid, "VmHWM")>>10)
	}
	if hwm := procStatusKB(t, pid, "VmHWM") >> 10; hwm >= 100 {
		t.Errorf("mcproxy peak RSS %d MB with a reading client, want under 100 MB", hwm)
	}

	// A client that does not read: the proxy pauses it.
	lazy, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	go func() { _, _ = io.WriteString(lazy, req.String()) }()
	time.Sleep(2 * time.Second)
	rss := procStatusKB(t, pid, "VmRSS") >> 10
	t.Logf("non-reading client with %d gets of %d KB pipelined: mcproxy VmRSS %d MB", gets, size>>10, rss)
	if rss >= 100 {
		t.Errorf("mcproxy RSS %d MB with a client that does not read, want under 100 MB", rss)
	}
	_ = lazy.Close()
	p.stop(t)
}

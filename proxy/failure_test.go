package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/proxy"
)

type opResult struct {
	start, end time.Time
	reply      string
}

// loadWorker sets keys in a loop over one connection until stop, one
// request at a time, recording every reply.
func loadWorker(t *testing.T, addr string, id int, stop <-chan struct{}, out chan<- []opResult) {
	var res []opResult
	defer func() { out <- res }()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Errorf("worker %d: %v", id, err)
		return
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; i < 200000; i++ {
		select {
		case <-stop:
			return
		default:
		}
		key := fmt.Sprintf("load:%d:%d", id, i%500)
		start := time.Now()
		_ = c.SetDeadline(start.Add(5 * time.Second))
		if _, err := fmt.Fprintf(c, "set %s 0 0 1\r\nx\r\n", key); err != nil {
			t.Errorf("worker %d write: %v", id, err)
			return
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Errorf("worker %d read (the proxy must never hang or close): %v", id, err)
			return
		}
		res = append(res, opResult{start: start, end: time.Now(), reply: strings.TrimSpace(line)})
	}
}

// TestKillShardUnderLoad: one of three shards dies under load. Within
// server_failure_limit failures it is ejected and its keys go to the
// others; SERVER_ERROR only for requests in flight around the failure; after
// a restart it returns once the retry timeout has passed and a probe
// succeeded.
func TestKillShardUnderLoad(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 3)
	const retry = 600 * time.Millisecond
	p := startProxy(t, shardAddrs(ms), func(rc *proxy.RouterConfig) {
		rc.Health.AutoEject = true
		rc.Health.FailureLimit = 2
		rc.Health.RetryTimeout = retry
		rc.ProbeInterval = 20 * time.Millisecond
		// A killed shard fails at once (reset, refused); the timeout only
		// has to be long enough that a loaded machine does not time out
		// requests to the live shards.
		rc.Pool.Timeout = 2 * time.Second
	})
	m := p.router.Membership()
	const workers = 6
	stop := make(chan struct{})
	results := make(chan []opResult, workers)
	for w := 0; w < workers; w++ {
		go loadWorker(t, p.addr, w, stop, results)
	}
	waitFor(t, "load", 5*time.Second, func() bool { return p.router.Membership().Live(1) && statOf(t, p.addr, "shard_1_requests") > 200 })

	killed := time.Now()
	ms[1].Stop()
	waitFor(t, "ejection", 5*time.Second, func() bool { return !m.Live(1) })
	ejected := time.Now()
	if st := m.Health(1).Stats(); st.Failures != 2 || st.Ejections != 1 {
		t.Errorf("at ejection: %+v, want 2 consecutive failures (server_failure_limit) and 1 ejection", st)
	}
	before := statOf(t, p.addr, "cmd_set")
	waitFor(t, "load after ejection", 5*time.Second, func() bool { return statOf(t, p.addr, "cmd_set") > before+500 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ms[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "re-admission", 10*time.Second, func() bool { return m.Live(1) })
	readmitted := time.Now()
	close(stop)
	var all []opResult
	for w := 0; w < workers; w++ {
		all = append(all, <-results...)
	}

	var inWindow, afterEject, ok int
	for _, r := range all {
		switch {
		case r.reply == "STORED":
			ok++
		case strings.HasPrefix(r.reply, "SERVER_ERROR "):
			if r.start.After(ejected) {
				afterEject++
				t.Errorf("request started %v after the ejection failed: %q", r.start.Sub(ejected), r.reply)
			} else if r.end.Before(killed) {
				t.Errorf("request failed before the kill: %q", r.reply)
			} else {
				inWindow++
			}
		default:
			t.Errorf("unexpected reply %q", r.reply)
		}
	}
	// Each worker has one request in flight; with a failure limit of 2 a
	// worker can see at most a couple of failures before the ejection.
	if inWindow > 3*workers {
		t.Errorf("%d SERVER_ERRORs around the failure, want <= %d", inWindow, 3*workers)
	}
	// readmitted is observed by polling, so it is at or after the real
	// re-admission; EjectedAt is the real ejection instant.
	if gap := readmitted.Sub(m.Health(1).Stats().EjectedAt); gap < retry {
		t.Errorf("re-admitted %v after ejection, before the retry timeout %v", gap, retry)
	}
	if e := statOf(t, p.addr, "shard_1_ejections"); e != 1 {
		t.Errorf("shard_1_ejections = %d, want 1", e)
	}
	t.Logf("ops ok=%d server_errors_in_window=%d ejected_after=%v readmitted_after=%v",
		ok, inWindow, ejected.Sub(killed), readmitted.Sub(ejected))

	// Back on the ring: a key of shard 1 lands on the restarted memcached.
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("back:%d", i)
		if p.router.Locate([]byte(key)) == 1 {
			break
		}
	}
	mc := memcache.New(p.addr)
	defer mc.Close()
	if err := mc.Set(&memcache.Item{Key: key, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	direct := memcache.New(ms[1].Addr)
	defer direct.Close()
	if _, err := direct.Get(key); err != nil {
		t.Errorf("key %s not on the re-admitted shard: %v", key, err)
	}
}

// TestHungShardTimesOut: a shard that accepts but never answers (SIGSTOP)
// costs a request its timeout, answered SERVER_ERROR, never a hang; other
// shards keep answering.
func TestHungShardTimesOut(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 2)
	const timeout = 500 * time.Millisecond
	p := startProxy(t, shardAddrs(ms), func(rc *proxy.RouterConfig) { rc.Pool.Timeout = timeout })
	if err := ms[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ms[0].Resume() }()
	var hung, live string
	for i := 0; hung == "" || live == ""; i++ {
		k := fmt.Sprintf("h%d", i)
		if p.router.Locate([]byte(k)) == 0 {
			hung = k
		} else {
			live = k
		}
	}
	start := time.Now()
	got := string(exchange(t, p.addr, []byte("get "+hung+"\r\nget "+live+"\r\n"), "END\r\n"))
	if !strings.HasPrefix(got, "SERVER_ERROR timeout\r\n") || !strings.HasSuffix(got, "END\r\n") {
		t.Errorf("reply %q, want SERVER_ERROR timeout then END", got)
	}
	if el := time.Since(start); el > 10*timeout {
		t.Errorf("answered after %v with a %v timeout", el, timeout)
	}
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// statOf reads one of the proxy's "stats" counters.
func statOf(t *testing.T, addr, name string) int64 {
	t.Helper()
	out := string(exchange(t, addr, []byte("stats\r\n"), "END\r\n"))
	for _, line := range strings.Split(out, "\r\n") {
		var n int64
		if f := strings.Fields(line); len(f) == 3 && f[1] == name {
			fmt.Sscan(f[2], &n)
			return n
		}
	}
	t.Fatalf("no stat %s in %q", name, out)
	return 0
}

// TestStatsCounters: stats lists the proxy's counters and per-shard lines.
func TestStatsCounters(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 2)
	p := startProxy(t, shardAddrs(ms), nil)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exchange(t, p.addr, []byte("set a 0 0 1\r\n1\r\nget a b c\r\nbogus\r\n"), "ERROR\r\n")
		}()
	}
	wg.Wait()
	if got := statOf(t, p.addr, "cmd_set"); got != 3 {
		t.Errorf("cmd_set = %d", got)
	}
	if got := statOf(t, p.addr, "protocol_errors"); got != 3 {
		t.Errorf("protocol_errors = %d", got)
	}
	if got := statOf(t, p.addr, "shard_0_requests") + statOf(t, p.addr, "shard_1_requests"); got < 6 {
		t.Errorf("shard requests = %d, want >= 6", got)
	}
	out := string(exchange(t, p.addr, []byte("stats\r\n"), "END\r\n"))
	for _, want := range []string{"STAT pid ", "STAT curr_connections ", "STAT shard_0_addr " + ms[0].Addr, "STAT shard_1_live 1", "STAT shard_1_errors 0", "STAT shard_0_ejections 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q", want)
		}
	}
}

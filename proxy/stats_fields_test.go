package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
	"github.com/poplimit/poplimit/proxy"
)

// These tests check the Twemproxy stats fields that come from the backend
// pools (request_bytes, response_bytes, server_eof, in_queue,
// in_queue_bytes, out_queue, out_queue_bytes) and the pool's fragments,
// through a Proxy over real memcached shards, in both /stats.json and
// /metrics.

// statsDoc is a parsed StatsJSON document.
type statsDoc map[string]any

func readStats(t *testing.T, p *proxy.Proxy) statsDoc {
	t.Helper()
	raw := p.StatsJSON("test")
	var d statsDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("stats JSON: %v\n%s", err, raw)
	}
	return d
}

// pool returns a pool's field, server the field of one of its servers.
func (d statsDoc) pool(pool, field string) uint64 {
	return uint64(d[pool].(map[string]any)[field].(float64))
}

func (d statsDoc) server(pool, server, field string) uint64 {
	return uint64(d[pool].(map[string]any)[server].(map[string]any)[field].(float64))
}

// memcachedStat returns one counter of a shard's "stats", and the length
// of the whole reply.
func memcachedStat(t *testing.T, addr, name string) (v uint64, replyLen int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "stats\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	found := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stats from %s: %v", addr, err)
		}
		replyLen += len(line)
		if line == "END\r\n" {
			break
		}
		if rest, ok := strings.CutPrefix(line, "STAT "+name+" "); ok {
			v, err = strconv.ParseUint(strings.TrimSpace(rest), 10, 64)
			found = err == nil
		}
	}
	if !found {
		t.Fatalf("memcached %s has no stat %s", addr, name)
	}
	return v, replyLen
}

// settle runs check until it reports no problem through errorf, and fails
// the test with the last problems after 10s. The counters are exact but
// a shard's reader adds a batch's counts as it answers it: a client can
// see its reply an instant before they land.
func settle(t *testing.T, check func(errorf func(format string, args ...any))) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var problems []string
		check(func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) })
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, m := range problems {
				t.Error(m)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scrape returns the proxy's Prometheus exposition.
func scrape(t *testing.T, p *proxy.Proxy) string {
	t.Helper()
	h, err := proxy.AdminHandler(proxy.AdminConfig{Proxy: p, Registry: prometheusRegistry(t, p), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(h)
	defer admin.Close()
	_, text := httpGet(t, admin.URL+"/metrics")
	return text
}

// TestStatsWireBytes: after a known sequence of requests through the
// proxy, each shard's request_bytes is the wire bytes of the requests it
// was sent (which memcached's own bytes_read confirms) and response_bytes
// the bytes of its replies; the queues are empty again.
func TestStatsWireBytes(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 2)
	a := shardAddrs(ms)
	p := newTestProxy(t, proxy.ProxyConfig{}, []proxy.PoolSpec{spec("alpha", a...)})
	rt := p.Server("alpha").Router()

	// ka and kz live on shard 0, kn on shard 1.
	var ka, kn, kz string
	for n := 0; ka == "" || kn == "" || kz == ""; n++ {
		k := string(rune('a'+n%26)) + strconv.Itoa(n/26)
		switch {
		case rt.Locate([]byte(k)) == 1 && kn == "":
			kn = k
		case rt.Locate([]byte(k)) == 0 && ka == "":
			ka = k
		case rt.Locate([]byte(k)) == 0 && kz == "":
			kz = k
		}
	}
	r := strings.NewReplacer("KA", ka, "KN", kn, "KZ", kz)
	steps := []struct {
		name       string
		req, wire  string // what the client sends; what the shard gets
		key        string
		reply      string // what the shard answers
		clientSees string // "" when it is reply
	}{
		{name: "set", req: "set KA 0 0 5\r\nhello\r\n", key: "KA", reply: "STORED\r\n"},
		{name: "get hit", req: "get KA\r\n", key: "KA", reply: "VALUE KA 0 5\r\nhello\r\nEND\r\n"},
		{name: "incr miss", req: "incr KN 1\r\n", key: "KN", reply: "NOT_FOUND\r\n"},
		{name: "set number", req: "set KN 3 0 1\r\n5\r\n", key: "KN", reply: "STORED\r\n"},
		{name: "incr", req: "incr KN 30\r\n", key: "KN", reply: "35\r\n"},
		{name: "touch", req: "touch KN 100\r\n", key: "KN", reply: "TOUCHED\r\n"},
		{name: "get number", req: "get KN\r\n", key: "KN", reply: "VALUE KN 3 2\r\n35\r\nEND\r\n"},
		// noreply is the proxy's business: the shard is asked with a
		// reply, which counts, and the client sees nothing.
		{name: "noreply set", req: "set KZ 0 0 3 noreply\r\nabc\r\n", wire: "set KZ 0 0 3\r\nabc\r\n", key: "KZ", reply: "STORED\r\n", clientSees: "-"},
		{name: "get z", req: "get KZ\r\n", key: "KZ", reply: "VALUE KZ 0 3\r\nabc\r\nEND\r\n"},
		{name: "delete", req: "delete KA\r\n", key: "KA", reply: "DELETED\r\n"},
		{name: "get miss", req: "get KA\r\n", key: "KA", reply: "END\r\n"},
	}
	for i := range steps {
		st := &steps[i]
		if st.wire == "" {
			st.wire = st.req
		}
		st.req, st.wire, st.key, st.reply = r.Replace(st.req), r.Replace(st.wire), r.Replace(st.key), r.Replace(st.reply)
	}
	wantReq := make([]uint64, len(a))
	wantRsp := make([]uint64, len(a))
	readBefore := make([]uint64, len(a))
	for i, addr := range a {
		readBefore[i], _ = memcachedStat(t, addr, "bytes_read")
	}
	c := dialMC(t, "tcp", p.Addr("alpha").String())
	for _, st := range steps {
		i := rt.Locate([]byte(st.key))
		wantReq[i] += uint64(len(st.wire))
		wantRsp[i] += uint64(len(st.reply))
		if st.clientSees == "-" {
			if _, err := io.WriteString(c.c, st.req); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := c.do(st.req)
		if err != nil || got != st.reply {
			t.Fatalf("%s: got %q (%v), want %q", st.name, got, err, st.reply)
		}
	}
	if wantReq[0] == 0 || wantReq[1] == 0 {
		t.Fatalf("the keys should use both shards: request bytes %v", wantReq)
	}
	settle(t, func(errorf func(string, ...any)) {
		d := readStats(t, p)
		text := scrape(t, p)
		for i, addr := range a {
			checkFields(t, d, text, errorf, "alpha", addr, []field{
				{"request_bytes", "mcproxy_shard_request_bytes_total", wantReq[i]},
				{"response_bytes", "mcproxy_shard_response_bytes_total", wantRsp[i]},
				{"server_eof", "mcproxy_shard_server_eof_total", 0},
				{"in_queue", "mcproxy_shard_in_queue", 0},
				{"in_queue_bytes", "mcproxy_shard_in_queue_bytes", 0},
				{"out_queue", "mcproxy_shard_out_queue", 0},
				{"out_queue_bytes", "mcproxy_shard_out_queue_bytes", 0},
				{"server_connections", "mcproxy_shard_server_connections", 1},
			})
		}
		if got := d.pool("alpha", "fragments"); got != 0 {
			errorf("fragments = %d after single-key requests, want 0", got)
		}
	})
	for i, addr := range a {
		// memcached read exactly those bytes, plus this "stats\r\n".
		after, _ := memcachedStat(t, addr, "bytes_read")
		if got := after - readBefore[i] - uint64(len("stats\r\n")); got != wantReq[i] {
			t.Errorf("shard %d: memcached read %d request bytes, want %d", i, got, wantReq[i])
		}
	}
}

// field is a server stat and its Prometheus metric with the value both
// should have.
type field struct {
	field, metric string
	want          uint64
}

// checkFields compares a server's fields in the stats document d and the
// exposition text with their wanted values.
func checkFields(t *testing.T, d statsDoc, text string, errorf func(string, ...any), pool, server string, fields []field) {
	t.Helper()
	for _, f := range fields {
		if got := d.server(pool, server, f.field); got != f.want {
			errorf("%s %s = %d, want %d", server, f.field, got, f.want)
		}
		sample := fmt.Sprintf("%s{pool=%q,shard=%q}", f.metric, pool, server)
		if got := metricValue(t, text, sample); got != float64(f.want) {
			errorf("%s = %v, want %d", sample, got, f.want)
		}
	}
}

// TestStatsFragments: a 4-key get whose keys live on 3 shards is split
// into 3 sub-requests, which the pool counts as 3 fragments; a multi-key
// get on one shard and single-key gets are passed through whole. Each
// shard's request_bytes is its sub-request's wire form.
func TestStatsFragments(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 3)
	a := shardAddrs(ms)
	p := newTestProxy(t, proxy.ProxyConfig{}, []proxy.PoolSpec{spec("alpha", a...)})
	rt := p.Server("alpha").Router()

	// Keys k<n> until each shard owns one, then a fourth on shard 0.
	owner := make([][]string, len(a))
	for n := 0; len(owner[0]) < 2 || len(owner[1]) < 1 || len(owner[2]) < 1; n++ {
		if n > 10000 {
			t.Fatal("no keys spanning 3 shards")
		}
		k := "k" + strconv.Itoa(n)
		owner[rt.Locate([]byte(k))] = append(owner[rt.Locate([]byte(k))], k)
	}
	keys := []string{owner[0][0], owner[1][0], owner[2][0], owner[0][1]}
	c := dialMC(t, "tcp", p.Addr("alpha").String())
	if rep, err := c.do("get " + strings.Join(keys, " ") + "\r\n"); err != nil || rep != "END\r\n" {
		t.Fatalf("4-key get: %q %v", rep, err)
	}
	d := readStats(t, p)
	if got := d.pool("alpha", "fragments"); got != 3 {
		t.Errorf("fragments = %d after a 4-key get over 3 shards, want 3", got)
	}
	if got := metricValue(t, scrape(t, p), `mcproxy_pool_fragments_total{pool="alpha"}`); got != 3 {
		t.Errorf("mcproxy_pool_fragments_total = %v, want 3", got)
	}
	subReq := []string{"get " + keys[0] + " " + keys[3] + "\r\n", "get " + keys[1] + "\r\n", "get " + keys[2] + "\r\n"}
	settle(t, func(errorf func(string, ...any)) {
		d := readStats(t, p)
		text := scrape(t, p)
		for i, addr := range a {
			checkFields(t, d, text, errorf, "alpha", addr, []field{
				{"request_bytes", "mcproxy_shard_request_bytes_total", uint64(len(subReq[i]))},
				{"response_bytes", "mcproxy_shard_response_bytes_total", uint64(len("END\r\n"))},
			})
		}
	})

	// Not split: two keys of one shard, and single-key gets.
	for _, req := range []string{"get " + owner[0][0] + " " + owner[0][1] + "\r\n", "get " + keys[1] + "\r\n", "gets " + keys[2] + "\r\n"} {
		if rep, err := c.do(req); err != nil || rep != "END\r\n" {
			t.Fatalf("%q: %q %v", req, rep, err)
		}
	}
	if got := readStats(t, p).pool("alpha", "fragments"); got != 3 {
		t.Errorf("fragments = %d after gets that need no split, want still 3", got)
	}
}

// TestStatsServerEOF: stopping a shard's memcached closes the pool's
// connection from the server side: server_eof counts it, once, and the
// next request to that shard fails; the other shard sees no EOF.
func TestStatsServerEOF(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 2)
	a := shardAddrs(ms)
	p := newTestProxy(t, proxy.ProxyConfig{}, []proxy.PoolSpec{spec("alpha", a...)})
	rt := p.Server("alpha").Router()
	key := map[int]string{}
	for n := 0; len(key) < 2; n++ {
		k := "e" + strconv.Itoa(n)
		if _, ok := key[rt.Locate([]byte(k))]; !ok {
			key[rt.Locate([]byte(k))] = k
		}
	}
	c := dialMC(t, "tcp", p.Addr("alpha").String())
	for i := range a {
		if rep, err := c.do("get " + key[i] + "\r\n"); err != nil || rep != "END\r\n" {
			t.Fatalf("get on shard %d: %q %v", i, rep, err)
		}
	}
	if d := readStats(t, p); d.server("alpha", a[0], "server_eof") != 0 || d.server("alpha", a[0], "server_connections") != 1 {
		t.Fatalf("before Stop: server_eof %d, server_connections %d; want 0, 1",
			d.server("alpha", a[0], "server_eof"), d.server("alpha", a[0], "server_connections"))
	}
	ms[0].Stop()
	waitUntil(t, "server_eof", func() bool { return readStats(t, p).server("alpha", a[0], "server_eof") > 0 })
	if rep, err := c.do("get " + key[0] + "\r\n"); err != nil || !strings.HasPrefix(rep, "SERVER_ERROR") {
		t.Fatalf("get on the stopped shard: %q %v", rep, err)
	}
	d, text := readStats(t, p), scrape(t, p)
	checkFields(t, d, text, t.Errorf, "alpha", a[0], []field{
		{"server_eof", "mcproxy_shard_server_eof_total", 1},
		{"server_connections", "mcproxy_shard_server_connections", 0},
		{"out_queue", "mcproxy_shard_out_queue", 0},
	})
	checkFields(t, d, text, t.Errorf, "alpha", a[1], []field{
		{"server_eof", "mcproxy_shard_server_eof_total", 0},
		{"server_connections", "mcproxy_shard_server_connections", 1},
	})
}

// TestStatsQueuesPausedShard: while a shard is paused (SIGSTOP) requests
// sent to it wait: small ones in the out-queue (written, no reply), and
// once the sockets' buffers are full, the rest in the in-queue (not
// written). After Resume every request is answered and both queues are
// empty; the byte counts match the requests sent.
func TestStatsQueuesPausedShard(t *testing.T) {
	noLeaks(t)
	ms := fixture.Memcached(t, 1)
	sp := spec("alpha", ms[0].Addr)
	sp.Timeout = 20 * time.Second // no timeout while paused
	p := newTestProxy(t, proxy.ProxyConfig{}, []proxy.PoolSpec{sp})
	addr := ms[0].Addr
	c := dialMC(t, "tcp", p.Addr("alpha").String())
	if rep, err := c.do("get warm\r\n"); err != nil || rep != "END\r\n" {
		t.Fatalf("get: %q %v", rep, err)
	}
	if err := ms[0].Pause(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "memcached stopped", func() bool { return procs.Stopped(ms[0].Pid()) })

	// Small requests: written at once, then no reply.
	const small = 10
	smallReq := "incr q 1\r\n"
	if _, err := io.WriteString(c.c, strings.Repeat(smallReq, small)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "out_queue", func() bool { return readStats(t, p).server("alpha", addr, "out_queue") == small })
	d := readStats(t, p)
	if got, want := d.server("alpha", addr, "out_queue_bytes"), uint64(small*len(smallReq)); got != want {
		t.Errorf("paused: out_queue_bytes = %d, want %d", got, want)
	}
	if got := d.server("alpha", addr, "in_queue"); got != 0 {
		t.Errorf("paused, small requests: in_queue = %d, want 0", got)
	}

	// Large sets until the sockets to the paused shard are full: the
	// writer blocks and requests wait in the in-queue.
	value := strings.Repeat("v", 256<<10)
	bigReq := "set big 0 0 " + strconv.Itoa(len(value)) + "\r\n" + value + "\r\n"
	const big = 40 // 10 MiB: more than loopback buffers hold, less than the client budget
	wrote := make(chan error, 1)
	go func() { _, err := io.WriteString(c.c, strings.Repeat(bigReq, big)); wrote <- err }()
	waitUntil(t, "in_queue", func() bool {
		d := readStats(t, p)
		return d.server("alpha", addr, "in_queue") > 0 && d.server("alpha", addr, "in_queue_bytes") >= uint64(len(bigReq))
	})
	if got := readStats(t, p).server("alpha", addr, "out_queue"); got < small {
		t.Errorf("paused, writer blocked: out_queue = %d, want ≥ %d", got, small)
	}

	if err := ms[0].Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	_ = c.c.SetDeadline(time.Now().Add(10 * time.Second))
	for i := range small + big {
		line, err := c.br.ReadString('\n')
		want := "STORED\r\n"
		if i < small {
			want = "NOT_FOUND\r\n"
		}
		if err != nil || line != want {
			t.Fatalf("reply %d: %q %v, want %q", i, line, err, want)
		}
	}
	wantReq := uint64(len("get warm\r\n") + small*len(smallReq) + big*len(bigReq))
	wantRsp := uint64(len("END\r\n") + small*len("NOT_FOUND\r\n") + big*len("STORED\r\n"))
	settle(t, func(errorf func(string, ...any)) {
		checkFields(t, readStats(t, p), scrape(t, p), errorf, "alpha", addr, []field{
			{"request_bytes", "mcproxy_shard_request_bytes_total", wantReq},
			{"response_bytes", "mcproxy_shard_response_bytes_total", wantRsp},
			{"requests", "mcproxy_shard_requests_total", 1 + small + big},
			{"in_queue", "mcproxy_shard_in_queue", 0},
			{"in_queue_bytes", "mcproxy_shard_in_queue_bytes", 0},
			{"out_queue", "mcproxy_shard_out_queue", 0},
			{"out_queue_bytes", "mcproxy_shard_out_queue_bytes", 0},
		})
	})
}

// TestStatsMemoryBackendZero: in-process shards have no wire and no
// queue: their byte and queue fields are 0 while requests are counted.
func TestStatsMemoryBackendZero(t *testing.T) {
	noLeaks(t)
	p := newTestProxy(t, proxy.ProxyConfig{NewBackend: memoryBackend}, []proxy.PoolSpec{spec("mem", "e0", "e1")})
	c := dialMC(t, "tcp", p.Addr("mem").String())
	if rep, err := c.do("set x 0 0 1\r\n1\r\n"); err != nil || rep != "STORED\r\n" {
		t.Fatalf("set: %q %v", rep, err)
	}
	d := readStats(t, p)
	var requests uint64
	for _, sv := range []string{"e0", "e1"} {
		requests += d.server("mem", sv, "requests")
		for _, f := range []string{"request_bytes", "response_bytes", "server_eof", "in_queue", "in_queue_bytes", "out_queue", "out_queue_bytes"} {
			if got := d.server("mem", sv, f); got != 0 {
				t.Errorf("%s %s = %d, want 0", sv, f, got)
			}
		}
	}
	if requests != 1 {
		t.Errorf("requests = %d, want 1", requests)
	}
}

// TestStatsKeyOrder: the document keeps nutcracker 0.5's key order at
// every level (tools parse it as a stream).
func TestStatsKeyOrder(t *testing.T) {
	noLeaks(t)
	p := newTestProxy(t, proxy.ProxyConfig{NewBackend: memoryBackend}, []proxy.PoolSpec{spec("mem", "e0", "e1")})
	c := dialMC(t, "tcp", p.Addr("mem").String())
	if rep, err := c.do("get a b c d\r\n"); err != nil || rep != "END\r\n" {
		t.Fatalf("get: %q %v", rep, err)
	}
	keys := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(p.StatsJSON("test"))))
	var walk func(path string)
	walk = func(path string) {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		if tok != json.Delim('{') {
			return
		}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			keys[path] = append(keys[path], k.(string))
			walk(path + "/" + k.(string))
		}
		if _, err := dec.Token(); err != nil { // '}'
			t.Fatal(err)
		}
	}
	walk("")
	want := map[string]string{
		"":        "service source version uptime timestamp total_connections curr_connections mem",
		"/mem":    "client_eof client_err client_connections server_ejects forward_error fragments e0 e1",
		"/mem/e0": "server_eof server_err server_timedout server_connections server_ejected_at requests request_bytes responses response_bytes in_queue in_queue_bytes out_queue out_queue_bytes",
	}
	want["/mem/e1"] = want["/mem/e0"]
	for path, w := range want {
		if got := strings.Join(keys[path], " "); got != w {
			t.Errorf("keys of %q:\n got %s\nwant %s", path, got, w)
		}
	}
}

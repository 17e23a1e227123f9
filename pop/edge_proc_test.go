package pop_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// edgeSafetyDoc: one limited route, a default policy for the rest, and
// only 10.0.0.0/8 trusted (the test client on 127.0.0.1 is not).
const edgeSafetyDoc = `version: 1
headers: seed
trusted_proxies: [10.0.0.0/8]
default_policy: rest
tiers:
  t: {limits: [{name: q, algorithm: fixed_window, quantity: 100, window: 1m}]}
policies:
  - {name: widgets, routes: ["/api/widgets"], identity: [ip], tier: t}
  - {name: rest, identity: [ip], tier: t}
`

// TestEdgeSafeProxy runs the edge binary with default flags but a short
// --upstream-timeout and a --reload-token: a 10 s upstream gets 504 at the
// timeout; a spoofed X-Forwarded-For is replaced; the upstream reads the
// normalised path; unmatched paths get the default policy; POST /reload
// needs the token; /healthz says degraded while the file is invalid.
func TestEdgeSafeProxy(t *testing.T) {
	bin, _ := binaries(t)
	seen := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(10 * time.Second):
			case <-r.Context().Done():
			}
			return
		}
		seen <- r.URL.EscapedPath() + " xff=" + r.Header.Get("X-Forwarded-For")
	}))
	defer up.Close()
	dir := t.TempDir()
	policy := writePolicy(t, dir, edgeSafetyDoc)
	e := startEdge(t, bin, up.URL, "", policy, "--upstream-timeout", "500ms", "--reload-token", "tok")
	base := "http://" + e.addr

	start := time.Now()
	status, _ := get(t, base+"/slow", "")
	took := time.Since(start)
	if status != http.StatusGatewayTimeout || took < 500*time.Millisecond || took > 3*time.Second {
		t.Errorf("10 s upstream: %d after %v, want 504 after about 500ms", status, took)
	}
	t.Logf("10 s upstream with --upstream-timeout 500ms: %d after %v", status, took)

	r, _ := http.NewRequest("GET", base+"//API/./x/../widgets/", nil)
	r.Header.Set("X-Forwarded-For", "6.6.6.6")
	resp, err := httpClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := <-seen; got != "/API/widgets xff=127.0.0.1" || resp.Header.Get("Ratelimit-Limit") != "100" {
		t.Errorf("upstream saw %q (limit header %q), want the normalised path and the peer as X-Forwarded-For", got, resp.Header.Get("Ratelimit-Limit"))
	}
	if status, h := get(t, base+"/api/a/b/c", ""); status != 200 || h.Get("Ratelimit-Limit") != "100" {
		t.Errorf("unmatched path: %d, limit %q: not under the default policy", status, h.Get("Ratelimit-Limit"))
	}
	<-seen

	reload := func(token string) int {
		r, _ := http.NewRequest("POST", "http://"+e.admin+"/reload", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := reload(""); c != http.StatusUnauthorized {
		t.Errorf("reload without token: %d, want 401", c)
	}
	if c := reload("tok"); c != 200 {
		t.Errorf("reload with token: %d", c)
	}
	writePolicy(t, dir, strings.Replace(edgeSafetyDoc, "default_policy: rest", "default_policy: nope", 1))
	if c := reload("tok"); c != http.StatusUnprocessableEntity {
		t.Errorf("reload of an invalid file: %d, want 422", c)
	}
	resp, err = http.Get("http://" + e.admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Status  string
		Reasons []string
	}
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h.Status != "degraded" || len(h.Reasons) == 0 || !strings.Contains(h.Reasons[0], "default_policy") {
		t.Errorf("healthz with an invalid file: %+v", h)
	}
}

// TestEdgeStreamsResponses: edge passes a response on as it arrives, not
// once it is whole, so a long or large response holds no more than a
// buffer in edge.
func TestEdgeStreamsResponses(t *testing.T) {
	bin, _ := binaries(t)
	gotFirst := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("a"), 64<<10))
		w.(http.Flusher).Flush()
		select {
		case <-gotFirst:
			w.Write([]byte("end"))
		case <-time.After(5 * time.Second):
			w.Write([]byte("late"))
		}
	}))
	defer up.Close()
	policy := writePolicy(t, t.TempDir(), edgeSafetyDoc)
	e := startEdge(t, bin, up.URL, "", policy)
	resp, err := httpClient.Get("http://" + e.addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	close(gotFirst)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "end" {
		t.Errorf("after the first 64 KiB: %q, %v; want \"end\": the first part reached the client only once the upstream had finished", rest, err)
	}
}

// TestEdgeSlowClients: a client that never finishes its headers is closed
// at --read-header-timeout, an idle keep-alive connection at
// --idle-timeout, and headers over --max-header-bytes get 431.
func TestEdgeSlowClients(t *testing.T) {
	bin, _ := binaries(t)
	policy := writePolicy(t, t.TempDir(), edgeSafetyDoc)
	e := startEdge(t, bin, upstream(t), "", policy, "--read-header-timeout", "300ms", "--idle-timeout", "300ms", "--max-header-bytes", "4096")
	closedAfter := func(c net.Conn) time.Duration {
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, c)
		return time.Since(start)
	}
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /api/widgets HTTP/1.1\r\nHost: edge.test\r\nX-Slow: ")
	if d := closedAfter(c); d < 100*time.Millisecond || d > 3*time.Second {
		t.Errorf("half-sent headers: closed after %v, want about 300ms", d)
	}
	c2, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "GET /api/widgets HTTP/1.1\r\nHost: edge.test\r\n\r\n")
	br := bufio.NewReader(c2)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	start := time.Now()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, br)
	if d := time.Since(start); d < 100*time.Millisecond || d > 3*time.Second {
		t.Errorf("idle keep-alive: closed after %v, want about 300ms", d)
	}
	r, _ := http.NewRequest("GET", "http://"+e.addr+"/api/widgets", nil)
	r.Header.Set("X-Big", strings.Repeat("x", 8192))
	resp, err = httpClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("8 KiB header with --max-header-bytes 4096: %d, want 431", resp.StatusCode)
	}
}

// TestEdgeFDExhaustion: edge under RLIMIT_NOFILE 256 (prlimit) and 1,000
// connection attempts does not exit: accept backs off and counts
// poplimit_edge_accept_errors_total, a client connected before keeps being
// served, and new clients are accepted once the flood closes.
func TestEdgeFDExhaustion(t *testing.T) {
	prl := fixture.LookPath(t, "prlimit")
	bin, _ := binaries(t)
	start := time.Now()
	defer func() { t.Logf("flood test (without the build) took %v", time.Since(start)) }()
	policy := writePolicy(t, t.TempDir(), edgeSafetyDoc)
	listen, admin := fixture.FreeAddr(t), fixture.FreeAddr(t)
	p := startProc(t, prl, "--nofile=256:256", bin, "--listen", listen, "--upstream", upstream(t), "--policy", policy, "--admin", admin)
	one := func() *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
	}
	old, adminClient := one(), one()
	body := func(c *http.Client, url string) (int, string) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitUntil(t, "edge "+listen, func() bool { c, _ := body(adminClient, "http://"+admin+"/healthz"); return c == 200 })
	if c, b := body(old, "http://"+listen+"/api/widgets"); c != 200 {
		t.Fatalf("before the flood: %d %s", c, b)
	}
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 1000 {
		if c, err := net.DialTimeout("tcp", listen, 100*time.Millisecond); err == nil {
			flood = append(flood, c)
		}
	}
	for i := range 20 {
		if c, b := body(old, "http://"+listen+"/api/widgets"); c != 200 {
			t.Fatalf("old client, request %d during the flood: %d %s", i, c, b)
		}
	}
	var errs float64
	waitUntil(t, "accept errors counted", func() bool {
		_, m := body(adminClient, "http://"+admin+"/metrics")
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, `poplimit_edge_accept_errors_total{listener="proxy"}`) {
				f := strings.Fields(line)
				errs, _ = strconv.ParseFloat(f[len(f)-1], 64)
			}
		}
		return errs > 0
	})
	select {
	case <-p.Done():
		t.Fatal("edge exited during the flood")
	default:
	}
	t.Logf("%v: %d of 1000 flood connections established, %v accept errors counted", time.Since(start), len(flood), errs)
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	fresh := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	waitUntil(t, "a new client accepted after the flood", func() bool { c, _ := body(fresh, "http://"+listen+"/api/widgets"); return c == 200 })
}

// TestEdgeRefusalReachesClientStillSending: a request refused before it
// was read whole (431 for its headers, 413 for its body) gets its answer
// even though the client is still sending: edge stops reading, answers,
// and drains before closing, so no reset destroys the answer.
func TestEdgeRefusalReachesClientStillSending(t *testing.T) {
	bin, _ := binaries(t)
	policy := writePolicy(t, t.TempDir(), edgeSafetyDoc)
	for _, core := range []string{"fasthttp", "net/http"} {
		t.Run(strings.ReplaceAll(core, "/", "-"), func(t *testing.T) {
			e := startEdge(t, bin, upstream(t), "", policy, "--core", core, "--max-header-bytes", "4096", "--max-body-bytes", "1024")
			client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := range 10 {
				r, _ := http.NewRequest("GET", "http://"+e.addr+"/api/widgets", nil)
				r.Header.Set("X-Big", strings.Repeat("x", 256<<10))
				resp, err := client.Do(r)
				if err != nil {
					t.Fatalf("256 KiB header, try %d: %v", i, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
					t.Fatalf("256 KiB header, try %d: %d, want 431", i, resp.StatusCode)
				}
				resp, err = client.Post("http://"+e.addr+"/api/widgets", "application/octet-stream", bytes.NewReader(make([]byte, 128<<10)))
				if err != nil {
					t.Fatalf("128 KiB body, try %d: %v", i, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestEntityTooLarge {
					t.Fatalf("128 KiB body, try %d: %d, want 413", i, resp.StatusCode)
				}
			}
		})
	}
}

// TestEdgeRequestsNotForwarded: on both cores, "OPTIONS *" is answered
// by edge (200, empty), CONNECT is refused 405 (a reverse proxy opens no
// tunnels), and an HTTP/1.0 upstream's answer reaches the client with
// this hop's HTTP/1.1 status line.
func TestEdgeRequestsNotForwarded(t *testing.T) {
	bin, _ := binaries(t)
	policy := writePolicy(t, t.TempDir(), edgeSafetyDoc)
	up := oneShotUpstream(t, func(req *http.Request) string { // HTTP/1.0, echoing the request line
		body := req.Method + " " + req.RequestURI
		return fmt.Sprintf("HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
	for _, core := range []string{"fasthttp", "net/http"} {
		t.Run(strings.ReplaceAll(core, "/", "-"), func(t *testing.T) {
			e := startEdge(t, bin, up, "", policy, "--core", core)
			for _, tt := range []struct {
				req, status, body string
			}{
				{"OPTIONS * HTTP/1.1", "HTTP/1.1 200 OK", ""},
				{"CONNECT example.com:443 HTTP/1.1", "HTTP/1.1 405 Method Not Allowed", "method not allowed\n"},
				{"GET /api/widgets HTTP/1.1", "HTTP/1.1 200 OK", "GET /api/widgets"},
			} {
				c, err := net.Dial("tcp", e.addr)
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, tt.req+"\r\nHost: edge.test\r\nConnection: close\r\n\r\n")
				br := bufio.NewReader(c)
				line, _ := br.ReadString('\n')
				resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(line), br)), nil)
				if err != nil {
					t.Fatalf("%s: %v", tt.req, err)
				}
				body, _ := io.ReadAll(resp.Body)
				c.Close()
				if got := strings.TrimRight(line, "\r\n"); got != tt.status || string(body) != tt.body {
					t.Errorf("%s: %q %q, want %q %q", tt.req, got, body, tt.status, tt.body)
				}
			}
		})
	}
}

// TestEdgeKeepsFieldOrder: dropping hop-by-hop fields reorders no other
// field, both ways, on both cores: fields of one name (Link,
// WWW-Authenticate, X-Forwarded-For chains) are ordered lists.
func TestEdgeKeepsFieldOrder(t *testing.T) {
	bin, _ := binaries(t)
	policy := writePolicy(t, t.TempDir(), edgeSafetyDoc)
	up := oneShotUpstream(t, func(r *http.Request) string {
		body := strings.Join(r.Header.Values("X-Multi"), ",")
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nLink: <a>\r\nX-Other: 1\r\nLink: <b>\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
	for _, core := range []string{"fasthttp", "net/http"} {
		t.Run(strings.ReplaceAll(core, "/", "-"), func(t *testing.T) {
			e := startEdge(t, bin, up, "", policy, "--core", core)
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET /api/widgets HTTP/1.1\r\nHost: edge.test\r\nKeep-Alive: 300\r\nX-Multi: a\r\nTe: trailers\r\nX-Multi: b\r\nX-Multi: c\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "a,b,c" {
				t.Errorf("the upstream got X-Multi %q, want a,b,c", body)
			}
			if got := resp.Header.Values("Link"); !slices.Equal(got, []string{"<a>", "<b>"}) || resp.Header.Get("Keep-Alive") != "" {
				t.Errorf("the client got Link %q, Keep-Alive %q; want [<a> <b>] and none", got, resp.Header.Get("Keep-Alive"))
			}
		})
	}
}

// TestEdgePipelinedAndTrickledRequests: requests pipelined in one write,
// one pipelined while edge is still answering the one before, and one sent
// a byte at a time are all answered, in order, on one connection.
func TestEdgePipelinedAndTrickledRequests(t *testing.T) {
	bin, _ := binaries(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(100 * time.Millisecond)
		}
		io.WriteString(w, r.URL.Path)
	}))
	defer up.Close()
	policy := writePolicy(t, t.TempDir(), edgeSafetyDoc)
	e := startEdge(t, bin, up.URL, "", policy)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: edge.test\r\n\r\n" }
	br := bufio.NewReader(c)
	expect := func(paths ...string) {
		t.Helper()
		for _, p := range paths {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer for %s: %v", p, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(body) != p {
				t.Fatalf("answer for %s: %d %q", p, resp.StatusCode, body)
			}
		}
	}
	io.WriteString(c, req("/a")+req("/b")+req("/c"))
	expect("/a", "/b", "/c")
	io.WriteString(c, req("/slow"))
	time.Sleep(30 * time.Millisecond) // edge is waiting for the upstream
	io.WriteString(c, req("/after-slow"))
	expect("/slow", "/after-slow")
	for _, b := range []byte(req("/trickled")) {
		c.Write([]byte{b})
		time.Sleep(time.Millisecond)
	}
	expect("/trickled")
}

// TestEdgeUpstreamClosesIdleConnections: an upstream that closes every
// connection after its response, without saying so, costs no request: a
// GET that finds its pooled connection closed is sent again on another
// one, at once (not at a timeout). A POST is not sent twice: it gets 502.
func TestEdgeUpstreamClosesIdleConnections(t *testing.T) {
	bin, _ := binaries(t)
	up := oneShotUpstream(t, func(*http.Request) string { return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" })
	policy := writePolicy(t, t.TempDir(), edgeSafetyDoc)
	e := startEdge(t, bin, up, "", policy, "--upstream-header-timeout", "5s", "--upstream-timeout", "10s")
	for i := range 20 {
		start := time.Now()
		status, _ := get(t, "http://"+e.addr+"/api/widgets", "")
		if d := time.Since(start); status != http.StatusOK || d > 2*time.Second {
			t.Fatalf("GET %d after the upstream closed its connection: %d after %v, want 200 at once", i, status, d)
		}
		time.Sleep(20 * time.Millisecond) // the upstream's close arrives
	}
	resp, err := httpClient.Post("http://"+e.addr+"/api/widgets", "text/plain", strings.NewReader("once"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("POST on a pooled connection the upstream closed: %d, want 502 (never sent twice)", resp.StatusCode)
	}
}

// TestEdgeHTTPSUpstream: edge forwards to an https upstream (the test
// server's certificate trusted through SSL_CERT_FILE), request after
// request on its pooled TLS connections.
func TestEdgeHTTPSUpstream(t *testing.T) {
	bin, _ := binaries(t)
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "tls "+r.URL.Path)
	}))
	defer up.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca) // inherited by the edge process
	policy := writePolicy(t, t.TempDir(), edgeSafetyDoc)
	e := startEdge(t, bin, up.URL, "", policy)
	for i := range 5 {
		resp, err := httpClient.Get("http://" + e.addr + "/api/widgets")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "tls /api/widgets" {
			t.Fatalf("request %d through https: %d %q", i, resp.StatusCode, body)
		}
	}
}

// TestEdgeConcurrencySlotHeldWhileStreaming: a concurrency slot is held
// until the response's streamed body is written, not until the upstream's
// headers arrive, and given back when the client goes away mid-stream.
func TestEdgeConcurrencySlotHeldWhileStreaming(t *testing.T) {
	bin, _ := binaries(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunks := 10 // 1 s
		switch r.URL.Path {
		case "/long":
			chunks = 600 // 60 s, unless the client leaves
		case "/stream":
		default:
			return
		}
		for range chunks {
			io.WriteString(w, "chunk\n")
			w.(http.Flusher).Flush()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	}))
	defer up.Close()
	policy := writePolicy(t, t.TempDir(), `version: 1
default_policy: p
tiers:
  t: {limits: [{name: inflight, algorithm: concurrency, quantity: 1, max_request_time: 30s, retry_after: 1s}]}
policies:
  - {name: p, identity: [ip], tier: t}
`)
	e := startEdge(t, bin, up.URL, "", policy)
	base := "http://" + e.addr
	stream := func() (*http.Response, error) { return httpClient.Get(base + "/stream") }
	a, err := stream()
	if err != nil {
		t.Fatal(err)
	}
	if a.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %d", a.StatusCode)
	}
	if status, _ := get(t, base+"/other", ""); status != http.StatusTooManyRequests {
		t.Fatalf("a second request while the first streams: %d, want 429", status)
	}
	io.Copy(io.Discard, a.Body)
	a.Body.Close()
	waitUntil(t, "the slot back after the stream", func() bool {
		status, _ := get(t, base+"/other", "")
		return status == http.StatusOK
	})
	b, err := httpClient.Get(base + "/long") // the client goes away mid-stream
	if err != nil {
		t.Fatal(err)
	}
	b.Body.Read(make([]byte, 1))
	b.Body.Close()
	waitUntil(t, "the slot back after the client left (within 10 s of a 60 s stream)", func() bool {
		status, _ := get(t, base+"/other", "")
		return status == http.StatusOK
	})
}

// oneShotUpstream is an upstream that reads one request per connection,
// writes answer(request) as is and closes the connection without saying
// so; its URL, stopped with the test.
func oneShotUpstream(t *testing.T, answer func(*http.Request) string) string {
	t.Helper()
	return "http://" + fixture.TCPServer(t, func(c net.Conn) {
		r, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		r.Body.Close()
		io.WriteString(c, answer(r))
	})
}

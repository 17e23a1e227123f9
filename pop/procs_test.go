package pop_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// binaries returns cmd/edge and cmd/mcproxy, built once per test run
// (POPLIMIT_MCPROXY names another mcproxy build to benchmark, for A/B).
func binaries(t testing.TB) (edge, mcproxy string) {
	t.Helper()
	if testing.Short() {
		t.Skip("process integration test skipped in -short mode")
	}
	edge, mcproxy = fixture.Binary(t, "edge"), fixture.Binary(t, "mcproxy")
	if bin := os.Getenv("POPLIMIT_MCPROXY"); bin != "" {
		mcproxy = bin
	}
	return edge, mcproxy
}

// proc is a child process (fixture.Start: killed at test end, its log
// shown when the test failed) and its main listener.
type proc struct {
	*procs.Proc
	addr string
}

func (p *proc) kill() { p.Kill() }

func startProc(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	return &proc{Proc: fixture.Start(t, name, args...)}
}

// startMcproxy runs mcproxy in front of shards on addr (a free port if "").
func startMcproxy(t testing.TB, bin, addr string, shards []*procs.Memcached) *proc {
	t.Helper()
	p := fixture.Mcproxy(t, bin, addr, fixture.Addrs(shards))
	return &proc{Proc: p, addr: p.Addr}
}

type edgeProc struct {
	*proc
	admin string
}

// startEdge runs an edge worker and waits for /healthz.
func startEdge(t *testing.T, bin, upstream, memcached, policy string, extra ...string) *edgeProc {
	t.Helper()
	listen, admin := fixture.FreeAddr(t), fixture.FreeAddr(t)
	args := []string{"--listen", listen, "--upstream", upstream, "--policy", policy, "--admin", admin}
	if memcached != "" {
		args = append(args, "--memcached", memcached)
	}
	args = append(args, extra...)
	p := startProc(t, bin, args...)
	p.addr = listen
	waitUntil(t, "edge "+listen, func() bool {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return &edgeProc{proc: p, admin: admin}
}

// waitUntil polls cond every 20ms for at most 10s (process start-up).
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// upstream is an HTTP server answering 200 "ok".
func upstream(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(s.Close)
	return s.URL
}

func writePolicy(t *testing.T, dir, doc string) string {
	t.Helper()
	path := filepath.Join(dir, "policy.yml")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

var httpClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// get sends GET url with an API key and returns status and headers.
func get(t *testing.T, url, key string) (int, http.Header) {
	t.Helper()
	r, _ := http.NewRequestWithContext(context.Background(), "GET", url, nil)
	if key != "" {
		r.Header.Set("X-API-Key", key)
	}
	resp, err := httpClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// metric returns the sum of the samples of a metric family (with optional
// label filter substring) scraped from an admin listener.
func metric(t *testing.T, admin, name, filter string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name) || !strings.Contains(line, filter) {
			continue
		}
		rest := strings.TrimPrefix(line, name)
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

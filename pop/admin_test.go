package pop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/counter"
)

func health(t *testing.T, l *Limiter) (int, HealthReport) {
	t.Helper()
	rec := httptest.NewRecorder()
	l.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	var h HealthReport
	if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
		t.Fatalf("health body %q: %v", rec.Body, err)
	}
	return rec.Code, h
}

// TestHealthTellsTheTruth: failing (503) with no policy, ok once loaded,
// degraded with the reason while the file on disk is invalid and while the
// breaker is open, ok again once both recover.
func TestHealthTellsTheTruth(t *testing.T) {
	l, _ := New(storeConfig(counter.NewMemoryStore()))
	if code, h := health(t, l); code != 503 || h.Status != HealthFailing {
		t.Errorf("before load: %d %+v", code, h)
	}
	if err := l.LoadBytes("p.yml", []byte(minimalPolicy)); err != nil {
		t.Fatal(err)
	}
	if code, h := health(t, l); code != 200 || h.Status != HealthOK || len(h.Reasons) != 0 {
		t.Errorf("loaded: %d %+v", code, h)
	}
	if l.LoadBytes("p.yml", []byte("tiers: [")) == nil {
		t.Fatal("invalid file loaded")
	}
	if code, h := health(t, l); code != 200 || h.Status != HealthDegraded || len(h.Reasons) != 1 || !strings.Contains(h.Reasons[0], "p.yml:") {
		t.Errorf("invalid file: %d %+v", code, h)
	}
	l.LoadBytes("p.yml", []byte(minimalPolicy))
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for i := 0; i < 50 && l.Breaker().State() == BreakerClosed; i++ {
		l.Breaker().Observe(t0, refused)
	}
	if code, h := health(t, l); code != 200 || h.Status != HealthDegraded || len(h.Reasons) != 1 || !strings.Contains(h.Reasons[0], "breaker") {
		t.Errorf("breaker %v: %d %+v", l.Breaker().State(), code, h)
	}
}

func TestRequireToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := RequireToken("s3cret", ok)
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"s3cret", 401}, {"Bearer s3cret", 200}} {
		r := httptest.NewRequest("POST", "/reload", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, rec.Code, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	RequireToken("", ok).ServeHTTP(rec, httptest.NewRequest("POST", "/reload", nil))
	if rec.Code != 200 {
		t.Errorf("no token configured: %d", rec.Code)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9090": true, "[::1]:9090": true, "localhost:1": true, "127.1.2.3:80": true,
		":9090": false, "0.0.0.0:9090": false, "[::]:80": false, "10.0.0.1:80": false, "nonsense": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestAcceptSurvivesEMFILE runs an http.Server over WatchAccept in a child
// process whose RLIMIT_NOFILE leaves room for a few connections, floods it
// with connections until accept fails with EMFILE, and checks that an
// existing keep-alive client is still served, that accepting resumes once
// the flood closes, and that the failures were counted.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	if os.Getenv("POP_EMFILE_CHILD") == "1" {
		emfileChild()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAcceptSurvivesEMFILE$")
	cmd.Env = append(os.Environ(), "POP_EMFILE_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "addr "))
	// One keep-alive client, connected before the flood.
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}, Timeout: 5 * time.Second}
	get := func(c *http.Client, path string) (string, error) {
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if _, err := get(client, "/"); err != nil {
		t.Fatalf("before the flood: %v", err)
	}
	var flood []net.Conn
	for i := 0; i < 64; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		flood = append(flood, c)
	}
	var errs string
	deadline := time.Now().Add(5 * time.Second)
	for errs == "" || errs == "0" {
		if time.Now().After(deadline) {
			t.Fatalf("accept never failed under the flood (%d connections; errors %q)", len(flood), errs)
		}
		if errs, err = get(client, "/errors"); err != nil {
			t.Fatalf("existing client not served during the flood: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d flood connections, accept errors counted: %s", len(flood), errs)
	for _, c := range flood {
		c.Close()
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	deadline = time.Now().Add(5 * time.Second)
	for {
		if _, err := get(fresh, "/"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no new connection accepted after the flood closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func emfileChild() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("addr error", err)
		os.Exit(1)
	}
	var errs atomic.Int64
	wl := WatchAccept(ln, AcceptWatch{Count: func(error) { errs.Add(1) }})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, errs.Load())
	}), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	fds, _ := os.ReadDir("/proc/self/fd")
	lim := syscall.Rlimit{Cur: uint64(len(fds) + 6), Max: uint64(len(fds) + 6)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("addr error", err)
		os.Exit(1)
	}
	fmt.Println("addr", ln.Addr())
	srv.Serve(wl)
	os.Exit(0)
}

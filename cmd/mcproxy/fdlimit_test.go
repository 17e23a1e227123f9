package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestMcproxyFDExhaustion: mcproxy under RLIMIT_NOFILE 256 (prlimit) and a
// flood of 1,000 connection attempts does not exit: accept backs off
// (counted in mcproxy_accept_errors_total{reason="emfile"}, logged at most
// once a second), a client connected before keeps getting answers, and once
// the flood's connections close new clients are accepted again.
func TestMcproxyFDExhaustion(t *testing.T) {
	prl := fixture.LookPath(t, "prlimit")
	bin := buildMcproxy(t)
	ms := fixture.Memcached(t, 1)
	addr, admin := fixture.FreeAddr(t), fixture.FreeAddr(t)
	p := startMcproxy(t, prl, addr, "--nofile=256:256", bin, "--listen", addr, "--shard", ms[0].Addr, "--admin", admin, "--park-after", "50ms")

	old, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	obr := bufio.NewReader(old)
	if l := mcLine(t, old, obr, "set fd:k 0 0 1\r\nv\r\n"); l != "STORED\r\n" {
		t.Fatalf("set: %q", l)
	}
	// Idle, the old client parks (a bare descriptor): its first get below
	// needs a descriptor again, with none left.
	time.Sleep(400 * time.Millisecond)

	const attempts = 1000
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			_ = c.Close()
		}
	}()
	for range attempts {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			continue // the backlog is full: that is the flood's business
		}
		flood = append(flood, c)
	}
	// Past the fd limit: the old client is still served, the process lives.
	for i := range 20 {
		if l := mcLine(t, old, obr, "get fd:k\r\n"); l != "VALUE fd:k 0 1\r\n" {
			t.Fatalf("old client, get %d during the flood: %q", i, l)
		}
		if _, err := obr.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		if l, _ := obr.ReadString('\n'); l != "END\r\n" {
			t.Fatalf("old client: %q", l)
		}
	}
	select {
	case err := <-p.done:
		t.Fatalf("mcproxy exited during the flood: %v\n%s", err, p.logs)
	default:
	}
	connected := len(flood)
	for _, c := range flood {
		_ = c.Close()
	}
	flood = nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
			_, _ = io.WriteString(c, "version\r\n")
			l, rerr := bufio.NewReader(c).ReadString('\n')
			_ = c.Close()
			if rerr == nil && strings.HasPrefix(l, "VERSION ") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new client served 10 s after the flood closed:\n%s", p.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := mcLine(t, old, obr, "version\r\n"); !strings.HasPrefix(l, "VERSION ") {
		t.Fatalf("old client after the flood: %q", l)
	}
	// The admin endpoint shares the fd limit: read it after the flood.
	emfile := acceptErrors(t, admin, "emfile")
	if emfile == 0 {
		t.Errorf("mcproxy_accept_errors_total{reason=\"emfile\"} = 0 after %d connections under 256 fds", connected)
	}
	t.Logf("%d of %d connection attempts connected; %v EMFILE accept errors", connected, attempts, emfile)
	if n := strings.Count(p.logs.String(), "accept failed, backing off"); n > 30 {
		t.Errorf("%d accept failure log lines: not rate limited", n)
	}
	p.stop(t)
}

// acceptErrors reads mcproxy_accept_errors_total{reason} from the admin
// endpoint, summed over pools.
func acceptErrors(t *testing.T, admin, reason string) float64 {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^mcproxy_accept_errors_total\{[^}]*reason="` + reason + `"[^}]*\} (\S+)$`)
	var sum float64
	for _, m := range re.FindAllSubmatch(body, -1) {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		sum += v
	}
	return sum
}

// TestMcproxyAdminSafeDefaults: pprof is served only with --pprof, and an
// admin endpoint off loopback is warned about.
func TestMcproxyAdminSafeDefaults(t *testing.T) {
	bin := buildMcproxy(t)
	admin := fixture.FreeAddr(t)
	p := startMcproxy(t, bin, "", "--embedded", "1", "--admin", admin, "--shutdown-timeout", "500ms")
	if code, _ := getBody(t, "http://"+admin+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
	if strings.Contains(p.logs.String(), "not on loopback") {
		t.Errorf("loopback admin warned about: %s", p.logs)
	}
	p.stop(t)

	_, port, _ := net.SplitHostPort(fixture.FreeAddr(t))
	p = startMcproxy(t, bin, "", "--embedded", "1", "--admin", "0.0.0.0:"+port, "--pprof", "--shutdown-timeout", "500ms")
	if code, _ := getBody(t, "http://127.0.0.1:"+port+"/debug/pprof/"); code != http.StatusOK {
		t.Errorf("/debug/pprof/ with --pprof: %d, want 200", code)
	}
	if !strings.Contains(p.logs.String(), "not on loopback") {
		t.Errorf("no warning for an admin endpoint on 0.0.0.0: %s", p.logs)
	}
	p.stop(t)
}

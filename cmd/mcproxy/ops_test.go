package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

func TestMcproxyVersionAndHelp(t *testing.T) {
	bin := buildMcproxy(t)
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "mcproxy version ") || !strings.Contains(string(out), "(commit ") {
		t.Errorf("--version: %q %v", out, err)
	}
	help, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range newApp().Flags {
		name := f.Names()[0]
		if !strings.Contains(string(help), "--"+name) {
			t.Errorf("--help lacks --%s", name)
		}
	}
	for _, bad := range [][]string{{"--embedded", "1", "--log-format", "xml"}, {"--embedded", "1", "--log-level", "loud"}, {"--embedded", "1", "--procs", "-1"}} {
		if out, err := exec.Command(bin, bad...).CombinedOutput(); err == nil {
			t.Errorf("%v accepted: %s", bad, out)
		}
	}
}

// mcLine sends one request on c and returns the first reply line.
func mcLine(t *testing.T, c net.Conn, br *bufio.Reader, req string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	return line
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitFor(t *testing.T, what string, p *proc, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; logs:\n%s", what, p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMcproxyReload runs the daemon on a YAML file with two pools, admin
// and stats ports and JSON logs; it reloads on a file change (a shard
// added), rejects a broken file, reloads on SIGHUP (a shard removed), keeps
// the client connection throughout, and exits cleanly on SIGTERM.
func TestMcproxyReload(t *testing.T) {
	bin := buildMcproxy(t)
	ms := fixture.Memcached(t, 3)
	listenA, listenB, admin, stats := fixture.FreeAddr(t), fixture.FreeAddr(t), fixture.FreeAddr(t), fixture.FreeAddr(t)
	_, statsPort, _ := net.SplitHostPort(stats)
	cfg := filepath.Join(t.TempDir(), "nutcracker.yml")
	write := func(shards ...string) {
		yml := fmt.Sprintf("alpha:\n  listen: %s\n  distribution: ketama\n  timeout: 1000\n  servers:\n", listenA)
		for _, s := range shards {
			yml += "   - " + s + ":1\n"
		}
		yml += fmt.Sprintf("beta:\n  listen: %s\n  client_connections: 10\n  servers:\n   - %s:1\n", listenB, ms[2].Addr)
		if err := os.WriteFile(cfg+".new", []byte(yml), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfg+".new", cfg); err != nil {
			t.Fatal(err)
		}
	}
	write(ms[0].Addr)
	p := startMcproxy(t, bin, listenA, "--config", cfg, "--admin", admin, "--stats-port", statsPort,
		"--log-format", "json", "--log-level", "debug")
	c, err := net.Dial("tcp", listenA)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if got := mcLine(t, c, br, "set k 0 0 1\r\nv\r\n"); got != "STORED\r\n" {
		t.Fatalf("set: %q", got)
	}
	servers := func() int {
		_, body := getBody(t, "http://"+admin+"/stats.json")
		var st map[string]any
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("stats.json: %v %s", err, body)
		}
		n := 0
		for k := range st["alpha"].(map[string]any) {
			if strings.Contains(k, ":") {
				n++
			}
		}
		return n
	}
	if n := servers(); n != 1 {
		t.Fatalf("%d servers at start", n)
	}

	write(ms[0].Addr, ms[1].Addr)
	waitFor(t, "reload on file change", p, func() bool { return servers() == 2 })

	if err := os.WriteFile(cfg, []byte("alpha:\n  servers: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rejected config logged", p, func() bool { return strings.Contains(p.logs.String(), "new config rejected") })
	if n := servers(); n != 2 {
		t.Fatalf("%d servers after a rejected config, want 2", n)
	}

	// With the watch racing SIGHUP, either reloads the file: both must work.
	write(ms[1].Addr)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reload to one shard", p, func() bool { return servers() == 1 })
	if got := mcLine(t, c, br, "version\r\n"); !strings.HasPrefix(got, "VERSION ") {
		t.Fatalf("client connection after reloads: %q", got)
	}

	code, body := getBody(t, "http://"+admin+"/metrics")
	for _, want := range []string{`mcproxy_shard_requests_total{pool="alpha"`, `mcproxy_client_connections{pool="alpha"} 1`,
		`mcproxy_client_connections_limit{pool="beta"} 10`, `mcproxy_reloads_total{result="error"} 1`, "process_cpu_seconds_total", "go_goroutines"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, body := getBody(t, "http://"+admin+"/healthz"); code != 200 || !strings.HasPrefix(body, `{"status":"ok"`) {
		t.Errorf("/healthz: %d %q", code, body)
	}
	sc, err := net.Dial("tcp", stats)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(sc)
	sc.Close()
	if !json.Valid(raw) || !strings.Contains(string(raw), `"service":"nutcracker"`) {
		t.Errorf("stats port: %s", raw)
	}

	p.stop(t)
	for _, line := range strings.Split(strings.TrimSpace(p.logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
			t.Errorf("not a JSON log record: %q", line)
		}
	}
}

// TestMcproxyUnixSocketAndLimits: --listen unix:PATH MODE, with
// --client-connections and --client-idle-timeout.
func TestMcproxyUnixSocketAndLimits(t *testing.T) {
	bin := buildMcproxy(t)
	sock := filepath.Join(t.TempDir(), "mc.sock")
	p := &proc{logs: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--embedded", "1", "--listen", "unix:"+sock+" 0600", "--admin", "",
		"--client-connections", "1", "--client-idle-timeout", "200ms")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	var c net.Conn
	waitFor(t, "unix socket", p, func() bool {
		var err error
		c, err = net.Dial("unix", sock)
		return err == nil
	})
	defer c.Close()
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v", fi.Mode(), err)
	}
	br := bufio.NewReader(c)
	if got := mcLine(t, c, br, "version\r\n"); !strings.HasPrefix(got, "VERSION ") {
		t.Fatalf("version: %q", got)
	}
	c2, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c2)
	c2.Close()
	if string(got) != "SERVER_ERROR too many client connections\r\n" {
		t.Errorf("second client: %q", got)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("idle client: %v, want EOF", err)
	}
	p.stop(t)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after exit: %v", err)
	}
}

// TestMcproxyStartFailuresAreClear: a data or admin port that cannot be
// bound, or a config file with an error, stops mcproxy at start-up with an
// error that says so (never worded as a rejected reload), naming the port
// or the file and line.
func TestMcproxyStartFailuresAreClear(t *testing.T) {
	bin := buildMcproxy(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().String()
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte("alpha:\n  listen: 127.0.0.1:0\n  timeout: abc\n  servers:\n   - 127.0.0.1:11211:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"data port taken", []string{"--embedded", "1", "--listen", taken, "--admin", ""}, []string{"cannot start", taken, "address already in use"}},
		{"admin port taken", []string{"--embedded", "1", "--listen", "127.0.0.1:0", "--admin", taken}, []string{"--admin", taken, "address already in use"}},
		{"bad config file", []string{"--config", bad, "--admin", ""}, []string{bad + ": ", "timeout (line 3)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			timer := time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() })
			out, err := cmd.CombinedOutput()
			timer.Stop()
			if err == nil {
				t.Fatalf("mcproxy %v exited 0:\n%s", tc.args, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "reload") || strings.Contains(string(out), "keeping the running one") {
				t.Errorf("a start-up failure worded as a reload:\n%s", out)
			}
		})
	}
}

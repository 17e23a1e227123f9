package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// buildMcproxy returns cmd/mcproxy built once per test run (fixture.Binary;
// TestMain removes it).
func buildMcproxy(t *testing.T) string {
	t.Helper()
	return fixture.Binary(t, "mcproxy")
}

func TestMain(m *testing.M) { os.Exit(fixture.Main(m)) }

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type proc struct {
	cmd  *exec.Cmd
	addr string
	logs *syncBuffer
	done chan error
}

// startMcproxy runs the binary with args and waits until it answers on
// addr; an empty addr means a free port passed as --listen.
func startMcproxy(t *testing.T, bin, addr string, args ...string) *proc {
	t.Helper()
	if addr == "" {
		addr = fixture.FreeAddr(t)
		args = append([]string{"--listen", addr}, args...)
	}
	p := &proc{addr: addr, logs: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	deadline := time.Now().Add(10 * time.Second)
	for procs.Ping(addr, 200*time.Millisecond) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("mcproxy did not answer: %s", p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// stop sends SIGTERM and expects a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("mcproxy exit after SIGTERM: %v\n%s", err, p.logs)
		}
	case <-time.After(10 * time.Second):
		// SIGQUIT makes the Go runtime print every goroutine: where it hangs.
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup
		case <-time.After(5 * time.Second):
		}
		logs := p.logs.String()
		if dump := os.Getenv("POPLIMIT_STOP_DUMP"); dump != "" {
			_ = os.WriteFile(dump, []byte(logs), 0o644)
		}
		t.Errorf("mcproxy did not exit after SIGTERM; its goroutines:\n%s", logs[max(0, len(logs)-20000):])
	}
}

// TestMcproxyProcess: the daemon as other engineers launch it: flags, three
// real memcached shards, memccapable's 27 ASCII tests, SIGTERM.
func TestMcproxyProcess(t *testing.T) {
	bin := buildMcproxy(t)
	ms := fixture.Memcached(t, 3)
	var args []string
	for _, m := range ms {
		args = append(args, "--shard", m.Addr)
	}
	p := startMcproxy(t, bin, "", append(args, "--hash-tag", "{}", "--timeout", "400ms", "--server-connections", "2",
		"--auto-eject", "--failure-limit", "2", "--retry-timeout", "1s")...)

	mc := memcache.New(p.addr)
	defer mc.Close()
	if err := mc.Set(&memcache.Item{Key: "rl:{u}:1", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if n, err := mc.Increment("rl:{u}:1", 41); err != nil || n != 42 {
		t.Fatalf("Increment = %d, %v", n, err)
	}

	if mcc, err := exec.LookPath("memccapable"); err == nil {
		host, port, _ := net.SplitHostPort(p.addr)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, mcc, "-a", "-h", host, "-p", port).CombinedOutput()
		if err != nil {
			t.Fatalf("memccapable: %v\n%s", err, out)
		}
		pass := len(regexp.MustCompile(`(?m)^ascii .*\[pass\]`).FindAll(out, -1))
		if pass != 27 {
			t.Errorf("memccapable against the mcproxy process: %d/27 passed\n%s", pass, out)
		}
	} else if fixture.Required() {
		t.Fatal("memccapable not installed")
	}
	p.stop(t)
}

func TestMcproxyEmbedded(t *testing.T) {
	bin := buildMcproxy(t)
	p := startMcproxy(t, bin, "", "--embedded", "3", "--procs", "1")
	mc := memcache.New(p.addr)
	defer mc.Close()
	var keys []string
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("e%d", i)
		keys = append(keys, k)
		if err := mc.Set(&memcache.Item{Key: k, Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := mc.GetMulti(keys)
	if err != nil || len(got) != len(keys) {
		t.Fatalf("GetMulti: %d items, %v", len(got), err)
	}
	p.stop(t)
}

func TestMcproxyConfigFile(t *testing.T) {
	bin := buildMcproxy(t)
	ms := fixture.Memcached(t, 2)
	listen := fixture.FreeAddr(t)
	yml := fmt.Sprintf("pool:\n  listen: %s\n  hash: fnv1a_64\n  distribution: ketama\n  hash_tag: \"{}\"\n  timeout: 400\n  tcpkeepalive: true\n  servers:\n   - %s:1 one\n   - %s:1 two\n", listen, ms[0].Addr, ms[1].Addr)
	cfg := filepath.Join(t.TempDir(), "nutcracker.yml")
	if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startMcproxy(t, bin, listen, "--config", cfg)
	mc := memcache.New(listen)
	defer mc.Close()
	if err := mc.Set(&memcache.Item{Key: "k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.logs.String(), "key=tcpkeepalive") {
		t.Errorf("no warning for the unsupported key tcpkeepalive: %s", p.logs)
	}
	p.stop(t)
}

// TestMcproxyEmbeddedItemSize: --max-item-size reaches the embedded shards
// too, not only the proxy's request parser.
func TestMcproxyEmbeddedItemSize(t *testing.T) {
	bin := buildMcproxy(t)
	tests := []struct {
		maxItem, value int
		stored         bool
	}{
		{2 << 20, 1<<20 + 1<<19, true}, // above the embedded default of 1 MiB
		{4096, 2000, true},
		{4096, 100_000, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.maxItem, "/", tt.value), func(t *testing.T) {
			p := startMcproxy(t, bin, "", "--embedded", "2", "--max-item-size", fmt.Sprint(tt.maxItem))
			c, err := net.Dial("tcp", p.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			req := fmt.Sprintf("set big 0 0 %d\r\n%s\r\n", tt.value, strings.Repeat("v", tt.value))
			line := mcLine(t, c, br, req)
			if (line == "STORED\r\n") != tt.stored {
				t.Fatalf("set of %d bytes with --max-item-size %d: %q, want stored=%v", tt.value, tt.maxItem, line, tt.stored)
			}
			p.stop(t)
		})
	}
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ErrNoNutcracker is returned when Debian's nutcracker (Twemproxy) is not
// installed.
var ErrNoNutcracker = errors.New("bench: nutcracker not installed (apt-get install -y nutcracker)")

// TwemproxyPool is one pool of a nutcracker.yml. The zero value of each
// field leaves Twemproxy's default (the field is not written), except
// Listen, which StartNutcracker fills with a free loopback port.
type TwemproxyPool struct {
	// Name is the pool's YAML key; default "pool".
	Name string
	// Listen is "host:port" (or a socket path).
	Listen string
	// Hash is the "hash:" name, such as fnv1a_64 or md5.
	Hash string
	// HashTag is the two-byte "hash_tag:", such as "{}".
	HashTag string
	// Distribution is ketama, modula or random; default ketama here.
	Distribution string
	// TimeoutMS is "timeout:" in milliseconds.
	TimeoutMS int
	// ServerConnections is "server_connections:".
	ServerConnections int
	// AutoEjectHosts is written as "auto_eject_hosts:" (always, so false
	// is explicit).
	AutoEjectHosts bool
	// ServerRetryTimeoutMS is "server_retry_timeout:" in milliseconds.
	ServerRetryTimeoutMS int
	// ServerFailureLimit is "server_failure_limit:".
	ServerFailureLimit int
	// Servers are "host:port:weight [name]" entries, in order.
	Servers []string
}

// YAML renders the pool as a nutcracker.yml document.
func (p TwemproxyPool) YAML() string {
	var b strings.Builder
	name := p.Name
	if name == "" {
		name = "pool"
	}
	dist := p.Distribution
	if dist == "" {
		dist = "ketama"
	}
	fmt.Fprintf(&b, "%s:\n", name)
	fmt.Fprintf(&b, "  listen: %s\n", p.Listen)
	if p.Hash != "" {
		fmt.Fprintf(&b, "  hash: %s\n", p.Hash)
	}
	if p.HashTag != "" {
		fmt.Fprintf(&b, "  hash_tag: %q\n", p.HashTag)
	}
	fmt.Fprintf(&b, "  distribution: %s\n", dist)
	if p.TimeoutMS > 0 {
		fmt.Fprintf(&b, "  timeout: %d\n", p.TimeoutMS)
	}
	if p.ServerConnections > 0 {
		fmt.Fprintf(&b, "  server_connections: %d\n", p.ServerConnections)
	}
	fmt.Fprintf(&b, "  auto_eject_hosts: %t\n", p.AutoEjectHosts)
	if p.ServerRetryTimeoutMS > 0 {
		fmt.Fprintf(&b, "  server_retry_timeout: %d\n", p.ServerRetryTimeoutMS)
	}
	if p.ServerFailureLimit > 0 {
		fmt.Fprintf(&b, "  server_failure_limit: %d\n", p.ServerFailureLimit)
	}
	b.WriteString("  servers:\n")
	for _, s := range p.Servers {
		fmt.Fprintf(&b, "   - %s\n", s)
	}
	return b.String()
}

// Nutcracker is a running Debian nutcracker (Twemproxy 0.5.0) process.
// Stop must be called to end it; it is safe to call more than once.
type Nutcracker struct {
	// Addr is the pool's listen address.
	Addr string
	// StatsAddr is the stats port address (loopback).
	StatsAddr string
	// ConfigPath is the nutcracker.yml written for it.
	ConfigPath string
	// LogPath is its log file.
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// NutcrackerInstalled reports whether nutcracker is on PATH.
func NutcrackerInstalled() bool {
	_, err := exec.LookPath("nutcracker")
	return err == nil
}

// StartNutcracker writes pool as dir/nutcracker.yml (a free loopback listen
// port when pool.Listen is empty) and starts nutcracker on it, with its
// stats server on another free loopback port and its log in dir. It returns
// once the pool answers "version" (so the servers must be up).
func StartNutcracker(ctx context.Context, dir string, pool TwemproxyPool) (*Nutcracker, error) {
	if !NutcrackerInstalled() {
		return nil, ErrNoNutcracker
	}
	if pool.Listen == "" {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		pool.Listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	statsPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	n := &Nutcracker{
		Addr:       pool.Listen,
		StatsAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(statsPort)),
		ConfigPath: filepath.Join(dir, "nutcracker.yml"),
		LogPath:    filepath.Join(dir, "nutcracker.log"),
	}
	if err := os.WriteFile(n.ConfigPath, []byte(pool.YAML()), 0o644); err != nil {
		return nil, fmt.Errorf("bench: nutcracker config: %w", err)
	}
	n.cmd = exec.Command("nutcracker", "-c", n.ConfigPath, "-s", strconv.Itoa(statsPort),
		"-a", "127.0.0.1", "-o", n.LogPath, "-v", "4")
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start nutcracker: %w", err)
	}
	n.done = make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	if err := waitServing(ctx, n.Addr, n.done, 5*time.Second); err != nil {
		n.Stop()
		logTail, _ := os.ReadFile(n.LogPath)
		return nil, fmt.Errorf("bench: nutcracker: %w; log: %s", err, lastLines(string(logTail), 5))
	}
	return n, nil
}

// waitServing polls addr with "version" until it answers, the process
// exits (done closes), ctx ends, or limit passes.
func waitServing(ctx context.Context, addr string, done <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-done:
			return errors.New("exited at start")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		err := Ping(addr, 200*time.Millisecond)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %v: %w", addr, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Pid returns the process id, for CPU accounting.
func (n *Nutcracker) Pid() int { return n.cmd.Process.Pid }

// Stop kills the process and waits for it to exit.
func (n *Nutcracker) Stop() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.done
}

// NutcrackerForTest starts nutcracker for pool in a temporary directory and
// stops it when the test ends. Without nutcracker the test is skipped, or
// fails when RequireMemcachedEnv is set (make test installs both).
func NutcrackerForTest(t testing.TB, pool TwemproxyPool) *Nutcracker {
	t.Helper()
	if !NutcrackerInstalled() {
		if os.Getenv(RequireMemcachedEnv) != "" {
			t.Fatalf("%v (%s is set)", ErrNoNutcracker, RequireMemcachedEnv)
		}
		t.Skip(ErrNoNutcracker)
	}
	n, err := StartNutcracker(context.Background(), t.TempDir(), pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ErrNoMemcached is returned when the memcached binary is not installed.
var ErrNoMemcached = errors.New("bench: memcached not installed (apt-get install -y memcached)")

// RequireMemcachedEnv names the environment variable that turns a missing
// memcached from a skipped test into a failed one (make test sets it).
const RequireMemcachedEnv = "POPLIMIT_REQUIRE_MEMCACHED"

// MemcachedConfig configures one memcached process. Zero means default.
type MemcachedConfig struct {
	// Binary is the memcached executable; default "memcached" on PATH.
	Binary string
	// MemoryMB is memcached's -m; default 64.
	MemoryMB int
	// Threads is memcached's -t; default 2.
	Threads int
	// Args are extra command-line arguments.
	Args []string
}

func (c MemcachedConfig) binary() string {
	if c.Binary != "" {
		return c.Binary
	}
	return "memcached"
}

func (c MemcachedConfig) memoryMB() int {
	if c.MemoryMB > 0 {
		return c.MemoryMB
	}
	return 64
}

func (c MemcachedConfig) threads() int {
	if c.Threads > 0 {
		return c.Threads
	}
	return 2
}

// Memcached is a memcached process listening on a free loopback TCP port.
// Stop must be called to end it; it is safe to call more than once.
type Memcached struct {
	// Addr is host:port of the process.
	Addr string
	cfg  MemcachedConfig
	cmd  *exec.Cmd
	done chan struct{}
}

// MemcachedInstalled reports whether the memcached binary is on PATH.
func MemcachedInstalled() bool {
	_, err := exec.LookPath("memcached")
	return err == nil
}

// StartMemcached starts memcached on a free loopback port and waits until it
// answers "version". Ports are picked by the kernel; a start that loses the
// port to another process is retried.
func StartMemcached(ctx context.Context, cfg MemcachedConfig) (*Memcached, error) {
	if _, err := exec.LookPath(cfg.binary()); err != nil {
		return nil, ErrNoMemcached
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		m := &Memcached{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cfg: cfg}
		if err := m.start(ctx, port); err != nil {
			lastErr = err
			continue
		}
		return m, nil
	}
	return nil, fmt.Errorf("bench: start memcached: %w", lastErr)
}

func (m *Memcached) start(ctx context.Context, port int) error {
	args := []string{"-p", strconv.Itoa(port), "-U", "0", "-l", "127.0.0.1",
		"-m", strconv.Itoa(m.cfg.memoryMB()), "-t", strconv.Itoa(m.cfg.threads())}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	args = append(args, m.cfg.Args...)
	m.cmd = exec.Command(m.cfg.binary(), args...)
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		return err
	}
	m.done = make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(m.done) }()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-m.done:
			return fmt.Errorf("memcached on port %d exited at start", port)
		case <-ctx.Done():
			m.Stop()
			return ctx.Err()
		default:
		}
		if err := Ping(m.Addr, 200*time.Millisecond); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.Stop()
	return fmt.Errorf("memcached on port %d did not answer within 5s", port)
}

// Stop kills the process and waits for it to exit.
func (m *Memcached) Stop() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGCONT) // a paused process must be able to die
	_ = m.cmd.Process.Kill()
	<-m.done
}

// Pause stops the process with SIGSTOP: it keeps its port but answers nothing
// (a hung shard). It returns once the kernel reports the process stopped, so
// a request sent after Pause is never answered before Resume.
func (m *Memcached) Pause() error {
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return waitProcState(m.cmd.Process.Pid, 'T', 2*time.Second)
}

// waitProcState polls /proc/PID/stat until the process is in state.
func waitProcState(pid int, state byte, timeout time.Duration) error {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// The state follows the parenthesised command name: "pid (comm) S ...".
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == state {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: process %d not in state %c after %v", pid, state, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// Resume continues a paused process.
func (m *Memcached) Resume() error { return m.cmd.Process.Signal(syscall.SIGCONT) }

// Restart stops the process and starts a new one on the same port.
func (m *Memcached) Restart(ctx context.Context) error {
	m.Stop()
	_, portStr, _ := net.SplitHostPort(m.Addr)
	port, _ := strconv.Atoi(portStr)
	return m.start(ctx, port)
}

// Pid returns the process id, for CPU accounting.
func (m *Memcached) Pid() int { return m.cmd.Process.Pid }

// FreePort asks the kernel for a free loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Ping sends "version" to a memcached-protocol address and expects
// "VERSION ..." back within timeout.
func Ping(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("version\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "VERSION ") {
		return fmt.Errorf("bench: unexpected reply to version: %q", line)
	}
	return nil
}

// DialForTest connects to a memcached-protocol address with a 30 s deadline
// for the whole conversation and closes the connection when the test ends.
func DialForTest(t testing.TB, addr string) *bufio.ReadWriter {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
}

// MultiGet sends keys to the memcached-protocol server at the other end of
// rw as "get" commands of at most batch keys each (batch <= 0 means all in
// one) and calls found for every VALUE block in the replies, with the key and
// its data (without the trailing CRLF; the slice is only valid during the
// call). Keys the server does not hold are simply absent. It returns an
// error on an I/O failure or on a reply line that is neither a 4-field VALUE
// header nor END.
func MultiGet(rw *bufio.ReadWriter, keys []string, batch int, found func(key string, data []byte)) error {
	if batch <= 0 {
		batch = max(len(keys), 1)
	}
	var data []byte
	for lo := 0; lo < len(keys); lo += batch {
		hi := min(lo+batch, len(keys))
		rw.WriteString("get " + strings.Join(keys[lo:hi], " ") + "\r\n")
		if err := rw.Flush(); err != nil {
			return err
		}
		for {
			line, err := rw.ReadString('\n')
			if err != nil {
				return err
			}
			if line == "END\r\n" {
				break
			}
			f := strings.Fields(line)
			if len(f) != 4 || f[0] != "VALUE" {
				return fmt.Errorf("bench: unexpected reply to get: %q", line)
			}
			n, err := strconv.Atoi(f[3])
			if err != nil || n < 0 {
				return fmt.Errorf("bench: bad length in %q", line)
			}
			data = slices.Grow(data[:0], n+2)[:n+2]
			if _, err := io.ReadFull(rw, data); err != nil {
				return err
			}
			if string(data[n:]) != "\r\n" {
				return fmt.Errorf("bench: value of %q not followed by CRLF", f[1])
			}
			found(f[1], data[:n])
		}
	}
	return nil
}

// FreeAddrForTest is FreePort as a "127.0.0.1:<port>" address, failing the
// test when no port can be had.
func FreeAddrForTest(t testing.TB) string {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// MemcachedForTest starts n memcached processes for a test and stops them
// when it ends. Without memcached installed the test is skipped, or fails
// when RequireMemcachedEnv is set (as make test does).
func MemcachedForTest(t testing.TB, n int) []*Memcached {
	t.Helper()
	if !MemcachedInstalled() {
		if os.Getenv(RequireMemcachedEnv) != "" {
			t.Fatalf("%v (%s is set)", ErrNoMemcached, RequireMemcachedEnv)
		}
		t.Skip(ErrNoMemcached)
	}
	out := make([]*Memcached, 0, n)
	for i := 0; i < n; i++ {
		m, err := StartMemcached(context.Background(), MemcachedConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Stop)
		out = append(out, m)
	}
	return out
}

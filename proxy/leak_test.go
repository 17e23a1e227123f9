package proxy

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/shard"
)

// leakRows are the client closes the proxy must notice whatever was in
// flight: each row's bytes are sent, then the client closes.
var leakRows = []struct{ name, send string }{
	{"nothing", ""},
	{"partial line", "get leak:k"},
	{"partial data block", "set leak:k 0 0 200000\r\nabc"},
	{"noreply", "set leak:k 0 0 1 noreply\r\nx\r\n"},
	{"mg quiet", "mg leak:none v q\r\n"},
	{"ms quiet", "ms leak:q 1 q\r\nx\r\n"},
	{"mn", "mn\r\n"},
	{"get", "get leak:k\r\n"},
}

// serveOn serves a Router over memcached addrs on ln (quiet logs) and
// stops it when the test ends.
func serveOn(t *testing.T, ln net.Listener, cfg ServerConfig, addrs ...string) *Server {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	servers := make([]shard.Server, len(addrs))
	for i, a := range addrs {
		servers[i] = shard.Server{Addr: a}
	}
	r, err := NewRouter(RouterConfig{Servers: servers, HashTag: shard.DefaultHashTag(), Logger: quiet,
		Pool: PoolConfig{Timeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Router, cfg.Logger = r, quiet
	return serveListenerForTest(t, ln, cfg)
}

// closeWait counts this process's TCP sockets on local port port in
// CLOSE-WAIT (/proc/net/tcp state 08).
func closeWait(t *testing.T, port int) int {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skip("no /proc/net/tcp:", err)
	}
	want := fmt.Sprintf(":%04X", port)
	n := 0
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "08" {
			n++
		}
	}
	return n
}

// tcpAndUnix listens on a free loopback TCP port and on a Unix socket in
// the test's directory.
func tcpAndUnix(t *testing.T) []net.Listener {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unix, err := net.Listen("unix", filepath.Join(t.TempDir(), "mc.sock"))
	if err != nil {
		t.Fatal(err)
	}
	return []net.Listener{tcp, unix}
}

// TestClientCloseNoticed: for every row of leakRows, on TCP and on a Unix
// socket, 200 clients send the row's bytes and close; within 1 s the
// proxy holds no connection (none in CLOSE-WAIT), no goroutine of them,
// and not the declared value sizes in heap.
func TestClientCloseNoticed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	noLeaksInternal(t)
	ms := fixture.Memcached(t, 1)
	lns := tcpAndUnix(t)
	srvs := []*Server{serveOn(t, lns[0], ServerConfig{}, ms[0].Addr), serveOn(t, lns[1], ServerConfig{}, ms[0].Addr)}
	// Warm up the shard connection and the idle sweeper goroutine.
	for _, ln := range lns {
		c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "set leak:k 0 0 1\r\nv\r\n")
		if l, err := bufio.NewReader(c).ReadString('\n'); err != nil || l != "STORED\r\n" {
			t.Fatalf("warm-up: %q %v", l, err)
		}
		c.Close()
	}
	port := lns[0].Addr().(*net.TCPAddr).Port
	const conns = 200
	for i, ln := range lns {
		srv := srvs[i]
		for _, row := range leakRows {
			t.Run(ln.Addr().Network()+"/"+row.name, func(t *testing.T) {
				waitConns(t, srv, 0, 2*time.Second)
				base := runtime.NumGoroutine()
				cs := make([]net.Conn, 0, conns)
				for range conns {
					c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					cs = append(cs, c)
					if row.send != "" {
						if _, err := io.WriteString(c, row.send); err != nil {
							t.Fatal(err)
						}
					}
				}
				waitConns(t, srv, conns, 2*time.Second) // all accepted
				for _, c := range cs {
					_ = c.Close()
				}
				start := time.Now()
				leftConns := waitConns(t, srv, 0, time.Second)
				took := time.Since(start)
				cw := 0
				if ln == lns[0] {
					cw = closeWait(t, port)
				}
				if leftConns != 0 || cw != 0 {
					t.Fatalf("%d s after %d closes: %d connections open, %d in CLOSE-WAIT", 1, conns, leftConns, cw)
				}
				var g int
				for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
					if g = runtime.NumGoroutine(); g <= base || time.Now().After(deadline) {
						break
					}
				}
				if g > base+2 {
					t.Errorf("%d goroutines after the closes, %d before", g, base)
				}
				t.Logf("all %d connections closed in %v", conns, took.Round(time.Millisecond))
			})
		}
	}
	// The declared sizes of the partial data blocks are not held: heap
	// well below 200 × 200 KB = 40 MB.
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > 32<<20 {
		t.Errorf("heap %d MB after the closes", m.HeapAlloc>>20)
	}
}

// waitConns waits up to d for srv's client count to reach want and
// returns the last count seen.
func waitConns(t *testing.T, srv *Server, want int64, d time.Duration) int64 {
	t.Helper()
	return waitCount(srv.st.currConns.Load, want, d)
}

// waitCount waits up to d for count to return want and returns the last
// value seen.
func waitCount(count func() int64, want int64, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for {
		n := count()
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// noLeaksInternal is noLeaks for this package's internal tests.
func noLeaksInternal(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
	"github.com/poplimit/poplimit/bench/fixture/procs"
)

// parkTimeout is the parking tests' request timeout: a short one makes
// the sweeper run every 50 ms.
const parkTimeout = 200 * time.Millisecond

// parkAfter is the parking tests' ParkAfter: short, so that they wait
// little for connections to park.
const parkAfter = 50 * time.Millisecond

// requirePark skips the test where connections do not park, and checks
// that it leaves no goroutine behind.
func requirePark(t *testing.T) {
	t.Helper()
	if !parkSupported {
		t.Skip("connections park on Linux only")
	}
	noLeaksInternal(t)
}

// eachNetwork runs fn as a subtest per network (TCP, Unix), each against
// its own server (request timeout parkTimeout) over its own memcached.
func eachNetwork(t *testing.T, fn func(t *testing.T, srv *Server, ln net.Listener)) {
	t.Helper()
	for _, ln := range tcpAndUnix(t) {
		t.Run(ln.Addr().Network(), func(t *testing.T) {
			fn(t, serveOn(t, ln, ServerConfig{RequestTimeout: parkTimeout, ParkAfter: parkAfter}, fixture.Memcached(t, 1)[0].Addr), ln)
		})
	}
}

// waitParked waits up to d for srv's parked connection count to reach
// want and returns the last count seen.
func waitParked(srv *Server, want int64, d time.Duration) int64 {
	return waitCount(srv.st.parked.Load, want, d)
}

// TestIdleConnectionsPark: on TCP and Unix sockets, idle clients (after
// one request) are parked with no goroutine of their own; a parked client
// that sends is answered, one that closes is noticed within 1 s (no
// CLOSE-WAIT), one that idles past the idle timeout is closed, and
// Shutdown closes the parked ones with no goroutine left behind.
func TestIdleConnectionsPark(t *testing.T) {
	requirePark(t)
	eachNetwork(t, func(t *testing.T, srv *Server, ln net.Listener) {
		const n = 60
		conns := make([]net.Conn, n)
		brs := make([]*bufio.Reader, n)
		ask := func(i int, req, want string) {
			t.Helper()
			_ = conns[i].SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprint(conns[i], req)
			if l, err := brs[i].ReadString('\n'); err != nil || l != want {
				t.Fatalf("conn %d: %q: got %q %v, want %q", i, req, l, err, want)
			}
		}
		base := runtime.NumGoroutine()
		for i := range conns {
			c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			conns[i], brs[i] = c, bufio.NewReader(c)
			ask(i, "get park:none\r\n", "END\r\n")
		}
		if got := waitParked(srv, n, 3*time.Second); got != n {
			t.Fatalf("%d of %d idle connections parked", got, n)
		}
		time.Sleep(50 * time.Millisecond) // readers return after parking
		// A few more than before they connected (the parker, the idle
		// sweeper, the shard session), none per connection.
		if g := runtime.NumGoroutine(); g > base+5 {
			t.Errorf("goroutines: %d with %d connections parked, %d before they connected", g, n, base)
		}
		// A third send (resumed and answered), a third close.
		for i := 0; i < n/3; i++ {
			ask(i, fmt.Sprintf("set park:%d 0 0 1\r\nv\r\n", i), "STORED\r\n")
			ask(i, fmt.Sprintf("incr park:%d 1\r\n", i), "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
		}
		for i := n / 3; i < 2*n/3; i++ {
			_ = conns[i].Close()
		}
		if got := waitConns(t, srv, n-n/3, time.Second); got != n-n/3 {
			t.Errorf("%d connections open 1 s after %d of %d parked ones closed", got, n/3, n)
		}
		if ln.Addr().Network() == "tcp" {
			if cw := closeWait(t, ln.Addr().(*net.TCPAddr).Port); cw != 0 {
				t.Errorf("%d connections in CLOSE-WAIT", cw)
			}
		}
		// They park again and still answer; the idle timeout closes
		// parked ones.
		if got := waitParked(srv, n-n/3, 3*time.Second); got != n-n/3 {
			t.Fatalf("%d of %d connections parked again", got, n-n/3)
		}
		ask(0, "get park:none\r\n", "END\r\n")
		srv.SetClientLimits(0, 300*time.Millisecond)
		if got := waitConns(t, srv, 0, 3*time.Second); got != 0 {
			t.Errorf("%d connections open after the idle timeout", got)
		}
		_ = conns[n-1].SetDeadline(time.Now().Add(time.Second))
		if _, err := brs[n-1].ReadByte(); err == nil {
			t.Error("a parked connection past the idle timeout was not closed")
		}
	})
}

// TestParkedShutdown: Shutdown closes parked connections and stops the
// parker (goleak).
func TestParkedShutdown(t *testing.T) {
	requirePark(t)
	ms := fixture.Memcached(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveOn(t, ln, ServerConfig{RequestTimeout: parkTimeout, ParkAfter: parkAfter}, ms[0].Addr)
	var conns []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "version\r\n")
		if l, err := bufio.NewReader(c).ReadString('\n'); err != nil || l != "VERSION "+DefaultVersion+"\r\n" {
			t.Fatalf("version: %q %v", l, err)
		}
		conns = append(conns, c)
	}
	if got := waitParked(srv, 20, 3*time.Second); got != 20 {
		t.Fatalf("%d of 20 parked", got)
	}
	t.Cleanup(func() { // after the server's cleanup (Shutdown) ran
		for _, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Error("a parked connection is open after Shutdown")
			}
		}
	})
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	n, err := procs.CountFDs(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	return int(n)
}

// parkedConns dials n connections to ln, each asks one version, and
// waits until srv has them parked too.
func parkedConns(t *testing.T, srv *Server, ln net.Listener, n int) ([]net.Conn, []*bufio.Reader) {
	t.Helper()
	want := srv.st.parked.Load() + int64(n)
	conns := make([]net.Conn, n)
	brs := make([]*bufio.Reader, n)
	for i := range conns {
		c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns[i], brs[i] = c, bufio.NewReader(c)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "version\r\n")
		if l, err := brs[i].ReadString('\n'); err != nil || l != "VERSION "+DefaultVersion+"\r\n" {
			t.Fatalf("conn %d: version: %q %v", i, l, err)
		}
	}
	if got := waitParked(srv, want, 3*time.Second); got != want {
		t.Fatalf("%d connections parked, want %d", got, want)
	}
	return conns, brs
}

// TestParkedDescriptors: a parked connection holds one descriptor (its
// socket, outside the runtime's poller) and no goroutine; every way a
// parked connection ends (the client closes, the idle timeout) closes
// it, so the process's descriptors come back to where they were.
func TestParkedDescriptors(t *testing.T) {
	requirePark(t)
	eachNetwork(t, func(t *testing.T, srv *Server, ln net.Listener) {
		warm, _ := parkedConns(t, srv, ln, 1) // starts the sweeper and the parker
		base, goroutines := openFDs(t), runtime.NumGoroutine()
		const n = 40
		conns, _ := parkedConns(t, srv, ln, n)
		time.Sleep(50 * time.Millisecond) // readers return after parking
		// Each connection: the client's socket and the parked one.
		if got := openFDs(t) - base; got != 2*n {
			t.Errorf("%d descriptors more with %d connections parked, want %d (client and server side)", got, n, 2*n)
		}
		if g := runtime.NumGoroutine(); g > goroutines+2 {
			t.Errorf("goroutines: %d with %d connections parked, %d before", g, n, goroutines)
		}
		for _, c := range conns[:n/2] {
			_ = c.Close()
		}
		if got := waitConns(t, srv, int64(1+n-n/2), time.Second); got != int64(1+n-n/2) {
			t.Errorf("%d connections open 1 s after %d parked clients closed, want %d", got, n/2, 1+n-n/2)
		}
		srv.SetClientLimits(0, 300*time.Millisecond)
		if got := waitConns(t, srv, 0, 3*time.Second); got != 0 {
			t.Fatalf("%d connections open after the idle timeout", got)
		}
		for _, c := range append(conns[n/2:], warm...) {
			_ = c.Close()
		}
		// base counted the first connection's two sockets.
		if got := waitCount(func() int64 { return int64(openFDs(t) - base) }, -2, time.Second); got != -2 {
			t.Errorf("%d descriptors more than with one connection parked, after all closed, want -2", got)
		}
	})
}

// TestParkedClientLimit: parked connections count against
// client_connections, and a parked one that closes makes room.
func TestParkedClientLimit(t *testing.T) {
	requirePark(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveOn(t, ln, ServerConfig{MaxClients: 4, RequestTimeout: parkTimeout, ParkAfter: parkAfter}, fixture.Memcached(t, 1)[0].Addr)
	conns, _ := parkedConns(t, srv, ln, 4)
	extra := func() string {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprint(c, "version\r\n")
		l, _ := bufio.NewReader(c).ReadString('\n')
		return l
	}
	if l := extra(); l != string(tooManyClients) {
		t.Errorf("a fifth client with four parked: %q, want %q", l, tooManyClients)
	}
	_ = conns[0].Close()
	if got := waitConns(t, srv, 3, time.Second); got != 3 {
		t.Fatalf("%d connections 1 s after a parked one closed, want 3", got)
	}
	if l := extra(); l != "VERSION "+DefaultVersion+"\r\n" {
		t.Errorf("a client after a parked one closed: %q", l)
	}
}

// TestParkedHalfClose: a parked client that sends a request and shuts
// its writing side is answered, then closed (no CLOSE-WAIT); on TCP and
// Unix sockets.
func TestParkedHalfClose(t *testing.T) {
	requirePark(t)
	eachNetwork(t, func(t *testing.T, srv *Server, ln net.Listener) {
		conns, brs := parkedConns(t, srv, ln, 3)
		for i, c := range conns {
			fmt.Fprint(c, "get half:none\r\nversion\r\n")
			if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"END\r\n", "VERSION " + DefaultVersion + "\r\n"} {
				if l, err := brs[i].ReadString('\n'); err != nil || l != want {
					t.Fatalf("conn %d: got %q %v, want %q", i, l, err, want)
				}
			}
			if _, err := brs[i].ReadByte(); err != io.EOF {
				t.Errorf("conn %d: after the replies: %v, want EOF", i, err)
			}
		}
		if got := waitConns(t, srv, 0, time.Second); got != 0 {
			t.Errorf("%d connections open 1 s after the half-closed clients were answered", got)
		}
		if ln.Addr().Network() == "tcp" {
			if cw := closeWait(t, ln.Addr().(*net.TCPAddr).Port); cw != 0 {
				t.Errorf("%d connections in CLOSE-WAIT", cw)
			}
		}
	})
}

// TestPipelineGrowsQueue: a connection starts with a queue of firstQueue
// slots; a client that pipelines more in one write gets every reply, in
// order, through the grown queue, and parks afterwards.
func TestPipelineGrowsQueue(t *testing.T) {
	noLeaksInternal(t)
	eachNetwork(t, func(t *testing.T, srv *Server, ln net.Listener) {
		c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		const n = 20 * firstQueue
		var req []byte
		for i := range n {
			v := fmt.Sprint(i)
			req = fmt.Appendf(req, "set grow:%d 0 0 %d\r\n%s\r\nget grow:%d\r\n", i, len(v), v, i)
		}
		go func() { _, _ = c.Write(req) }()
		br := bufio.NewReader(c)
		for i := range n {
			v := fmt.Sprint(i)
			for _, want := range []string{"STORED\r\n", fmt.Sprintf("VALUE grow:%d 0 %d\r\n", i, len(v)), v + "\r\n", "END\r\n"} {
				if l, err := br.ReadString('\n'); err != nil || l != want {
					t.Fatalf("request %d: got %q %v, want %q", i, l, err, want)
				}
			}
		}
		if parkSupported {
			if got := waitParked(srv, 1, 3*time.Second); got != 1 {
				t.Errorf("%d connections parked after the pipeline, want 1", got)
			}
		}
	})
}

// TestParkAfter: a client parks once it has been silent for ParkAfter,
// not before (a pause between bursts keeps its connection state), and
// with a negative ParkAfter never.
func TestParkAfter(t *testing.T) {
	requirePark(t)
	ms := fixture.Memcached(t, 1)
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{{"400ms", 400 * time.Millisecond}, {"never", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := serveOn(t, ln, ServerConfig{RequestTimeout: parkTimeout, ParkAfter: tc.after}, ms[0].Addr)
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			if l := askLine(t, c, br, "get parkafter:none\r\n"); l != "END\r\n" {
				t.Fatalf("get: %q", l)
			}
			sent := time.Now()
			// The sweeper runs every 50 ms (a quarter of the request
			// timeout): a client that parked early would be seen.
			time.Sleep(250 * time.Millisecond)
			if got, silent := srv.st.parked.Load(), time.Since(sent); got != 0 && silent < 400*time.Millisecond {
				t.Fatalf("parked after %v of silence, want %v", silent, tc.after)
			}
			if tc.after < 0 {
				time.Sleep(500 * time.Millisecond)
				if got := srv.st.parked.Load(); got != 0 {
					t.Fatalf("%d parked with ParkAfter %v", got, tc.after)
				}
			} else if got := waitParked(srv, 1, 3*time.Second); got != 1 {
				t.Fatalf("%d parked %v after the last request, want 1", got, time.Since(sent))
			}
			if l := askLine(t, c, br, "get parkafter:none\r\n"); l != "END\r\n" {
				t.Fatalf("get after the pause: %q", l)
			}
		})
	}
}

// askLine sends req on c and returns the first line of the reply.
func askLine(t *testing.T, c net.Conn, br *bufio.Reader, req string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprint(c, req); err != nil {
		t.Fatal(err)
	}
	l, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestManyIdleClientsParkAtOnce: once parkEagerAt clients or more are
// idle or parked, every idle one parks within a few sweeps however long
// ParkAfter is (a fleet's pools, a flood: memory first), the wave's last
// ones too; a client that comes back after parking is in use, and parks
// again after ParkAfter only, while the clients that never came back
// stay parked.
func TestManyIdleClientsParkAtOnce(t *testing.T) {
	requirePark(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveOn(t, ln, ServerConfig{ParkAfter: time.Hour}, fixture.Memcached(t, 1)[0].Addr)
	n := parkEagerAt + 44
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	for i := range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns[i], readers[i] = c, bufio.NewReader(c)
		if l := askLine(t, c, readers[i], fmt.Sprintf("get eager:%d\r\n", i)); l != "END\r\n" {
			t.Fatalf("conn %d: %q", i, l)
		}
	}
	if got := waitParked(srv, int64(n), 3*time.Second); got != int64(n) {
		t.Fatalf("%d of %d idle clients parked with ParkAfter 1h", got, n)
	}
	const back = 10
	for i := range back {
		if l := askLine(t, conns[i], readers[i], fmt.Sprintf("get eager:%d\r\n", i)); l != "END\r\n" {
			t.Fatalf("conn %d back: %q", i, l)
		}
	}
	if got := waitParked(srv, int64(n-back), 3*time.Second); got != int64(n-back) {
		t.Fatalf("%d parked after %d of %d came back, want %d", got, back, n, n-back)
	}
	time.Sleep(10 * parkSweep) // ten sweeps, each with parkEagerAt idle or parked
	if got := srv.st.parked.Load(); got != int64(n-back) {
		t.Fatalf("%d parked %v after %d came back, want %d: a client in use parked eagerly again", got, 10*parkSweep, back, n-back)
	}
}

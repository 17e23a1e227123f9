package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestRequestTimeoutClosesSlowClient: a client sending one byte per 200 ms
// (slowloris) is closed once its request is not complete 300 ms after its
// first byte, and counted; a client that sends whole requests and then
// idles is not closed (the request timeout is not an idle timeout).
func TestRequestTimeoutClosesSlowClient(t *testing.T) {
	noLeaksInternal(t)
	ms := fixture.Memcached(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveOn(t, ln, ServerConfig{RequestTimeout: 300 * time.Millisecond}, ms[0].Addr)

	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	ibr := bufio.NewReader(idle)
	if _, err := io.WriteString(idle, "version\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := ibr.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	slow, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	start := time.Now()
	closed := false
	for _, b := range []byte("get slow:key:with:a:long:name\r\n") {
		if _, err := slow.Write([]byte{b}); err != nil {
			closed = true
			break
		}
		time.Sleep(200 * time.Millisecond)
		_ = slow.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := slow.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			closed = true // EOF or reset: the proxy closed it
			break
		}
	}
	took := time.Since(start)
	if !closed {
		t.Fatalf("slow client not closed after %v (request timeout 300ms)", took)
	}
	if took > 2500*time.Millisecond {
		t.Errorf("slow client closed after %v, want about 300ms plus a sweep", took)
	}
	if n := srv.cl.slow.Load(); n != 1 {
		t.Errorf("%d clients counted as slow, want 1", n)
	}
	t.Logf("slow client closed after %v", took.Round(10*time.Millisecond))

	// The idle client, past the timeout with nothing partial, still works.
	if _, err := io.WriteString(idle, "version\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(2 * time.Second))
	if l, err := ibr.ReadString('\n'); err != nil || len(l) < 8 {
		t.Fatalf("idle client after %v: %q %v", time.Since(start), l, err)
	}
}

// isTimeout reports whether err is a deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

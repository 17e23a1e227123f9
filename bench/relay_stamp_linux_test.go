package bench

import (
	"net"
	"testing"
	"time"
)

// TestRelayStampsBytesWhenTheKernelReceivedThem: bytes that waited in the
// socket before the relay read them are due from their arrival, not from
// the read (a relay busy elsewhere adds nothing to its delay).
func TestRelayStampsBytesWhenTheKernelReceivedThem(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	read := stampedReader(s)
	// The kernel starts stamping received packets shortly after the first
	// socket asks for it (a deferred switch): the first tries may read no
	// stamp, and fall back to the read's time.
	buf := make([]byte, 64)
	var late time.Duration
	for try := 0; try < 5 && late < 40*time.Millisecond; try++ {
		if _, err := c.Write([]byte("get k\r\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		n, at, err := read(buf)
		if err != nil || string(buf[:n]) != "get k\r\n" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
		late = time.Since(at)
	}
	if late < 40*time.Millisecond || late > 5*time.Second {
		t.Errorf("stamped %v before the read returned, want the arrival, about 50ms before", late)
	}
	_ = c.Close()
	if n, _, err := read(buf); n != 0 || err == nil {
		t.Errorf("after close: %d bytes, %v; want EOF", n, err)
	}
}

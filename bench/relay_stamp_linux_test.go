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
	sent := time.Now()
	if _, err := c.Write([]byte("get k\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	buf := make([]byte, 64)
	n, at, err := read(buf)
	if err != nil || string(buf[:n]) != "get k\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if late := time.Since(at); late < 90*time.Millisecond || at.Before(sent.Add(-time.Second)) {
		t.Errorf("stamped %v before the read returned (sent %v before it), want the arrival, about 100ms before", late, time.Since(sent))
	}
	_ = c.Close()
	if n, _, err := read(buf); n != 0 || err == nil {
		t.Errorf("after close: %d bytes, %v; want EOF", n, err)
	}
}

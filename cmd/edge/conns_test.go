package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/sockpair"
	"github.com/poplimit/poplimit/proxy/fastconn"
)

// TestClientConnServesTheOneByteWaitFromOneRead: fasthttp's one-byte
// read takes everything that had arrived into the read-ahead, the next
// read returns the rest from it, and the read-ahead is given back once
// taken; a request larger than the read-ahead is read on as usual.
func TestClientConnServesTheOneByteWaitFromOneRead(t *testing.T) {
	peer, s := sockpair.TCP(t)
	c := &clientConn{Conn: fastconn.New(s)}
	req := "GET /a HTTP/1.1\r\nHost: edge.test\r\n\r\n"
	io.WriteString(peer, req)
	time.Sleep(10 * time.Millisecond) // all of it arrived
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	one := make([]byte, 1)
	if n, err := c.Read(one); n != 1 || err != nil || one[0] != 'G' {
		t.Fatalf("one-byte read: %d %q %v", n, one[:n], err)
	}
	if c.ahead == nil || c.end-c.off != len(req)-1 {
		t.Fatal("the one-byte read left the rest of the request in the socket")
	}
	rest := make([]byte, 64<<10)
	n, err := c.Read(rest)
	if err != nil || "G"+string(rest[:n]) != req {
		t.Fatalf("the rest: %q, %v; want %q", rest[:n], err, req[1:])
	}
	if c.ahead != nil {
		t.Fatal("the read-ahead is still held after it was taken")
	}
	big := "GET /b HTTP/1.1\r\nX-Big: " + strings.Repeat("x", 3*readAhead) + "\r\n\r\n"
	go io.WriteString(peer, big)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	if n, err := c.Read(one); n != 1 || err != nil {
		t.Fatalf("one-byte read of the large request: %d %v", n, err)
	}
	got = append(got, one[0])
	for len(got) < len(big) {
		n, err := c.Read(rest)
		if err != nil {
			t.Fatalf("large request after %d bytes: %v", len(got), err)
		}
		got = append(got, rest[:n]...)
	}
	if string(got) != big {
		t.Fatal("the large request arrived changed")
	}
	peer.Close()
	if n, err := c.Read(one); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d %v, want EOF", n, err)
	}
}

// TestUpstreamConnSendsTheRequestWithTheRead: a small request is sent
// when its response is read, a large one at once; both exchanges see
// their responses.
func TestUpstreamConnSendsTheRequestWithTheRead(t *testing.T) {
	c, peer := sockpair.TCP(t)
	u := &upstreamConn{Conn: fastconn.New(c)}
	got := make(chan []byte, 2)
	go func() {
		buf := make([]byte, 64<<10)
		for _, want := range []int{40, 3 * deferWrite} {
			var req []byte
			for len(req) < want {
				n, err := peer.Read(buf)
				if err != nil {
					return
				}
				req = append(req, buf[:n]...)
			}
			got <- req
			peer.Write([]byte("ok"))
		}
	}()
	u.SetDeadline(time.Now().Add(5 * time.Second))
	small := bytes.Repeat([]byte("s"), 40)
	if n, err := u.Write(small); n != len(small) || err != nil {
		t.Fatal(n, err)
	}
	select {
	case <-got:
		t.Fatal("the small request was sent before its response was read")
	case <-time.After(20 * time.Millisecond):
	}
	resp := make([]byte, 16)
	if n, err := u.Read(resp); err != nil || string(resp[:n]) != "ok" {
		t.Fatalf("small exchange: %q %v", resp[:n], err)
	}
	if req := <-got; !bytes.Equal(req, small) {
		t.Fatal("the small request arrived changed")
	}
	large := bytes.Repeat([]byte("l"), 3*deferWrite)
	if n, err := u.Write(large); n != len(large) || err != nil {
		t.Fatal(n, err)
	}
	if req := <-got; !bytes.Equal(req, large) {
		t.Fatal("the large request arrived changed")
	}
	if n, err := u.Read(resp); err != nil || string(resp[:n]) != "ok" {
		t.Fatalf("large exchange: %q %v", resp[:n], err)
	}
}

// TestUpstreamConnCloseSendsWhatWasWritten: bytes written and never
// followed by a read (a TLS close_notify) are sent before the close.
func TestUpstreamConnCloseSendsWhatWasWritten(t *testing.T) {
	c, peer := sockpair.TCP(t)
	u := &upstreamConn{Conn: fastconn.New(c)}
	u.Write([]byte("bye"))
	u.Close()
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(peer)
	if err != nil || string(got) != "bye" {
		t.Fatalf("peer read %q, %v; want bye then EOF", got, err)
	}
}

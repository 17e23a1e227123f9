package bench

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("got %q, %v", line, err)
	}
	return time.Since(start)
}

func TestRelayDelaysBothWays(t *testing.T) {
	r, err := startRelay(fixture.EchoServer(t), 25*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	// A delay is a lower bound, whatever the machine's load.
	if rtt := roundTrip(t, c, br); rtt < 50*time.Millisecond {
		t.Fatalf("round trip %v shorter than 2×25ms", rtt)
	}
	r.SetDelay(0)
	if r.currentDelay() != 0 {
		t.Fatal("SetDelay ignored")
	}
	// With no delay, data still flows (no upper bound asserted: shared CPU).
	roundTrip(t, c, br)
}

func TestRelayCloseEndsConnections(t *testing.T) {
	r, err := startRelay(fixture.EchoServer(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	roundTrip(t, c, br)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("connection alive after Close")
	}
	if _, err := net.DialTimeout("tcp", r.Addr, time.Second); err == nil {
		t.Fatal("listener alive after Close")
	}
}

// TestRelayHalfClose: a client that half-closes after its request still
// gets the replies in flight, whatever the delay.
func TestRelayHalfClose(t *testing.T) {
	target := fixture.EchoServer(t)
	for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			r, err := startRelay(target, delay)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			c, err := net.Dial("tcp", r.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			want := "ping\npong\n"
			if _, err := c.Write([]byte(want)); err != nil {
				t.Fatal(err)
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if err != nil || string(got) != want {
				t.Fatalf("after half-close read %q, %v; want %q", got, err, want)
			}
		})
	}
}

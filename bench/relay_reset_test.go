package bench

import (
	"bufio"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture"
)

// TestRelayResetMode: in reset mode an open connection and a new one both
// end with ECONNRESET (not an orderly EOF); off again, data flows.
func TestRelayResetMode(t *testing.T) {
	r, err := startRelay(fixture.EchoServer(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", r.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return c, bufio.NewReader(c)
	}
	// Read only: a write after the reset arrived would take the error
	// (EPIPE) and leave the read an EOF.
	isReset := func(br *bufio.Reader) error {
		_, err := br.ReadString('\n')
		if !errors.Is(err, syscall.ECONNRESET) {
			return err
		}
		return nil
	}
	c, br := dial()
	roundTrip(t, c, br)
	r.SetReset(true)
	if err := isReset(br); err != nil {
		t.Fatalf("open connection: want ECONNRESET, got %v", err)
	}
	// A new connection: reset at connect (the accept queue) or on read.
	if c2, err := net.Dial("tcp", r.Addr); err == nil {
		_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
		err = isReset(bufio.NewReader(c2))
		c2.Close()
		if err != nil {
			t.Fatalf("new connection: want ECONNRESET, got %v", err)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("new connection: want ECONNRESET, got %v", err)
	}
	r.SetReset(false)
	c3, br3 := dial()
	roundTrip(t, c3, br3)
}

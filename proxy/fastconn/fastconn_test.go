package fastconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/sockpair"
)

// result is the outcome of a Read or Write run by async.
type result struct {
	n   int
	err error
}

// async runs op in a goroutine; its result arrives on the channel.
func async(op func() (int, error)) <-chan result {
	done := make(chan result, 1)
	go func() {
		n, err := op()
		done <- result{n, err}
	}()
	return done
}

func TestConnReadWriteEOF(t *testing.T) {
	c, s := sockpair.TCP(t)
	fc := New(c)
	if !fc.Raw() {
		t.Fatal("a TCP conn should use raw system calls")
	}
	if _, err := fc.Write([]byte("incr k 1\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := io.ReadFull(s, buf[:10])
	if err != nil || string(buf[:n]) != "incr k 1\r\n" {
		t.Fatalf("server read %q, %v", buf[:n], err)
	}
	// Read waits for the reply: a Read that returned before it would
	// return no bytes (or EAGAIN), not "42\r\n".
	done := async(func() (int, error) { return fc.Read(buf) })
	s.Write([]byte("42\r\n"))
	r := <-done
	n, err = r.n, r.err
	s.Close()
	if err != nil || string(buf[:n]) != "42\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if n, err = fc.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after close: %d, %v; want 0, EOF", n, err)
	}
}

// fill writes to fc with TryWrite until the socket takes less than it is
// offered (its buffers are full: the peer reads nothing) and returns what
// was written.
func fill(t *testing.T, fc *Conn) []byte {
	t.Helper()
	var sent []byte
	chunk := make([]byte, 64<<10)
	for i := 0; ; i++ {
		for j := range chunk {
			chunk[j] = byte(i + j)
		}
		n, err := fc.TryWrite(chunk)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, chunk[:n]...)
		if n < len(chunk) {
			return sent
		}
		if len(sent) > 256<<20 {
			t.Fatalf("wrote %d bytes without the socket filling up", len(sent))
		}
	}
}

// Write on a full socket waits: bounded by a write deadline it returns the
// deadline's timeout (not a short count, as TryWrite does); without one it
// returns only once the peer has read enough, with every byte written, and
// the peer receives all of it in order. The socket is full before Write is
// called (TryWrite said so), so a Write that reports all its bytes written
// cannot have returned before the peer read: no sleep decides the outcome.
func TestConnWriteWaitsForRoom(t *testing.T) {
	c, s := sockpair.SmallTCP(t) // fixed buffers: a write after fill finds none
	fc := New(c)
	want := fill(t, fc)

	if err := fc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	more := bytes.Repeat([]byte("waits"), 1<<18) // 1.25 MiB: more than any buffer holds
	n, err := fc.Write(more)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == len(more) {
		t.Fatalf("write on a full socket with a deadline: %d of %d, %v; want a timeout", n, len(more), err)
	}
	want = append(want, more[:n]...)
	if err := fc.SetWriteDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	done := async(func() (int, error) { return fc.Write(big) })
	select {
	case r := <-done:
		t.Fatalf("write returned (%d of %d, %v) before the peer read anything", r.n, len(big), r.err)
	default:
	}
	want = append(want, big...)
	s.SetReadDeadline(time.Now().Add(20 * time.Second)) // bounds the test only
	got := make([]byte, len(want))
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatalf("peer read: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the peer received %d bytes that differ from the %d written", len(got), len(want))
	}
	select {
	case r := <-done:
		if r.err != nil || r.n != len(big) {
			t.Fatalf("write: %d of %d, %v", r.n, len(big), r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("write did not return once the peer had read everything")
	}
}

// TryWrite never waits: on a full socket it reports what was taken and no
// error.
func TestConnTryWriteFull(t *testing.T) {
	c, _ := sockpair.TCP(t)
	fc := New(c)
	chunk := make([]byte, 1<<20)
	total := 0
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := fc.TryWrite(chunk)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if n < len(chunk) {
			return // the socket is full, and TryWrite returned at once
		}
	}
	t.Fatalf("wrote %d bytes without the socket filling up", total)
}

func TestConnDeadlineAndClose(t *testing.T) {
	c, _ := sockpair.TCP(t)
	fc := New(c)
	fc.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	_, err := fc.Read(make([]byte, 8))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v; want a timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("deadline honoured after %v", d)
	}
	fc.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := fc.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	fc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
}

// A conn without a socket is used as is.
func TestConnFallback(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	fc := New(a)
	if fc.Raw() {
		t.Fatal("net.Pipe has no socket")
	}
	go b.Write([]byte("hi"))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(fc, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// ReadEach hands over every byte of messages that arrive one by one with
// pauses (after a short read it waits for the next arrival instead of
// reading to EAGAIN: none may be lost), stops when consume says so, and
// reports EOF.
func TestConnReadEach(t *testing.T) {
	c, s := sockpair.TCP(t)
	fc := New(c)
	go func() {
		for i := range 20 {
			s.Write([]byte{byte('a' + i)})
			if i%3 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	buf := make([]byte, 64)
	var got []byte
	fill := func() []byte { return buf }
	err := fc.ReadEach(fill, func(n int) ReadNext {
		got = append(got, buf[:n]...)
		if len(got) < 10 {
			return ReadShort
		}
		return ReadStop
	})
	if err != nil || len(got) < 10 {
		t.Fatalf("ReadEach stopped with %q, %v", got, err)
	}
	err = fc.ReadEach(fill, func(n int) ReadNext {
		got = append(got, buf[:n]...)
		if len(got) == 20 {
			s.Close()
		}
		return ReadShort
	})
	if err != io.EOF || string(got) != "abcdefghijklmnopqrst" {
		t.Fatalf("got %q, %v; want every byte then EOF", got, err)
	}
}

// Shutdown from inside consume ends ReadEach with EOF (Close there would
// deadlock), and a deadline ends it with a timeout.
func TestConnReadEachShutdownAndDeadline(t *testing.T) {
	c, s := sockpair.TCP(t)
	fc := New(c)
	s.Write([]byte("x"))
	buf := make([]byte, 8)
	err := fc.ReadEach(func() []byte { return buf }, func(int) ReadNext {
		if err := fc.Shutdown(); err != nil {
			t.Error(err)
		}
		return ReadShort
	})
	if err != io.EOF {
		t.Fatalf("after Shutdown: %v; want EOF", err)
	}

	c2, _ := sockpair.TCP(t)
	fc2 := New(c2)
	fc2.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	err = fc2.ReadEach(func() []byte { return buf }, func(int) ReadNext { return ReadShort })
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v; want a timeout", err)
	}
}

// A close that arrives with the last bytes, before ReadEach starts (the
// poller's readiness for both is forgotten by then), is seen: with
// ReadDrain a short read is followed by another read, which returns EOF.
// The read deadline only bounds the test (before the fix: a wait forever).
func TestConnReadEachSeesCloseWithData(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			c, s := sockpair.Of(t, network)
			fc := New(c)
			if _, err := s.Write([]byte("get k")); err != nil {
				t.Fatal(err)
			}
			s.Close()
			time.Sleep(10 * time.Millisecond) // data and FIN both queued
			fc.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 64)
			var got []byte
			err := fc.ReadEach(func() []byte { return buf }, func(n int) ReadNext {
				got = append(got, buf[:n]...)
				return ReadDrain
			})
			if err != io.EOF || string(got) != "get k" {
				t.Fatalf("got %q, %v; want \"get k\" then EOF", got, err)
			}
		})
	}
}

// TestConnWriteReadExchanges: WriteReadVia writes the request and returns
// the reply the peer sends once it has read it, exchange after exchange.
func TestConnWriteReadExchanges(t *testing.T) {
	c, s := sockpair.TCP(t)
	fc := New(c)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := s.Read(buf)
			if err != nil {
				return
			}
			time.Sleep(time.Millisecond) // the reply comes after the wait began
			s.Write(bytes.ToUpper(buf[:n]))
		}
	}()
	fc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	for _, req := range []string{"get a", "get b", "incr c 1"} {
		n, err := fc.WriteReadVia(nil, []byte(req), buf)
		if err != nil || string(buf[:n]) != strings.ToUpper(req) {
			t.Fatalf("%q: got %q, %v", req, buf[:n], err)
		}
	}
}

// TestConnWriteReadPeerClosedBefore: a peer that closed while the
// connection was idle (its FIN arrived before the call) answers the write
// with a reset, which ends the wait with an error instead of a hang.
func TestConnWriteReadPeerClosedBefore(t *testing.T) {
	c, s := sockpair.TCP(t)
	fc := New(c)
	s.Close()
	time.Sleep(10 * time.Millisecond) // the FIN is queued
	fc.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err := fc.WriteReadVia(nil, []byte("get k"), make([]byte, 64))
	if err == nil {
		t.Fatal("WriteReadVia to a closed peer succeeded")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("WriteReadVia to a closed peer waited for the deadline: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("WriteReadVia to a closed peer took %v", d)
	}
}

// TestConnWriteReadFullSocket: a request larger than the socket takes at
// once is written in full (as Write) before the reply is read.
func TestConnWriteReadFullSocket(t *testing.T) {
	c, s := sockpair.TCP(t)
	fc := New(c)
	req := bytes.Repeat([]byte("x"), 8<<20)
	go func() {
		time.Sleep(20 * time.Millisecond) // the socket fills first
		got, err := io.ReadFull(s, make([]byte, len(req)))
		if err == nil && got == len(req) {
			s.Write([]byte("done"))
		}
	}()
	fc.SetReadDeadline(time.Now().Add(10 * time.Second))
	fc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, err := fc.WriteReadVia(nil, req, buf)
	if err != nil || string(buf[:n]) != "done" {
		t.Fatalf("got %q, %v; want done", buf[:n], err)
	}
}

// TestConnWriteReadDeadline: with no reply, the read deadline ends the
// wait.
func TestConnWriteReadDeadline(t *testing.T) {
	c, _ := sockpair.TCP(t)
	fc := New(c)
	fc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := fc.WriteReadVia(nil, []byte("get k"), make([]byte, 64))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
}

package counter

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	return connPair(t, "tcp")
}

// connPair returns both ends of a loopback TCP or a Unix socket
// connection.
func connPair(t *testing.T, network string) (client, server net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = t.TempDir() + "/s.sock"
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	client, err = net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestFastConnReadWriteEOF(t *testing.T) {
	c, s := tcpPair(t)
	fc := NewFastConn(c)
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
	go func() {
		time.Sleep(20 * time.Millisecond) // Read must wait for it
		s.Write([]byte("42\r\n"))
		s.Close()
	}()
	n, err = fc.Read(buf)
	if err != nil || string(buf[:n]) != "42\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if n, err = fc.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after close: %d, %v; want 0, EOF", n, err)
	}
}

// A write larger than the socket buffers waits for room, and all of it
// arrives in order.
func TestFastConnWriteWaitsForRoom(t *testing.T) {
	c, s := tcpPair(t)
	fc := NewFastConn(c)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // let the sockets fill up
		b, _ := io.ReadAll(io.LimitReader(s, int64(len(big))))
		got <- b
	}()
	if n, err := fc.Write(big); err != nil || n != len(big) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("received %d bytes, not the %d written", len(b), len(big))
	}
}

// TryWrite never waits: on a full socket it reports what was taken and no
// error.
func TestFastConnTryWriteFull(t *testing.T) {
	c, _ := tcpPair(t)
	fc := NewFastConn(c)
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

func TestFastConnDeadlineAndClose(t *testing.T) {
	c, _ := tcpPair(t)
	fc := NewFastConn(c)
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
func TestFastConnFallback(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	fc := NewFastConn(a)
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
func TestFastConnReadEach(t *testing.T) {
	c, s := tcpPair(t)
	fc := NewFastConn(c)
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
func TestFastConnReadEachShutdownAndDeadline(t *testing.T) {
	c, s := tcpPair(t)
	fc := NewFastConn(c)
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

	c2, _ := tcpPair(t)
	fc2 := NewFastConn(c2)
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
func TestFastConnReadEachSeesCloseWithData(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			c, s := connPair(t, network)
			fc := NewFastConn(c)
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

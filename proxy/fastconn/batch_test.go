package fastconn

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/sockpair"
)

// A Batch writes to each of its connections what TryWrite would: every
// byte to a socket with room, a short count and no error to a full one,
// net.ErrClosed for a closed Conn, and a reset or broken pipe for a peer
// that has gone; the peers receive exactly their own bytes, in order,
// over many rounds, through io_uring where the kernel has it and one
// write each otherwise.
func TestBatchWritesAsTryWriteWould(t *testing.T) {
	for _, uring := range []bool{true, false} {
		t.Run(fmt.Sprintf("uring=%v", uring), func(t *testing.T) {
			b := testBatch(t, uring)
			const conns, rounds = 70, 50 // more than one ring's worth
			fcs, peers := tcpConns(t, conns)
			want := make([][]byte, conns)
			for r := range rounds {
				for i, fc := range fcs {
					if (i+r)%3 == 0 {
						continue // not every conn in every round
					}
					p := []byte(fmt.Sprintf("round %d conn %d|", r, i))
					want[i] = append(want[i], p...)
					b.Add(fc, p)
				}
				b.Send()
				for i := range b.Len() {
					if n, err := b.Result(i); err != nil || n != len(b.items[i].p) {
						t.Fatalf("round %d write %d: %d of %d bytes, %v", r, i, n, len(b.items[i].p), err)
					}
				}
				b.Reset()
			}
			for i, s := range peers {
				got := make([]byte, len(want[i]))
				s.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, want[i]) {
					t.Fatalf("conn %d received %q, %v; want %q", i, got, err, want[i])
				}
			}

			// A full socket, a closed Conn, a gone peer, a healthy one.
			fullC, _ := sockpair.SmallTCP(t)
			full := New(fullC)
			fill(t, full)
			closedC, _ := sockpair.TCP(t)
			closed := New(closedC)
			closed.Close()
			goneC, goneS := sockpair.TCP(t)
			gone := New(goneC)
			goneS.(*net.TCPConn).SetLinger(0) // its close resets
			goneS.Close()
			time.Sleep(50 * time.Millisecond) // the reset has arrived (loopback)
			okC, okS := sockpair.TCP(t)
			ok := New(okC)

			big := bytes.Repeat([]byte("x"), 1<<20)
			iFull := b.Add(full, big)
			iClosed := b.Add(closed, []byte("to a closed conn"))
			iGone := b.Add(gone, []byte("to a gone peer"))
			iOK := b.Add(ok, []byte("fine"))
			b.Send()
			if n, err := b.Result(iFull); err != nil || n >= len(big) {
				t.Errorf("full socket: %d of %d bytes, %v; want a short count and no error", n, len(big), err)
			}
			if _, err := b.Result(iClosed); !errors.Is(err, net.ErrClosed) {
				t.Errorf("closed conn: %v; want net.ErrClosed", err)
			}
			if _, err := b.Result(iGone); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
				t.Errorf("gone peer: %v; want a reset or a broken pipe", err)
			}
			if n, err := b.Result(iOK); err != nil || n != 4 {
				t.Errorf("healthy conn: %d bytes, %v", n, err)
			}
			b.Reset()
			okS.SetReadDeadline(time.Now().Add(10 * time.Second))
			got := make([]byte, 4)
			if _, err := io.ReadFull(okS, got); err != nil || string(got) != "fine" {
				t.Errorf("healthy peer received %q, %v", got, err)
			}
		})
	}
}

// A Batch of one write, and an empty one, make no io_uring call and give
// the same results.
func TestBatchOfOneOrNone(t *testing.T) {
	b := NewBatch()
	defer b.Close()
	b.Send()
	c, s := sockpair.TCP(t)
	i := b.Add(New(c), []byte("one"))
	b.Send()
	if n, err := b.Result(i); n != 3 || err != nil {
		t.Fatalf("%d, %v", n, err)
	}
	got := make([]byte, 3)
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "one" {
		t.Fatalf("received %q, %v", got, err)
	}
}

func BenchmarkBatchSend(b *testing.B) {
	for _, uring := range []bool{false, true} {
		b.Run(fmt.Sprintf("uring=%v", uring), func(b *testing.B) {
			bt := testBatch(b, uring)
			const conns = 16
			fcs, peers := tcpConns(b, conns)
			msg := []byte("STORED\r\n")
			buf := make([]byte, 64<<10)
			b.ResetTimer()
			for i := range b.N {
				for _, fc := range fcs {
					bt.Add(fc, msg)
				}
				bt.Send()
				bt.Reset()
				if i%64 == 63 {
					for _, s := range peers {
						s.SetReadDeadline(time.Now().Add(time.Second))
						s.Read(buf)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*conns), "ns/write")
		})
	}
}

// testBatch returns a Batch with its ring (skipping tb where the kernel
// refuses io_uring) or, for !uring, one that writes one by one; closed
// when tb ends.
func testBatch(tb testing.TB, uring bool) *Batch {
	tb.Helper()
	b := NewBatch()
	tb.Cleanup(func() { b.Close() })
	if uring && !b.Uring() {
		if runtime.GOOS == "linux" {
			tb.Log("the kernel refuses io_uring here: the batch writes one by one")
		}
		tb.Skip("no io_uring")
	}
	if !uring {
		b.Close()
	}
	return b
}

// tcpConns returns n loopback TCP connections as Conns and their peers,
// closed when t ends.
func tcpConns(t testing.TB, n int) ([]*Conn, []net.Conn) {
	fcs := make([]*Conn, n)
	peers := make([]net.Conn, n)
	for i := range n {
		c, s := sockpair.TCP(t)
		fcs[i], peers[i] = New(c), s
	}
	return fcs, peers
}

package fastconn

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/poplimit/poplimit/bench/fixture/sockpair"
)

// Writers on many goroutines, each to its own connection, through one
// Combiner: every peer receives exactly its writer's bytes in order, a
// full socket gives a short count (the writer then finishes with Write),
// and WriteReadVia's write goes out with the others and its reply is
// read; with a ring, without one (one call each, as where the kernel
// refuses io_uring) and after the ring was dropped. Run under -race.
func TestCombinerWritersOnManyGoroutines(t *testing.T) {
	for _, kind := range []string{"ring", "no ring", "ring dropped"} {
		t.Run(kind, func(t *testing.T) {
			var cb *Combiner
			switch kind {
			case "ring":
				cb = NewCombiner()
				if !cb.uring {
					t.Skip("the kernel refuses io_uring here")
				}
			case "no ring": // as where the kernel refuses io_uring
				cb = &Combiner{batch: &Batch{}}
			case "ring dropped": // as after a failed io_uring_enter
				cb = NewCombiner()
				cb.batch.Close()
			}
			defer cb.Close()
			combinerWriters(t, cb)
		})
	}
}

func combinerWriters(t *testing.T, cb *Combiner) {
	const writers, writes = 32, 200
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers)
	for w := range writers {
		c, s := sockpair.TCP(t)
		fc := New(c)
		wg.Add(2)
		var want []byte
		for i := range writes {
			want = fmt.Appendf(want, "writer %d write %d|", w, i)
		}
		go func() { // the peer
			defer wg.Done()
			s.SetReadDeadline(time.Now().Add(20 * time.Second))
			got := make([]byte, len(want))
			if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, want) {
				errs <- fmt.Errorf("writer %d's peer: %v, received %d bytes, equal %v", w, err, len(got), bytes.Equal(got, want))
			}
		}()
		go func() {
			defer wg.Done()
			for i := range writes {
				p := fmt.Appendf(nil, "writer %d write %d|", w, i)
				n, err := cb.TryWrite(fc, p)
				if err == nil && n < len(p) {
					_, err = fc.Write(p[n:])
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d write %d: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// A full socket: a short count, no error.
	c, _ := sockpair.SmallTCP(t)
	fc := New(c)
	fill(t, fc)
	big := bytes.Repeat([]byte("y"), 1<<20)
	if n, err := cb.TryWrite(fc, big); err != nil || n >= len(big) {
		t.Errorf("full socket: %d of %d bytes, %v", n, len(big), err)
	}

	// WriteReadVia: the request goes out through the Combiner, the reply
	// is read.
	c2, s2 := sockpair.TCP(t)
	fc2 := New(c2)
	go func() {
		buf := make([]byte, 4)
		if _, err := io.ReadFull(s2, buf); err == nil && string(buf) == "ping" {
			s2.Write([]byte("pong"))
		}
	}()
	fc2.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 8)
	n, err := fc2.WriteReadVia(cb, []byte("ping"), got)
	if err != nil || string(got[:n]) != "pong" {
		t.Errorf("WriteReadVia: %q, %v", got[:n], err)
	}
	// To a closed peer: the write or the read fails, nothing hangs.
	c3, s3 := sockpair.TCP(t)
	fc3 := New(c3)
	s3.(*net.TCPConn).SetLinger(0)
	s3.Close()
	time.Sleep(50 * time.Millisecond)
	fc3.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := fc3.WriteReadVia(cb, []byte("ping"), got); err == nil {
		t.Error("WriteReadVia to a reset peer: no error")
	}
}

package fastconn

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A Batch whose io_uring_enter fails drops its ring and makes every write
// one by one: each peer receives its bytes exactly once, in this Send and
// the next.
func TestBatchRingFailureWritesEachOnce(t *testing.T) {
	b := testBatch(t, true)
	fcs, peers := tcpConns(t, 8)
	// The ring's descriptor now names /dev/null: io_uring_enter fails.
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if err := unix.Dup2(int(null.Fd()), b.ring.fd); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		for i, fc := range fcs {
			b.Add(fc, []byte(fmt.Sprintf("r%d c%d|", round, i)))
		}
		b.Send()
		for i := range b.Len() {
			if n, err := b.Result(i); err != nil || n != len(b.items[i].p) {
				t.Fatalf("round %d write %d: %d of %d bytes, %v", round, i, n, len(b.items[i].p), err)
			}
		}
		b.Reset()
		if b.Uring() {
			t.Fatal("the ring was kept after io_uring_enter failed")
		}
	}
	for i, s := range peers {
		want := []byte(fmt.Sprintf("r0 c%d|r1 c%d|", i, i))
		got := make([]byte, len(want)+1)
		s.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.ReadAtLeast(s, got, len(want))
		if err != nil || !bytes.Equal(got[:n], want) {
			t.Fatalf("conn %d received %q, %v; want %q", i, got[:n], err, want)
		}
		// Nothing more: no write was made twice.
		s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if n, _ := s.Read(got); n > 0 {
			t.Fatalf("conn %d received %q more", i, got[:n])
		}
	}
}

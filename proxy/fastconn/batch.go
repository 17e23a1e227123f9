package fastconn

import (
	"sync"
	"syscall"
)

// Batch is one non-blocking write attempt on each of several Conns, made
// together: with one io_uring_enter system call for all of them on Linux
// when the kernel allows io_uring, else one write each (TryWrite). A
// system call's entry costs as much as a small loopback write's own work
// on some virtual machines, so a proxy answering many clients from one
// backend reply saves most of a system call per reply.
//
// A Batch belongs to one goroutine at a time; Close releases its ring.
// While Send runs, each Conn is held as by a Write (Close waits), and the
// caller must not write to it otherwise.
type Batch struct {
	items []batchItem
	ring  *ring // nil: one TryWrite each
}

type batchItem struct {
	c     *Conn
	p     []byte
	fd    uintptr
	recv  bool // a read into p, on a descriptor its reader holds (fd)
	held  bool // fd is valid: the Conn's write side is held, or recv
	done  bool // the ring completed it
	n     int
	err   error
	errno syscall.Errno // recv's result: EAGAIN when nothing had arrived
}

// maxRing is the most writes one system call carries; a larger batch
// takes several.
const maxRing = 64

// NewBatch returns an empty Batch, with an io_uring ring when the kernel
// gives one.
func NewBatch() *Batch {
	return &Batch{ring: newRing(maxRing)}
}

// Uring reports whether the kernel gives this process io_uring rings (a
// seccomp profile, such as Docker's default, or the io_uring_disabled
// sysctl may refuse them): Batches and Combiners then write one by one.
var Uring = sync.OnceValue(func() bool {
	r := newRing(1)
	if r == nil {
		return false
	}
	_ = r.close()
	return true
})

// Uring reports whether b writes through io_uring.
func (b *Batch) Uring() bool { return b.ring != nil }

// Add queues a write of p (not empty) to c, which must be Raw and queued
// at most once per Send; it returns the write's index for Result.
func (b *Batch) Add(c *Conn, p []byte) int {
	b.items = append(b.items, batchItem{c: c, p: p})
	return len(b.items) - 1
}

// addRecv queues one read into p (not empty) from fd, the descriptor of
// c that the caller holds for reading (inside c's RawConn.Read callback)
// until Send returns; Result's error is then nil and recvResult has it.
func (b *Batch) addRecv(c *Conn, fd uintptr, p []byte) int {
	b.items = append(b.items, batchItem{c: c, p: p, fd: fd, recv: true})
	return len(b.items) - 1
}

// recvResult is read i's outcome, as one read(2): the bytes read (0 at
// end of stream) and its errno (EAGAIN: nothing had arrived).
func (b *Batch) recvResult(i int) (int, syscall.Errno) {
	return b.items[i].n, b.items[i].errno
}

// Len is the number of writes queued.
func (b *Batch) Len() int { return len(b.items) }

// Send makes every queued write's attempt: afterwards Result(i) is what
// TryWrite would have returned for it.
func (b *Batch) Send() {
	for i := range b.items {
		it := &b.items[i]
		it.n, it.err, it.errno, it.held, it.done = 0, nil, 0, it.recv, false
	}
	if b.ring == nil || len(b.items) < 2 {
		for i := range b.items {
			it := &b.items[i]
			if it.recv {
				it.n, it.errno = rawRead(it.fd, it.p)
			} else {
				it.n, it.err = it.c.TryWrite(it.p)
			}
		}
		return
	}
	for lo := 0; lo < len(b.items); lo += maxRing {
		b.hold(lo, min(len(b.items), lo+maxRing), lo)
	}
}

// Result is write i's outcome: the bytes the socket took and an error
// other than a full socket.
func (b *Batch) Result(i int) (int, error) {
	return b.items[i].n, b.items[i].err
}

// Reset empties b for the next round, dropping its references.
func (b *Batch) Reset() {
	clear(b.items)
	b.items = b.items[:0]
}

// Close releases the ring; b then writes one TryWrite each.
func (b *Batch) Close() error {
	r := b.ring
	b.ring = nil
	if r == nil {
		return nil
	}
	return r.close()
}

// hold holds the write side of items[i:hi] (one nested RawConn.Write
// each, so that no descriptor is closed and reused while the kernel
// writes to it), then submits items[lo:hi].
func (b *Batch) hold(i, hi, lo int) {
	if i == hi {
		b.submit(lo, hi)
		return
	}
	it := &b.items[i]
	if it.recv {
		b.hold(i+1, hi, lo) // its reader holds it
		return
	}
	c := it.c
	if c.bb != nil {
		panic("fastconn: a Conn queued twice in one Batch")
	}
	c.bb, c.bi, c.bhi, c.blo = b, i, hi, lo
	err := c.rc.Write(c.batchFn)
	c.bb = nil
	if !it.held {
		// Closed, or its deadline passed: the callback never ran.
		it.err = err
		b.hold(i+1, hi, lo)
	}
}

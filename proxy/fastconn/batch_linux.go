package fastconn

import (
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring ABI (include/uapi/linux/io_uring.h), as far as Batch uses it.
const (
	ioringOffSQRing = 0
	ioringOffCQRing = 0x8000000
	ioringOffSQEs   = 0x10000000

	ioringOpSend         = 26
	ioringOpRecv         = 27
	ioringEnterGetEvents = 1
)

type ioSQRingOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type ioCQRingOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type ioUringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  ioSQRingOffsets
	cqOff                                                                  ioCQRingOffsets
}

type ioUringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	msgFlags    uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFDIn  int32
	addr3       uint64
	_           uint64
}

type ioUringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// ring is an io_uring instance used synchronously: submit queues sends,
// enters once and reaps every completion before returning.
type ring struct {
	fd                   int
	sqMem, cqMem, sqeMem []byte
	sqTail, sqMask       *uint32
	sqArray              []uint32
	cqHead, cqTail       *uint32
	cqMask               uint32
	sqes                 []ioUringSQE
	cqes                 []ioUringCQE
}

// newRing sets up a ring of at least n entries, or returns nil when the
// kernel refuses io_uring (too old, disabled by sysctl or seccomp).
func newRing(n uint32) *ring {
	var p ioUringParams
	fd, _, errno := syscall.Syscall(unix.SYS_IO_URING_SETUP, uintptr(n), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil
	}
	r := &ring{fd: int(fd)}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	var err error
	if r.sqMem, err = unix.Mmap(r.fd, ioringOffSQRing, int(p.sqOff.array+p.sqEntries*4), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil
	}
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*int(unsafe.Sizeof(ioUringCQE{}))
	if r.cqMem, err = unix.Mmap(r.fd, ioringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil
	}
	sqeSize := int(p.sqEntries) * int(unsafe.Sizeof(ioUringSQE{}))
	if r.sqeMem, err = unix.Mmap(r.fd, ioringOffSQEs, sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil
	}
	sq, cq := unsafe.Pointer(&r.sqMem[0]), unsafe.Pointer(&r.cqMem[0])
	r.sqTail = (*uint32)(unsafe.Add(sq, p.sqOff.tail))
	r.sqMask = (*uint32)(unsafe.Add(sq, p.sqOff.ringMask))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Add(sq, p.sqOff.array)), p.sqEntries)
	r.cqHead = (*uint32)(unsafe.Add(cq, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(cq, p.cqOff.tail))
	r.cqMask = *(*uint32)(unsafe.Add(cq, p.cqOff.ringMask))
	r.cqes = unsafe.Slice((*ioUringCQE)(unsafe.Add(cq, p.cqOff.cqes)), p.cqEntries)
	r.sqes = unsafe.Slice((*ioUringSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	if p.sqEntries < n || p.cqEntries < n {
		return nil
	}
	ok = true
	return r
}

func (r *ring) close() error {
	for _, m := range [][]byte{r.sqeMem, r.cqMem, r.sqMem} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMem, r.cqMem, r.sqMem = nil, nil, nil
	return syscall.Close(r.fd)
}

// submit sends items[lo:hi] whose descriptors are held, with one
// io_uring_enter, and records each result as TryWrite would.
func (b *Batch) submit(lo, hi int) {
	r := b.ring
	tail := atomic.LoadUint32(r.sqTail)
	mask := *r.sqMask
	queued := uint32(0)
	for i := lo; i < hi; i++ {
		it := &b.items[i]
		if !it.held {
			continue
		}
		idx := (tail + queued) & mask
		op, flags := uint8(ioringOpSend), uint32(unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if it.recv {
			op, flags = ioringOpRecv, unix.MSG_DONTWAIT
		}
		r.sqes[idx] = ioUringSQE{
			opcode:   op,
			fd:       int32(it.fd),
			addr:     uint64(uintptr(unsafe.Pointer(&it.p[0]))),
			len:      uint32(len(it.p)),
			msgFlags: flags,
			userData: uint64(i),
		}
		r.sqArray[idx] = idx
		queued++
	}
	if queued == 0 {
		return
	}
	atomic.StoreUint32(r.sqTail, tail+queued)
	broken := false
	for done, first := uint32(0), true; done < queued; first = false {
		// Sends and receives with MSG_DONTWAIT complete during the
		// submitting call, made raw (no scheduler hand-off, which would
		// wake sysmon); a kernel that finishes one later is waited for
		// in a blocking call.
		var n uintptr
		var errno syscall.Errno
		if first {
			for { // an interrupted submit consumed nothing: submit again
				n, _, errno = syscall.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(queued), 0, 0, 0, 0)
				if errno != syscall.EINTR {
					break
				}
			}
		} else {
			n, _, errno = syscall.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, uintptr(queued-done), ioringEnterGetEvents, 0, 0)
		}
		if errno != 0 && errno != syscall.EINTR || first && errno == 0 && uint32(n) != queued {
			broken = true
			break
		}
		done += b.reap()
	}
	if broken {
		// The ring's state is unknown: keep the results it posted (a
		// send it made must not be made again), drop it (its fd's close
		// cancels what it holds) and write the rest one by one from now on.
		b.reap()
		b.ring = nil
		_ = r.close()
	}
	for i := lo; i < hi; i++ {
		it := &b.items[i]
		switch {
		case it.done || !it.held:
		case it.recv:
			it.n, it.errno = rawRead(it.fd, it.p)
		default:
			it.n, it.err = it.c.writeOnce(it.fd, it.p)
		}
	}
}

// reap records the completions in the ring and reports how many.
func (b *Batch) reap() uint32 {
	r := b.ring
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	n := uint32(0)
	for ; head != tail; head++ {
		cqe := r.cqes[head&r.cqMask]
		it := &b.items[cqe.userData]
		it.done = true
		if it.recv {
			if cqe.res >= 0 {
				it.n = int(cqe.res)
			} else {
				it.errno = syscall.Errno(-cqe.res)
			}
			n++
			continue
		}
		switch {
		case cqe.res >= 0:
			it.n = int(cqe.res)
		case syscall.Errno(-cqe.res) == syscall.EAGAIN:
			it.n = 0
		default:
			it.err = it.c.opError("write", syscall.Errno(-cqe.res))
		}
		n++
	}
	atomic.StoreUint32(r.cqHead, head)
	return n
}

//go:build unix

package fastconn

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// initRaw makes the closures passed to RawConn (once: one passed to it
// escapes).
func (s *Conn) initRaw() {
	s.readFn = func(fd uintptr) bool {
		n, e := s.readOnce(fd, s.rp)
		if e == syscall.EAGAIN {
			return false // wait for readiness
		}
		s.rn, s.rerrno = n, e
		return true
	}
	s.tryFn = func(fd uintptr) bool {
		s.write(fd)
		return true
	}
	s.writeFn = func(fd uintptr) bool {
		for s.werrno == 0 && s.wn < len(s.wp) {
			if !s.write(fd) {
				return false
			}
		}
		return true
	}
	s.wrFn = func(fd uintptr) bool {
		if !s.wrote && s.comb != nil {
			// One attempt, with other writes; a rest is written outside.
			n, err := s.comb.TryWrite(s, s.wp)
			s.wn += n
			if err != nil {
				s.cerr = err
				return true
			}
			if s.wn < len(s.wp) {
				return true
			}
			s.wrote = true
			return false
		}
		if !s.wrote {
			for s.werrno == 0 && s.wn < len(s.wp) {
				if !s.write(fd) {
					return true // full: WriteReadVia finishes outside
				}
			}
			if s.werrno != 0 {
				return true
			}
			s.wrote = true
			return false // wait for the reply without reading first
		}
		return s.readFn(fd)
	}
	s.batchFn = func(fd uintptr) bool {
		b := s.bb
		it := &b.items[s.bi]
		it.fd, it.held = fd, true
		b.hold(s.bi+1, s.bhi, s.blo)
		return true
	}
	s.eachFn = func(fd uintptr) bool {
		for {
			p := s.fill()
			n, e := s.readOnce(fd, p)
			switch {
			case e == syscall.EAGAIN:
				return false
			case e != 0:
				s.eerr = s.opError("read", e)
				return true
			case n == 0:
				s.eerr = io.EOF
				return true
			}
			switch s.consume(n) {
			case ReadStop:
				return true
			case ReadShort:
				if n < len(p) {
					return false // drained: wait for the next arrival
				}
			}
		}
	}
}

// readOnce is one read(2) of fd, through the Combiner of ReadVia,
// ReadEachVia or WriteReadVia if any.
func (s *Conn) readOnce(fd uintptr, p []byte) (int, syscall.Errno) {
	cb := s.rcomb
	if cb == nil && s.rpick != nil {
		cb = s.rpick()
	}
	if cb != nil {
		return cb.readHeld(s, fd, p)
	}
	return rawRead(fd, p)
}

// rawRead reads into p (not empty) with one read(2), retried on EINTR.
func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}

// write writes wp[wn:] once, adding to wn; it reports false when the
// socket is full.
func (s *Conn) write(fd uintptr) bool {
	n, e := rawWrite(fd, s.wp[s.wn:])
	switch e {
	case 0:
		s.wn += n
		return true
	case syscall.EAGAIN:
		return false
	}
	s.werrno = e
	return true
}

// writeOnce is one write of p to fd, a descriptor held for writing,
// with TryWrite's results.
func (s *Conn) writeOnce(fd uintptr, p []byte) (int, error) {
	n, e := rawWrite(fd, p)
	switch e {
	case 0:
		return n, nil
	case syscall.EAGAIN:
		return 0, nil
	}
	return 0, s.opError("write", e)
}

// rawWrite writes p (not empty) with one write(2), retried on EINTR.
func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}

func rawConn(nc net.Conn) syscall.RawConn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// shutdownRaw shuts both directions of the socket down.
func (s *Conn) shutdownRaw() error {
	var serr error
	if err := s.rc.Control(func(fd uintptr) { serr = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) }); err != nil {
		return err
	}
	if serr != nil {
		return s.opError("shutdown", serr)
	}
	return nil
}

package counter

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// FastConn is a net.Conn whose Read and Write make raw system calls on
// the non-blocking socket, waiting for readiness through the runtime's
// poller (syscall.RawConn) only when the socket has nothing to give or no
// room. The memcached clients here (gomemcache through
// NewMemcacheClient, PipeStore) and mcproxy's sockets use it.
//
// Why: syscall.Read and syscall.Write tell the scheduler that the thread
// enters a system call, and a write on loopback TCP runs the receiver's
// whole network path and wakes it, so on a busy machine the thread is
// often descheduled inside the call; sysmon then takes its P away, hands
// it to another thread, and keeps polling every 20 µs. On a 2-core machine
// shared with the load generator and memcached, that churn cost mcproxy
// about a third of its CPU per request (perf: sysmon's nanosleep, futex
// wakeups, finish_task_switch). A call on a non-blocking socket never
// blocks, so skipping the scheduler's bookkeeping is safe: at worst the P
// waits for the call to return.
//
// One goroutine reads and one writes at a time (the caller serialises
// each side, as bufio and the proxy's loops do); read and write state are
// separate, so the two sides may run concurrently. Deadlines and Close
// work as on the wrapped conn: the poller reports them. A conn that
// exposes no socket (net.Pipe, TLS) is used as is.
type FastConn struct {
	net.Conn
	rc syscall.RawConn // nil: use Conn

	rp      []byte
	rn      int
	rerrno  syscall.Errno
	readFn  func(fd uintptr) bool
	wp      []byte
	wn      int
	werrno  syscall.Errno
	tryFn   func(fd uintptr) bool // one write attempt
	writeFn func(fd uintptr) bool // write all of wp, waiting for room
}

// NewFastConn wraps nc.
func NewFastConn(nc net.Conn) *FastConn {
	s := &FastConn{Conn: nc, rc: rawConn(nc)}
	if s.rc == nil {
		return s
	}
	// The closures are made once: one passed to RawConn escapes.
	s.readFn = func(fd uintptr) bool {
		for {
			n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.rp[0])), uintptr(len(s.rp)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait for readiness
			}
			s.rn, s.rerrno = int(n), e
			return true
		}
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
	return s
}

// write writes wp[wn:] once, adding to wn; it reports false when the
// socket is full.
func (s *FastConn) write(fd uintptr) bool {
	p := s.wp[s.wn:]
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
			s.wn += int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.werrno = e
		return true
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

// Raw reports whether s makes raw system calls (false: it forwards to
// the wrapped conn); TryWrite needs it.
func (s *FastConn) Raw() bool { return s.rc != nil }

// Read reads into p as net.Conn.Read does: it waits until some bytes
// arrive, EOF, the read deadline, or Close.
func (s *FastConn) Read(p []byte) (int, error) {
	if s.rc == nil {
		return s.Conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	s.rp = p
	err := s.rc.Read(s.readFn)
	n, e := s.rn, s.rerrno
	s.rp, s.rn, s.rerrno = nil, 0, 0
	switch {
	case err != nil:
		return 0, err
	case e != 0:
		return 0, &net.OpError{Op: "read", Net: s.Conn.LocalAddr().Network(), Err: e, Source: s.Conn.LocalAddr(), Addr: s.Conn.RemoteAddr()}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// TryWrite makes one non-blocking write attempt of p: it returns how many
// bytes the socket took, and an error other than EAGAIN (full socket).
// It needs Raw.
func (s *FastConn) TryWrite(p []byte) (int, error) {
	return s.doWrite(p, s.tryFn)
}

// Write writes all of p as net.Conn.Write does, waiting for room until
// the write deadline or Close.
func (s *FastConn) Write(p []byte) (int, error) {
	if s.rc == nil {
		return s.Conn.Write(p)
	}
	return s.doWrite(p, s.writeFn)
}

func (s *FastConn) doWrite(p []byte, f func(uintptr) bool) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.wp = p
	err := s.rc.Write(f)
	n, e := s.wn, s.werrno
	s.wp, s.wn, s.werrno = nil, 0, 0
	switch {
	case err != nil:
		return n, err
	case e != 0:
		return n, &net.OpError{Op: "write", Net: s.Conn.LocalAddr().Network(), Err: e, Source: s.Conn.LocalAddr(), Addr: s.Conn.RemoteAddr()}
	}
	return n, nil
}

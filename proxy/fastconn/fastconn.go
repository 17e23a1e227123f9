// Package fastconn is the socket I/O leaf of poplimit: Conn, a net.Conn
// whose reads and writes are raw system calls on the non-blocking socket
// (see Conn for why), and Batch and Combiner, which make many sockets'
// reads and writes with one io_uring call where Linux allows it. The
// memcached clients of counter/memcached, mcproxy's client and backend
// sockets and edge's fasthttp core use it.
package fastconn

import (
	"io"
	"net"
	"syscall"
)

// Conn is a net.Conn whose Read and Write make raw system calls on
// the non-blocking socket, waiting for readiness through the runtime's
// poller (syscall.RawConn) only when the socket has nothing to give or no
// room. The memcached clients (counter/memcached: gomemcache through
// NewClient, PipeStore) and mcproxy's sockets use it.
//
// Why: a blocking-style syscall.Read/Write lets sysmon hand the P to
// another thread when a loopback write runs the receiver's network path;
// a call on a non-blocking socket never blocks, so raw calls skip that
// churn safely (the cost it saved is in bench/RESULTS.md).
//
// One goroutine reads and one writes at a time (the caller serialises
// each side, as bufio and the proxy's loops do); read and write state are
// separate, so the two sides may run concurrently. Deadlines and Close
// work as on the wrapped conn: the poller reports them. A conn that
// exposes no socket (net.Pipe, TLS) is used as is.
type Conn struct {
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

	wrote bool                  // WriteReadVia: w is written, wait for the reply
	wrFn  func(fd uintptr) bool // WriteReadVia's registration
	comb  *Combiner             // WriteReadVia's
	rcomb *Combiner             // ReadVia's
	rpick func() *Combiner      // ReadEachVia's
	cerr  error                 // WriteReadVia's write error

	bb           *Batch // Batch.hold's state while it holds this Conn
	bi, bhi, blo int
	batchFn      func(fd uintptr) bool

	fill    func() []byte // ReadEach's arguments and result
	consume func(n int) ReadNext
	eerr    error
	eachFn  func(fd uintptr) bool
}

// New wraps nc. On systems other than Unix it forwards to nc.
func New(nc net.Conn) *Conn {
	s := &Conn{Conn: nc, rc: rawConn(nc)}
	if s.rc != nil {
		s.initRaw()
	}
	return s
}

// Raw reports whether s makes raw system calls (false: it forwards to
// the wrapped conn); TryWrite needs it.
func (s *Conn) Raw() bool { return s.rc != nil }

// Read reads into p as net.Conn.Read does: it waits until some bytes
// arrive, EOF, the read deadline, or Close.
func (s *Conn) Read(p []byte) (int, error) {
	if s.rc == nil {
		return s.Conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	s.rp = p
	err := s.rc.Read(s.readFn)
	return s.readDone(err)
}

// ReadVia is Read whose read(2) calls are made through cb (nil: on their
// own), with other goroutines' reads and writes.
func (s *Conn) ReadVia(cb *Combiner, p []byte) (int, error) {
	s.rcomb = cb
	n, err := s.Read(p)
	s.rcomb = nil
	return n, err
}

// readDone ends a read registration that returned err: it returns what
// the read got (EOF for 0 bytes) and clears the read state.
func (s *Conn) readDone(err error) (int, error) {
	n, e := s.rn, s.rerrno
	s.rp, s.rn, s.rerrno = nil, 0, 0
	switch {
	case err != nil:
		return 0, err
	case e != 0:
		return 0, s.opError("read", e)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// WriteReadVia writes all of w, then reads into p as Read does, its
// write attempt and reads made through cb (nil: on their own) with other
// goroutines' reads and writes. Both run in one wait registration with
// the poller, so after writing it waits for the reply instead of first
// reading to find the socket empty (one system call saved per exchange).
// That is sound only for a peer that sends nothing unprompted, as a
// server to its client without pipelining: a reply to w, or the reset a
// write to a closed socket draws, arrives after the registration and
// wakes the wait. When the socket takes only part of w, WriteReadVia
// writes the rest as Write does and then reads as Read does. A write
// error is returned as Write's. The read deadline bounds it all.
func (s *Conn) WriteReadVia(cb *Combiner, w, p []byte) (int, error) {
	if s.rc == nil || len(w) == 0 || len(p) == 0 {
		if _, err := s.Write(w); err != nil {
			return 0, err
		}
		return s.Read(p)
	}
	s.wp, s.rp, s.comb, s.rcomb = w, p, cb, cb
	err := s.rc.Read(s.wrFn)
	wn, we, wrote, cerr := s.wn, s.werrno, s.wrote, s.cerr
	s.wp, s.wn, s.werrno, s.wrote, s.comb, s.rcomb, s.cerr = nil, 0, 0, false, nil, nil, nil
	switch {
	case cerr != nil:
		s.readDone(nil)
		return 0, cerr
	case we != 0:
		s.readDone(nil)
		return 0, s.opError("write", we)
	case !wrote && err == nil: // the socket is full: as Write, then Read
		s.readDone(nil)
		if _, err := s.Write(w[wn:]); err != nil {
			return 0, err
		}
		return s.Read(p)
	}
	return s.readDone(err)
}

// ReadNext is what ReadEach does after consume took a read's bytes.
type ReadNext uint8

const (
	// ReadStop ends ReadEach (it returns nil).
	ReadStop ReadNext = iota
	// ReadDrain reads again until the socket has nothing (EAGAIN), ends
	// (io.EOF) or fails. It is the safe verdict: a peer's close that
	// arrived with the last bytes shows only on the next read.
	ReadDrain
	// ReadShort lets a read that did not fill the buffer wait for the
	// next arrival instead of reading again: consume returns it only
	// when the bytes it took make the caller write to the peer (a reply
	// is due), because a write to a peer that has closed draws a reset,
	// which wakes the wait. Without that write a close that came with
	// the bytes would never be seen.
	ReadShort
)

// ReadEach reads until consume says stop: it reads into fill's buffer
// (fill returns a non-empty slice, called before every read) and hands
// consume the number of bytes read; consume returns ReadStop to stop, and
// ReadEach then returns nil. It returns io.EOF at end of stream, and an
// error on a failed read, the read deadline or Close.
//
// It is for request/response traffic: when consume returns ReadShort
// after a read that did not fill the buffer, the socket is most likely
// drained, so ReadEach waits for the next arrival instead of reading
// again to get EAGAIN (one system call per message saved). That is only
// sound within one wait registration with the poller (a new RawConn.Read
// forgets a readiness that arrived before it), which is why consume runs
// inside it, and only when a reply is due (see ReadShort). consume must
// not block for long, and must never Close the connection (Close waits
// for ReadEach to return): use Shutdown.
func (s *Conn) ReadEach(fill func() []byte, consume func(n int) ReadNext) error {
	if s.rc == nil {
		for {
			n, err := s.Conn.Read(fill())
			if n > 0 && consume(n) == ReadStop {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	s.fill, s.consume = fill, consume
	err := s.rc.Read(s.eachFn)
	if err == nil {
		err = s.eerr
	}
	s.fill, s.consume, s.eerr = nil, nil, nil
	return err
}

// ReadEachVia is ReadEach whose read(2) calls are made through the
// Combiner that pick returns before each (nil: on their own), with other
// goroutines' reads and writes.
func (s *Conn) ReadEachVia(pick func() *Combiner, fill func() []byte, consume func(n int) ReadNext) error {
	s.rpick = pick
	err := s.ReadEach(fill, consume)
	s.rpick = nil
	return err
}

// Shutdown shuts both directions of the socket down without closing the
// descriptor: a reader in progress sees EOF, a writer an error. Unlike
// Close it never waits for a read or write in progress, so it may be
// called from inside ReadEach's consume or while holding a lock that
// consume takes.
func (s *Conn) Shutdown() error {
	if s.rc == nil {
		return s.Conn.Close()
	}
	return s.shutdownRaw()
}

func (s *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: s.Conn.LocalAddr().Network(), Source: s.Conn.LocalAddr(), Addr: s.Conn.RemoteAddr(), Err: err}
}

// TryWrite makes one non-blocking write attempt of p: it returns how many
// bytes the socket took, and an error other than EAGAIN (full socket).
// It needs Raw.
func (s *Conn) TryWrite(p []byte) (int, error) {
	return s.doWrite(p, s.tryFn)
}

// Write writes all of p as net.Conn.Write does, waiting for room until
// the write deadline or Close.
func (s *Conn) Write(p []byte) (int, error) {
	if s.rc == nil {
		return s.Conn.Write(p)
	}
	return s.doWrite(p, s.writeFn)
}

func (s *Conn) doWrite(p []byte, f func(uintptr) bool) (int, error) {
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
		return n, s.opError("write", e)
	}
	return n, nil
}

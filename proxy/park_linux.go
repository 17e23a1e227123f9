package proxy

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
)

// parker holds idle client connections as bare descriptors: a connection
// whose reader the sweeper found idle (nothing partial, nothing queued,
// nothing being written) leaves the runtime entirely. Its socket is
// duplicated, its net.Conn closed (the runtime forgets it), and the
// duplicate registered in one epoll instance of the Server's own
// (EPOLLIN|EPOLLRDHUP, one shot) with a 16-byte record in a table
// indexed by descriptor; its clientConn, goroutine, buffers and queue are
// gone. An idle connection then costs its kernel socket and that record.
//
// The parker's goroutine waits on epoll: a parked client that hung up
// with nothing to read is closed there; one that sent is given a new
// net.Conn (net.FileConn) and clientConn and served again. The sweeper
// closes parked connections past the idle timeout (expire); Shutdown
// closes them all (close). A parked connection still counts as a client
// connection (currConns, client_connections) and holds its unit of the
// Server's wait group.
//
// Whoever clears a record's parked flag (under mu) owns its descriptor;
// epoll events carry the record's generation, so an event for a record
// already taken, or for a descriptor number reused since, is ignored.
type parker struct {
	s      *Server
	mu     sync.Mutex
	epfd   int // 0: not started
	wakeW  int // write end of the pipe that stops the loop
	pages  []*parkPage
	closed bool
	done   chan struct{} // closed when the loop returns

	spareMu sync.Mutex
	spare   int // a descriptor given up when the process has none left (fileConn); -1: none
}

// parkRec is a parked connection's record, at its descriptor's index.
type parkRec struct {
	active int64  // the clientConn's last read (Server.cl.tick), for the idle timeout
	est    int32  // replyEst in KiB, rounded up; -1 none yet
	gen    uint32 // odd: parked; bumped on every park and take
}

// parkPage holds the records of 1,024 consecutive descriptors, allocated
// when one of them first parks: the table grows with the largest parked
// descriptor, never by doubling.
type parkPage [parkPageLen]parkRec

const parkPageLen = 1024

// rec returns fd's record, allocating its page; p.mu is held.
func (p *parker) rec(fd int) *parkRec {
	i := fd / parkPageLen
	for len(p.pages) <= i {
		p.pages = append(p.pages, nil)
	}
	if p.pages[i] == nil {
		p.pages[i] = new(parkPage)
	}
	return &p.pages[i][fd%parkPageLen]
}

// epollOneShot is EPOLLONESHOT (syscall spells it as a negative int).
const epollOneShot = 1 << 30

// park turns cc, whose reader calls it with nothing buffered, into a
// parked descriptor and reports true (the reader returns; cc is dropped),
// or reports false when cc cannot park (it keeps reading).
func (p *parker) park(cc *clientConn) bool {
	fd := cc.dupFD()
	if fd < 0 {
		return false
	}
	s := cc.s
	s.mu.Lock()
	if s.closed || cc.stopped.Load() || !cc.quiet() {
		s.mu.Unlock()
		_ = syscall.Close(fd)
		return false
	}
	delete(s.conns, cc) // no sweep or Shutdown reaches cc from here on
	s.mu.Unlock()
	cc.rd.releaseBuf()
	cc.dropQueue()
	est := cc.replyEst.Load()
	if est > 0 {
		est = min((est+1023)>>10, 1<<30)
	}
	_ = cc.nc.Close() // the runtime's descriptor; fd keeps the socket
	s.st.parked.Add(1)
	p.mu.Lock()
	if p.closed || (p.epfd == 0 && !p.start()) {
		p.mu.Unlock()
		s.parkedGone(fd)
		return true
	}
	r := p.rec(fd)
	r.gen++
	r.active, r.est = cc.active.Load(), int32(est)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollOneShot,
		Fd: int32(fd), Pad: int32(r.gen)}
	err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev)
	if err != nil {
		r.gen++
	}
	rec := *r
	p.mu.Unlock()
	if err != nil {
		p.wake(fd, syscall.EPOLLIN, rec) // serve it again at once
	}
	return true
}

// dupFD returns a close-on-exec duplicate of cc's socket, or -1.
func (cc *clientConn) dupFD() int {
	sc, ok := cc.nc.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	dup := -1
	if err := rc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		if e == 0 {
			dup = int(r)
		}
	}); err != nil && dup >= 0 {
		_ = syscall.Close(dup)
		dup = -1
	}
	return dup
}

// start creates the epoll instance and its loop; p.mu is held.
func (p *parker) start() bool {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return false
	}
	var pipe [2]int
	if err := syscall.Pipe2(pipe[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = syscall.Close(epfd)
		return false
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: -1} // the stop pipe
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, pipe[0], &ev); err != nil {
		_ = syscall.Close(epfd)
		_ = syscall.Close(pipe[0])
		_ = syscall.Close(pipe[1])
		return false
	}
	// The loop waits for the epoll instance in the runtime's poller (an
	// epoll descriptor is itself readable when it has events), never in
	// a blocking epoll_wait: a goroutine blocked in a system call keeps
	// its P until sysmon takes it back, up to 10 ms later when the
	// process has been idle, and under GOMAXPROCS 1 (mcproxy's default at
	// low load) every other goroutine would wait that long.
	ef, rc := pollableEpoll(epfd)
	if rc == nil {
		_ = syscall.Close(pipe[0])
		_ = syscall.Close(pipe[1])
		return false
	}
	p.epfd, p.wakeW = epfd, pipe[1]
	p.spare = openSpare()
	p.done = make(chan struct{})
	go p.loop(epfd, ef, rc, pipe[0])
	return true
}

// pollableEpoll wraps the epoll descriptor epfd in an os.File served by
// the runtime's poller and returns it with its RawConn, or closes epfd
// and returns nil, nil when it cannot.
func pollableEpoll(epfd int) (*os.File, syscall.RawConn) {
	if syscall.SetNonblock(epfd, true) != nil {
		_ = syscall.Close(epfd)
		return nil, nil
	}
	ef := os.NewFile(uintptr(epfd), "mcproxy-park-epoll")
	rc, err := ef.SyscallConn()
	if err != nil {
		_ = ef.Close() // the File owns epfd now
		return nil, nil
	}
	return ef, rc
}

// loop wakes the connections epoll reports until close; it closes ef
// (the epoll instance epfd: not ef.Fd(), which would make it blocking)
// and wakeR when it returns.
func (p *parker) loop(epfd int, ef *os.File, rc syscall.RawConn, wakeR int) {
	defer close(p.done)
	defer syscall.Close(wakeR)
	defer ef.Close()
	events := make([]syscall.EpollEvent, 256)
	for {
		var n int
		var err error
		rerr := rc.Read(func(fd uintptr) bool {
			for {
				n, err = syscall.EpollWait(int(fd), events, 0)
				if err != syscall.EINTR {
					return err != nil || n > 0
				}
			}
		})
		if rerr != nil || err != nil {
			return
		}
		for _, ev := range events[:n] {
			if ev.Fd < 0 {
				return
			}
			if r, ok := p.take(int(ev.Fd), uint32(ev.Pad)); ok {
				_ = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_DEL, int(ev.Fd), nil)
				p.wake(int(ev.Fd), ev.Events, r)
			}
		}
	}
}

// take clears fd's parked record if its generation is gen and returns
// it: the caller owns fd.
func (p *parker) take(fd int, gen uint32) (parkRec, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fd/parkPageLen >= len(p.pages) || p.pages[fd/parkPageLen] == nil {
		return parkRec{}, false
	}
	r := p.rec(fd)
	if r.gen != gen || gen%2 == 0 {
		return parkRec{}, false
	}
	r.gen++
	return *r, true
}

// wake serves fd, just taken off epoll with events, again: a client that
// hung up with nothing unread is closed, any other gets a new clientConn
// and reader.
func (p *parker) wake(fd int, events uint32, r parkRec) {
	s := p.s
	if events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 && hungUp(fd) {
		s.parkedGone(fd)
		return
	}
	nc, err := p.fileConn(fd)
	s.st.parked.Add(-1)
	if err != nil {
		s.connGone()
		return
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	cc := newClientConn(s, nc)
	if r.est > 0 {
		cc.replyEst.Store(int64(r.est) << 10)
	} else {
		cc.replyEst.Store(int64(r.est))
	}
	cc.active.Store(s.cl.tick.Load())
	cc.resumed = true
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		s.connGone()
		return
	}
	s.conns[cc] = struct{}{}
	s.mu.Unlock()
	go cc.readLoop()
}

// fileConn returns a net.Conn for fd and closes fd. net.FileConn needs a
// descriptor of its own (a duplicate, in the runtime's poller): when the
// process has none left (a connection flood at RLIMIT_NOFILE), the spare
// one is given up for it and taken again after, so a parked client that
// sends is served, not dropped.
func (p *parker) fileConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "client")
	defer f.Close()
	nc, err := net.FileConn(f)
	if err == nil || !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
		return nc, err
	}
	p.spareMu.Lock()
	defer p.spareMu.Unlock()
	if p.spare < 0 {
		p.spare = openSpare()
		return nil, err
	}
	_ = syscall.Close(p.spare)
	nc, err = net.FileConn(f)
	p.spare = openSpare()
	return nc, err
}

// openSpare opens the spare descriptor (fileConn), or returns -1.
func openSpare() int {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// hungUp reports whether the client on fd has closed with nothing left
// to read (a peek reads end of stream, or the socket failed).
func hungUp(fd int) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n == 0 && err == nil || err != nil && err != syscall.EAGAIN && err != syscall.EINTR
}

// expire closes the parked connections whose last read is older than
// cutoff (a Server.cl.tick value); it returns how many. Sweeper only.
func (p *parker) expire(cutoff int64) int {
	var fds []int
	p.mu.Lock()
	for i, pg := range p.pages {
		if pg == nil {
			continue
		}
		for j := range pg {
			if r := &pg[j]; r.gen%2 == 1 && r.active < cutoff {
				r.gen++
				fds = append(fds, i*parkPageLen+j)
			}
		}
	}
	p.mu.Unlock()
	s := p.s
	for _, fd := range fds {
		s.parkedGone(fd) // closing the only descriptor leaves epoll too
	}
	return len(fds)
}

// close closes every parked connection and stops the loop; nothing parks
// afterwards.
func (p *parker) close() {
	p.mu.Lock()
	p.closed = true
	started := p.epfd != 0
	p.mu.Unlock()
	if !started {
		return
	}
	_, _ = syscall.Write(p.wakeW, []byte{0})
	<-p.done
	_ = syscall.Close(p.wakeW)
	p.expire(1<<63 - 1)
	p.spareMu.Lock()
	if p.spare >= 0 {
		_ = syscall.Close(p.spare)
		p.spare = -1
	}
	p.spareMu.Unlock()
}

// parkedGone closes a parked descriptor its caller owns and ends the
// connection's bookkeeping.
func (s *Server) parkedGone(fd int) {
	_ = syscall.Close(fd)
	s.st.parked.Add(-1)
	s.connGone()
}

// parkSupported: idle connections park (see parker).
const parkSupported = true

package proxy

import (
	"sync"
	"syscall"
)

// parker holds idle client connections with no goroutine: a connection
// whose reader the sweeper found idle (nothing partial, nothing queued)
// is registered in one epoll instance of the Server's own (beside the
// runtime's poller, which keeps its own registration) and its reader
// returns; the parker's goroutine runs the reader again when the socket
// is readable or hung up (EPOLLIN, EPOLLRDHUP, EPOLLHUP, one shot), and
// stopReading resumes it at once. An idle connection then costs its
// socket and its clientConn, no stack and no read buffer.
//
// A parked connection is registered under its id (epoll data), not its
// descriptor, and is deregistered before its reader runs again, so the
// descriptor is never closed while registered.
type parker struct {
	mu     sync.Mutex
	epfd   int // 0: not started
	wakeW  int // write end of the pipe that stops the loop
	conns  map[uint64]*clientConn
	closed bool
	done   chan struct{} // closed when the loop returns
}

// park registers cc, whose reader is about to return; it reports false
// when the connection cannot be parked (it keeps reading then).
func (p *parker) park(cc *clientConn) bool {
	if cc.fd < 0 && !cc.lookupFD() {
		return false
	}
	cc.rd.releaseBuf() // before the loop can run the reader again
	cc.dropQueue()
	p.mu.Lock()
	if p.closed || (p.epfd == 0 && !p.start()) {
		p.mu.Unlock()
		return false
	}
	p.conns[cc.id] = cc
	cc.parked.Store(true)
	cc.s.st.parked.Add(1)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollOneShot,
		Fd: int32(uint32(cc.id)), Pad: int32(uint32(cc.id >> 32))}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, cc.fd, &ev); err != nil {
		delete(p.conns, cc.id)
		cc.parked.Store(false)
		cc.s.st.parked.Add(-1)
		p.mu.Unlock()
		return false
	}
	p.mu.Unlock()
	if cc.stopped.Load() && p.unpark(cc) {
		// stopReading ran before it could see cc parked: keep reading.
		cc.s.st.parked.Add(-1)
		return false
	}
	return true
}

// epollOneShot is EPOLLONESHOT (syscall spells it as a negative int).
const epollOneShot = 1 << 30

// lookupFD records cc's socket descriptor.
func (cc *clientConn) lookupFD() bool {
	sc, ok := cc.nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	if err := rc.Control(func(fd uintptr) { cc.fd = int(fd) }); err != nil {
		cc.fd = -1
	}
	return cc.fd >= 0
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
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN} // id 0: stop
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, pipe[0], &ev); err != nil {
		_ = syscall.Close(epfd)
		_ = syscall.Close(pipe[0])
		_ = syscall.Close(pipe[1])
		return false
	}
	p.epfd, p.wakeW = epfd, pipe[1]
	p.conns = make(map[uint64]*clientConn)
	p.done = make(chan struct{})
	go p.loop(epfd, pipe[0])
	return true
}

// loop resumes the connections epoll reports until close.
func (p *parker) loop(epfd, wakeR int) {
	defer close(p.done)
	defer syscall.Close(wakeR)
	defer syscall.Close(epfd)
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				return
			}
			p.mu.Lock()
			cc := p.conns[id]
			p.mu.Unlock()
			if cc != nil {
				p.resume(cc)
			}
		}
	}
}

// unpark deregisters cc; it reports whether cc was parked (the caller
// then owns its reader).
func (p *parker) unpark(cc *clientConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[cc.id] != cc {
		return false
	}
	delete(p.conns, cc.id)
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, cc.fd, nil)
	cc.parked.Store(false)
	return true
}

// resume runs cc's reader again if it is parked.
func (p *parker) resume(cc *clientConn) {
	if !cc.parked.Load() || !p.unpark(cc) {
		return
	}
	cc.s.st.parked.Add(-1)
	go cc.readLoop()
}

// close resumes every parked connection and stops the loop; nothing
// parks afterwards.
func (p *parker) close() {
	p.mu.Lock()
	p.closed = true
	started := p.epfd != 0
	var ccs []*clientConn
	for _, cc := range p.conns {
		ccs = append(ccs, cc)
	}
	p.mu.Unlock()
	for _, cc := range ccs {
		p.resume(cc)
	}
	if !started {
		return
	}
	_, _ = syscall.Write(p.wakeW, []byte{0})
	<-p.done
	_ = syscall.Close(p.wakeW)
}

// parkSupported: idle connections park (see parker).
const parkSupported = true

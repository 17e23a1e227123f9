package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/proxy/fastconn"
	"github.com/poplimit/poplimit/proxy/protocol"
)

// PoolConfig configures a Pool of connections to one memcached. Zero means
// default.
type PoolConfig struct {
	// Addr is the memcached's "host:port" (required).
	Addr string
	// Connections is the number of pipelined connections (Twemproxy's
	// server_connections); default 1.
	Connections int
	// Timeout bounds every request, from its arrival at the proxy to its
	// reply, and every connect and write (Twemproxy's timeout); default 1s.
	Timeout time.Duration
	// QueueLen is kept for compatibility and ignored: requests wait in a
	// connection's write buffer while a write is in progress, bounded by
	// the clients' pipelines (ServerConfig.MaxPipeline).
	QueueLen int
	// OnFailure, when set, is called once per I/O failure of the shard (a
	// failed connect, a broken or timed-out connection), and OnRecover once
	// per first success after failures. They feed shard.Health.
	OnFailure func(now time.Time, err error)
	OnRecover func(now time.Time)
}

func (c PoolConfig) connections() int {
	if c.Connections > 0 {
		return c.Connections
	}
	return 1
}

func (c PoolConfig) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return time.Second
}

const (
	readBufSize = 64 << 10 // a connection's reply buffer (grows for large values)
	maxSpareBuf = 256 << 10
	maxYields   = 4 // times a woken writer yields while requests keep coming
)

// Pool is a Backend for one memcached: a few pipelined connections.
//
// Do appends the request's wire form to its connection's write buffer
// under a mutex and wakes the connection's writer goroutine only when it
// sleeps; the writer writes everything accumulated with one syscall, so
// requests of many clients share a write. When the writer sleeps, nothing
// is in flight and the last write carried one request (low load: nothing
// to batch), Do writes on the caller's goroutine instead, saving the
// writer's wake-up. Each live connection has one
// reader goroutine that parses replies in bulk from a large buffer and
// finishes the pending calls in FIFO order, with no channel operation per
// request. Connections are dialled lazily and redialled after a failure;
// when a connection fails, every request pending on it finishes with the
// error at once. Pool is safe for concurrent use.
type Pool struct {
	cfg     PoolConfig
	conns   []*poolConn
	closed  atomic.Bool
	wg      sync.WaitGroup // readers
	failing atomic.Bool
	warming atomic.Int32 // Warm calls running: their failures are not reported
}

var (
	_ Backend = (*Pool)(nil)
	_ Prober  = (*Pool)(nil)
)

// NewPool returns a Pool for cfg.Addr; it does not connect yet.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.Addr == "" {
		return nil, errors.New("proxy: pool needs an address")
	}
	p := &Pool{cfg: cfg}
	p.conns = make([]*poolConn, cfg.connections())
	for i := range p.conns {
		pc := &poolConn{p: p, kick: make(chan struct{}, 1)}
		p.conns[i] = pc
		p.wg.Add(1)
		go pc.run()
	}
	return p, nil
}

// Addr returns the shard's address.
func (p *Pool) Addr() string { return p.cfg.Addr }

// Do appends c to connection c.Conn mod Connections' write buffer and
// wakes that connection's writer if it sleeps, or writes it itself (see
// writeFromCaller); it blocks only for that write, while the socket is
// full, and no longer than the pool's timeout (the write deadline).
func (p *Pool) Do(c *Call) {
	if c.Start.IsZero() {
		c.Start = time.Now()
	}
	pc := p.conns[c.Conn%uint64(len(p.conns))]
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		c.Finish(ErrBackendClosed)
		return
	}
	n := len(pc.wbuf)
	pc.wbuf = c.Req.AppendWire(pc.wbuf)
	c.wire = len(pc.wbuf) - n
	pc.queued = append(pc.queued, c)
	wake := pc.idle
	pc.idle = false
	if s := pc.sess; wake && pc.quiet() && s != nil && !s.broken.Load() && s.sock.Raw() {
		pc.writeFromCaller(s) // unlocks
		return
	}
	pc.mu.Unlock()
	if wake {
		pc.kick <- struct{}{}
	}
}

// quiet reports whether nothing is in flight on the connection (every call
// pushed has finished) and its last write carried one call: low load,
// where a write from the caller saves a wake-up and loses no batching.
// pc.mu is held.
func (pc *poolConn) quiet() bool {
	return pc.lastBatch <= 1 && pc.sentCalls.Load() == pc.doneCalls.Load()
}

// writeFromCaller writes the queued requests on the caller's goroutine
// (a client's reader) with one non-blocking write: the writer sleeps, the
// connection is quiet (no batching to lose) and the session is live, so
// waking the writer would only add a goroutine hand-off (a
// thread wake-up at low load) to the request. The caller holds pc.mu and
// has cleared pc.idle, which makes it the connection's only writer until
// it gives the role back: to the sleeping writer (idle again), or by
// kicking it when requests queued meanwhile, the socket did not take the
// whole write (the writer finishes it, carry, blocking as usual) or the
// pool closed. It unlocks pc.mu.
func (pc *poolConn) writeFromCaller(s *session) {
	buf, calls := pc.wbuf, pc.queued
	pc.wbuf, pc.queued = pc.spareBuf[:0], pc.spareCalls[:0]
	pc.mu.Unlock()
	var rest []byte
	if s.push(calls, len(buf)) {
		pc.writeDeadline(s) // a past one fails even a non-blocking write
		n, err := s.sock.TryWrite(buf)
		if err != nil {
			pc.broke(s, err)
		} else if n < len(buf) {
			rest = slices.Clone(buf[n:])
		}
	}
	pc.recycle(buf, calls)
	if len(rest) > 0 {
		pc.wbuf = append(append(make([]byte, 0, len(rest)+len(pc.wbuf)), rest...), pc.wbuf...)
		pc.carry = len(rest)
	}
	kick := len(pc.queued) > 0 || pc.carry > 0 || pc.closed
	pc.idle = !kick
	pc.mu.Unlock()
	if kick {
		pc.kick <- struct{}{}
	}
}

// send pushes calls to s and writes buf, blocking while the socket is
// full (by the write deadline); buf starts with pushed bytes whose calls
// were pushed already (a carry). A failed write breaks the session. The
// caller holds the writer's role.
func (pc *poolConn) send(s *session, buf []byte, calls []*Call, pushed int) {
	if !s.push(calls, len(buf)-pushed) {
		return
	}
	pc.writeDeadline(s)
	if _, err := s.sock.Write(buf); err != nil {
		pc.broke(s, err)
	}
}

// writeDeadline moves s's write deadline to the pool timeout from now,
// unless the one set is less than a quarter of it older (one syscall
// saved per write). The caller holds the writer's role.
func (pc *poolConn) writeDeadline(s *session) {
	if dl := time.Now().Add(s.timeout); dl.Sub(pc.wdeadline) > s.timeout/4 {
		_ = s.nc.SetWriteDeadline(dl)
		pc.wdeadline = dl
	}
}

// broke breaks s after a failed write.
func (pc *poolConn) broke(s *session, err error) {
	err = fmt.Errorf("write %s: %w", pc.p.cfg.Addr, err)
	if s.setErr(err) {
		pc.p.fail(err)
	}
}

// Close closes every connection; pending calls finish with
// ErrBackendClosed.
func (p *Pool) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	for _, pc := range p.conns {
		pc.mu.Lock()
		pc.closed = true
		s := pc.sess
		wake := pc.idle
		pc.idle = false
		pc.mu.Unlock()
		if wake {
			pc.kick <- struct{}{}
		}
		if s != nil {
			s.setErr(ErrBackendClosed)
		}
	}
	p.wg.Wait()
	return nil
}

// Probe dials a new connection and checks that the shard answers
// "version"; ctx's deadline, or the pool timeout, bounds it.
func (p *Pool) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.timeout())
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", p.cfg.Addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if _, err := nc.Write([]byte("version\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(nc).ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("VERSION ")) {
		return fmt.Errorf("%w: %q", protocol.ErrBadReply, line)
	}
	return nil
}

func (p *Pool) fail(err error) {
	p.failing.Store(true)
	if p.cfg.OnFailure != nil && p.warming.Load() == 0 {
		p.cfg.OnFailure(time.Now(), err)
	}
}

func (p *Pool) ok() {
	if p.failing.Load() && p.failing.CompareAndSwap(true, false) && p.cfg.OnRecover != nil {
		p.cfg.OnRecover(time.Now())
	}
}

// poolConn is one pipelined connection slot: the write buffer, the
// current session, and whether its writer sleeps.
type poolConn struct {
	p *Pool

	mu     sync.Mutex
	wbuf   []byte  // wire form of queued
	queued []*Call // appended, not yet written
	idle   bool    // the writer waits for kick
	kick   chan struct{}
	closed bool
	sess   *session // live or broken; nil before the first dial

	// dialing, dialingBytes: the batch the writer took from queued and
	// holds while it connects (still queued, for Pool.Stats).
	dialing, dialingBytes int

	spareBuf   []byte // the other write buffer (under mu)
	spareCalls []*Call
	wdeadline  time.Time // last write deadline set (by the writer's role holder)
	// carry is the head of wbuf that writeFromCaller pushed and the
	// socket did not take: the writer writes it first (under mu).
	carry int
	// lastBatch is the number of calls of the last write (under mu):
	// more than one means requests arrive together, and the writer's
	// batching (one write for many clients) is worth its wake-up.
	lastBatch int

	// Counted once per batch of calls pushed to a session (under its
	// mutex, so before the reader can see them), and once per batch of
	// replies (or of calls failed) by the sessions' readers.
	_             [64]byte      // off the cache line of mu
	sentCalls     atomic.Uint64 // calls pushed to a session
	sentBytes     atomic.Uint64 // their wire bytes (request_bytes)
	_             [48]byte      // writer and reader apart
	doneCalls     atomic.Uint64 // calls pushed and then finished
	doneBytes     atomic.Uint64 // their wire bytes
	responseBytes atomic.Uint64
	eof           atomic.Uint64 // sessions the shard closed (EOF on read)
}

// run is the connection's writer: it sleeps until requests are queued,
// then writes everything queued with one syscall per batch, dialling
// first if needed.
func (pc *poolConn) run() {
	p := pc.p
	defer p.wg.Done()
	pc.mu.Lock()
	for {
		for len(pc.queued) == 0 && pc.carry == 0 && !pc.closed {
			pc.idle = true
			pc.mu.Unlock()
			<-pc.kick
			// Let the other runnable goroutines (client readers with
			// requests parsed) queue theirs first, as long as they do:
			// one write then carries the requests of many clients.
			n := 0
			for range maxYields {
				runtime.Gosched()
				pc.mu.Lock()
				m := len(pc.queued)
				pc.mu.Unlock()
				if m == n {
					break
				}
				n = m
			}
			pc.mu.Lock()
		}
		if pc.closed {
			queued := pc.queued
			pc.queued = nil
			pc.mu.Unlock()
			for _, c := range queued {
				c.Finish(ErrBackendClosed)
			}
			return
		}
		buf, calls, carry := pc.wbuf, pc.queued, pc.carry
		pc.wbuf, pc.queued, pc.carry = pc.spareBuf[:0], pc.spareCalls[:0], 0
		s := pc.sess
		redial := s == nil || s.broken.Load()
		wire := buf
		if redial {
			// A carry belongs to the broken session, whose reader
			// fails its calls: not for the new one.
			wire, carry = buf[carry:], 0
			pc.dialing, pc.dialingBytes = len(calls), len(wire)
		}
		pc.mu.Unlock()

		if redial {
			var err error
			if s, err = pc.dial(); err != nil {
				pc.mu.Lock()
				pc.dialing, pc.dialingBytes = 0, 0 // out of in_queue before their callers hear
				pc.mu.Unlock()
				for _, c := range calls {
					c.Finish(err)
				}
				pc.recycle(buf, calls)
				continue
			}
		}
		pc.send(s, wire, calls, carry)
		pc.recycle(buf, calls)
	}
}

// recycle keeps the written batch's storage for the next one and takes
// pc.mu again.
func (pc *poolConn) recycle(buf []byte, calls []*Call) {
	n := len(calls)
	clear(calls)
	if cap(buf) > maxSpareBuf {
		buf = nil
	}
	pc.mu.Lock()
	pc.spareBuf, pc.spareCalls = buf[:0], calls[:0]
	pc.dialing, pc.dialingBytes = 0, 0
	pc.lastBatch = n
}

// dial connects a new session and starts its reader; the caller is the
// writer. It fails with ErrBackendClosed when the pool closed meanwhile.
func (pc *poolConn) dial() (*session, error) {
	p := pc.p
	d := net.Dialer{Timeout: p.cfg.timeout()}
	nc, err := d.Dial("tcp", p.cfg.Addr)
	if err != nil {
		err = fmt.Errorf("connect %s: %w", p.cfg.Addr, err)
		p.fail(err)
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	s := &session{nc: nc, sock: fastconn.New(nc), timeout: p.cfg.timeout(), p: p, pc: pc}
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		_ = nc.Close()
		return nil, ErrBackendClosed
	}
	pc.sess = s
	pc.wdeadline = time.Time{}
	pc.dialing, pc.dialingBytes = 0, 0 // pushed next
	p.wg.Add(1)
	pc.mu.Unlock()
	go s.read()
	return s, nil
}

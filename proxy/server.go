package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/proxy/fastconn"
	"github.com/poplimit/poplimit/proxy/memrelease"
	"github.com/poplimit/poplimit/proxy/protocol"
)

// DefaultVersion is what "version" answers by default.
const DefaultVersion = "1.6.18-mcproxy"

// ServerConfig configures NewServer. Zero means default.
type ServerConfig struct {
	// Router routes keys to shards (required). The Server does not close it.
	Router *Router
	// Limits bounds lines and values (memcached's defaults).
	Limits protocol.Limits
	// Version is the "VERSION <Version>" reply; default DefaultVersion.
	Version string
	// MaxPipeline is the number of requests of one client in flight at
	// once; reading pauses beyond it. Default 1024.
	MaxPipeline int
	// Logger receives connection-level events; default slog.Default().
	// Nothing is logged per request.
	Logger *slog.Logger
	// Now is the clock for request start times; default time.Now.
	Now func() time.Time
	// MaxClients bounds concurrent client connections (Twemproxy's
	// client_connections); a client beyond it is answered
	// "SERVER_ERROR too many client connections" and closed. Zero means
	// no limit. SetClientLimits changes it on a running Server.
	MaxClients int
	// ClientIdleTimeout stops reading from a client that has sent nothing
	// for this long (checked every quarter of it) and closes the
	// connection once the replies already due are written; zero means
	// never.
	ClientIdleTimeout time.Duration
	// RequestTimeout closes a client whose request (command line or
	// data block) is not complete this long after its first byte arrived
	// (slow clients, slowloris): reading stops and the replies already
	// due are written, as for the idle timeout. Checked by the idle
	// sweeper, so it acts within a quarter of it (at most 1 s) late.
	// Zero means DefaultRequestTimeout; negative means never.
	RequestTimeout time.Duration
	// MaxClientBytes bounds the bytes of large requests and replies (at
	// least bigRequest bytes, e.g. a 1 MiB set, or a get of a 1 MiB
	// value) one client has in flight or not yet taken: reading from the
	// client pauses while they exceed it, until replies are answered and
	// written. Small ones are bounded by MaxPipeline alone. Default 16 MiB.
	MaxClientBytes int64
	// ParkAfter is how long a client must have sent nothing before its
	// connection parks (Linux): it is kept as a bare descriptor in the
	// server's epoll set, with no goroutine, buffer or queue, and its next
	// request first resumes it (about a dozen system calls and a new
	// connection state). A client parks after ParkAfter to ParkAfter +
	// 100 ms of silence, or after 50–100 ms while at least 256 clients
	// are idle or parked (a fleet's pools, a flood: memory first). Zero
	// means DefaultParkAfter; negative means never.
	ParkAfter time.Duration
}

// DefaultParkAfter is ServerConfig.ParkAfter's default. Parking exists
// for the many connections that stay idle (a fleet's pools, a flood:
// those park at once, see parkEagerAt), not for a few clients' pauses
// between bursts, which would pay a resume on every return (bench/RESULTS.md,
// "Figures behind code defaults").
const DefaultParkAfter = time.Second

func (c ServerConfig) parkAfter() time.Duration { return orDefault(c.ParkAfter, DefaultParkAfter) }

// DefaultRequestTimeout is ServerConfig.RequestTimeout's default.
const DefaultRequestTimeout = 10 * time.Second

func (c ServerConfig) requestTimeout() time.Duration {
	return orDefault(c.RequestTimeout, DefaultRequestTimeout)
}

// orDefault reads a duration setting whose zero means def and whose
// negative means never (0, off).
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d == 0:
		return def
	}
	return d
}

// bigRequest is the size from which a request counts against
// MaxClientBytes; smaller ones skip the accounting (hot path).
const bigRequest = 64 << 10

func (c ServerConfig) maxClientBytes() int64 {
	if c.MaxClientBytes > 0 {
		return c.MaxClientBytes
	}
	return 16 << 20
}

func (c ServerConfig) maxPipeline() int {
	if c.MaxPipeline > 0 {
		return c.MaxPipeline
	}
	return 1024
}

// Server serves the memcached text protocol to clients, forwarding through
// a Router. Each client connection has a reader goroutine that parses
// pipelined requests and dispatches them to backends without waiting.
// Replies go out in request order: on TCP and Unix sockets, whoever
// completes a request (a backend's reader) answers the ready ones with a
// non-blocking write, and the connection's writer goroutine only finishes
// writes a slow client could not take; on other connections the writer
// answers everything (see clientio.go). Server is safe for concurrent use.
type Server struct {
	cfg     ServerConfig
	router  atomic.Pointer[Router] // swapped by SetRouter (reload)
	log     *slog.Logger
	now     func() time.Time
	version []byte
	started time.Time

	mu     sync.Mutex
	lns    map[net.Listener]struct{}
	conns  map[*clientConn]struct{}
	closed bool
	wg     sync.WaitGroup
	nextID atomic.Uint64

	st  serverStats
	cl  clientLimits
	acc acceptStats

	park   parker              // idle connections with no goroutine (Linux)
	queues sync.Pool           // request queues of parked connections (getQueue)
	mem    memrelease.Releaser // returns idle clients' memory to the OS (sweeper)
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("proxy: server closed")

// NewServer returns a Server; call Serve with a listener.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Router == nil {
		return nil, errors.New("proxy: server needs a router")
	}
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger,
		now:   cfg.Now,
		lns:   make(map[net.Listener]struct{}),
		conns: make(map[*clientConn]struct{}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	v := cfg.Version
	if v == "" {
		v = DefaultVersion
	}
	s.version = []byte("VERSION " + v + "\r\n")
	s.started = s.now()
	s.router.Store(cfg.Router)
	s.park.s = s
	s.SetClientLimits(cfg.MaxClients, cfg.ClientIdleTimeout)
	s.cl.request.Store(int64(cfg.requestTimeout()))
	if parkSupported {
		s.cl.park = int64(cfg.parkAfter())
	}
	return s, nil
}

// Serve accepts clients on ln until ln fails or Shutdown is called; it
// returns ErrServerClosed after Shutdown. A temporary accept failure (out
// of file descriptors: EMFILE, ENFILE; ENOBUFS, ENOMEM, a timeout) is not
// a listener failure: Serve waits 5 ms, doubling to 1 s while it lasts,
// and accepts again, counting it (mcproxy_accept_errors_total) and
// logging at most once a second.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			reason, temporary := acceptReason(err)
			if !temporary {
				return err
			}
			// Out of descriptors or memory: keep serving the clients we
			// have, and accept again once some close.
			backoff = nextAcceptBackoff(backoff)
			if log, suppressed := s.acc.acceptFailed(reason, time.Now()); log {
				s.log.Warn("mcproxy: accept failed, backing off", "err", err, "reason", acceptReasons[reason],
					"backoff", backoff, "suppressed", suppressed)
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		if s.overClientLimit(nc) {
			continue
		}
		cc := newClientConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return ErrServerClosed
		}
		s.startIdleSweeper()
		cc.active.Store(s.cl.tick.Load())
		s.conns[cc] = struct{}{}
		s.wg.Add(1) // the connection's whole life, parked or not
		if !cc.sock.Raw() {
			s.wg.Add(1)
		}
		s.mu.Unlock()
		s.st.currConns.Add(1)
		s.st.totalConns.Add(1)
		go cc.readLoop()
		if !cc.sock.Raw() {
			go cc.writeLoop()
		}
	}
}

// newClientConn returns the state of a client connection just accepted.
func newClientConn(s *Server, nc net.Conn) *clientConn {
	cc := &clientConn{
		s:    s,
		nc:   nc,
		id:   s.nextID.Add(1),
		wake: make(chan struct{}, 1),
		room: make(chan struct{}, 1),
		quit: make(chan struct{}),
		sock: fastconn.New(nc),
	}
	if cc.sock.Raw() {
		cc.entries = make(chan *entry, min(firstQueue, s.cfg.maxPipeline()))
	} else {
		cc.entries = s.getQueue() // writeLoop reads it without out.mu: never grown
	}
	cc.replyEst.Store(-1)
	rd := &cc.rd
	rd.cc = cc
	rd.fillFn, rd.consumeFn = rd.fill, rd.consume // bound once
	return cc
}

// firstQueue is the request queue (clientConn.entries) a connection with
// a raw socket starts with: a client that pipelines more gets a queue of
// MaxPipeline slots (growQueue), so one that does not (most, and the
// many of a connection flood) holds 16 slots, not 8 KB.
const firstQueue = 16

// getQueue returns an empty request queue of MaxPipeline slots; a parked
// connection gives a queue of that size back (dropQueue).
func (s *Server) getQueue() chan *entry {
	if q, ok := s.queues.Get().(chan *entry); ok {
		return q
	}
	return make(chan *entry, s.cfg.maxPipeline())
}

// quiet reports whether cc has nothing queued, being answered or being
// written, and no budget held: it may park.
func (cc *clientConn) quiet() bool {
	o := &cc.out
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(cc.entries) == 0 && o.head == nil && !o.busy && !o.eof && !o.dead && len(o.buf) == 0 &&
		cc.held.Load() == 0
}

// dropQueue gives cc's queue back when nothing is queued or being
// answered; the reader is parking.
func (cc *clientConn) dropQueue() {
	o := &cc.out
	o.mu.Lock()
	if cap(cc.entries) == cc.s.cfg.maxPipeline() && len(cc.entries) == 0 && o.head == nil && !o.busy && !o.eof {
		cc.s.queues.Put(cc.entries)
		cc.entries = nil
	}
	o.mu.Unlock()
}

// queueFull reports whether the client's pipeline is full (queue then
// blocks); reader only.
func (cc *clientConn) queueFull() bool {
	return len(cc.entries) == cap(cc.entries) && cap(cc.entries) >= cc.s.cfg.maxPipeline()
}

// growQueue moves a full first queue's entries to one of MaxPipeline
// slots; reader only (the one sender), under out.mu (the writers'
// receive).
func (cc *clientConn) growQueue() {
	q := cc.s.getQueue()
	o := &cc.out
	o.mu.Lock()
	for len(cc.entries) > 0 {
		q <- <-cc.entries
	}
	cc.entries = q
	o.mu.Unlock()
}

// queueLen is len(cc.entries) for goroutines other than the reader.
func (cc *clientConn) queueLen() int {
	cc.out.mu.Lock()
	defer cc.out.mu.Unlock()
	return len(cc.entries)
}

// closed is the end of a connection's bookkeeping, once it is closed.
func (cc *clientConn) closed() {
	s := cc.s
	s.mu.Lock()
	delete(s.conns, cc)
	s.mu.Unlock()
	s.connGone()
}

// connGone ends the bookkeeping of a client connection (a clientConn's,
// or a parked descriptor's) once it is closed.
func (s *Server) connGone() {
	s.st.currConns.Add(-1)
	s.wg.Done()
}

// Shutdown stops accepting, stops reading from clients, lets the requests
// already read finish and be answered, then closes the connections. When
// ctx ends first, remaining connections are closed at once. It does not
// close the Router.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.stopIdleSweeper()
	for ln := range s.lns {
		_ = ln.Close()
	}
	for cc := range s.conns {
		cc.stopReading()
	}
	s.mu.Unlock()
	s.park.close() // closes the parked connections (none has a reply due)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for cc := range s.conns {
			_ = cc.nc.Close()
			// Writes fail from here on: answer what is ready to
			// nothing at once rather than on the next reply, so the
			// connection ends once its calls have finished.
			cc.answerNow()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// clientConn is one client: readLoop parses and dispatches; replies go
// out in order (clientio.go). An idle connection has no clientConn at
// all: it is parked as a bare descriptor (park_linux.go) until it is
// readable, then served by a new clientConn.
type clientConn struct {
	rd      clientReader // the reader's state
	parkReq atomic.Bool  // the sweeper asks the reader to park (read deadline)
	s       *Server
	nc      net.Conn
	id      uint64
	entries chan *entry    // in client order; send with queue; set by the reader under out.mu
	wake    chan struct{}  // wakes the writer (clientio.go)
	sock    *fastconn.Conn // nc with raw socket I/O
	out     clientOut      // with a raw socket: replies answered by whoever completes them
	stopped atomic.Bool
	active  atomic.Int64 // s.cl.tick at the last read (idle timeout)
	partial atomic.Int64 // s.cl.tick when an incomplete request began; 0: none (request timeout)
	// resumed: this connection was parked and sent again (set before its
	// reader starts, read by the sweeper): a client that comes back is
	// in use, so it parks after ParkAfter of silence only, never eagerly.
	resumed bool
	held    atomic.Int64 // bytes of big requests and replies not yet answered
	// replyEst is the largest big reply (value) a retrieval of this client
	// got, 0 when all were small, -1 before the first (see replyReserve).
	replyEst atomic.Int64
	perKey   int64         // the reservation per key of the request being dispatched (reader only)
	room     chan struct{} // wakes the reader once held drops to the budget
	quit     chan struct{} // closed by endWaits: the reader stops waiting for room
	quitOnce sync.Once
}

// release frees an answered entry and returns the bytes it holds of the
// client's budget: the caller gives them back (giveBack) once the reply
// is written, or at once.
func (cc *clientConn) release(e *entry) int64 {
	h := e.held
	e.held = 0
	for _, c := range e.calls {
		h += c.held // big replies
	}
	releaseEntry(e)
	return h
}

// giveBack returns h bytes to the client's budget, waking the reader when
// that makes room.
func (cc *clientConn) giveBack(h int64) {
	if h == 0 {
		return
	}
	budget := cc.s.cfg.maxClientBytes()
	if v := cc.held.Add(-h); v <= budget && v+h > budget {
		select {
		case cc.room <- struct{}{}:
		default:
		}
	}
}

// replyReserve is what a request reserves of the client's byte budget
// for its reply until it is answered: for each key of a retrieval (get,
// gets, gat, gats, mg), the largest big reply this client got so far, or
// the item size limit before its first retrieval reply. So pipelined gets
// of big values pause the reader once their replies could exceed
// MaxClientBytes, before the shards send them (a get is a few bytes, its
// reply up to the item size); a client whose values are all small
// reserves nothing after its first reply.
//
// The request's calls count a big reply against the budget only beyond
// what was reserved for their keys (Call.perKey), so a reply is not
// counted twice. replyReserve sets cc.perKey for the calls dispatch makes;
// the reader resets it after.
func (cc *clientConn) replyReserve(req *protocol.Request) int64 {
	cc.perKey = 0
	if !req.Cmd.IsRetrieval() && req.Cmd != protocol.CmdMg {
		return 0
	}
	est := cc.replyEst.Load()
	if est < 0 {
		est = int64(cc.s.cfg.Limits.ItemLimit())
	}
	cc.perKey = est
	return est * int64(len(req.Keys))
}

// waitRoom blocks the reader while the client's big requests in flight
// exceed the budget. Every crossing back under it leaves a token in room.
// It reports false when the connection stops meanwhile (stopReading, a
// failed write): the reader then stops.
func (cc *clientConn) waitRoom() bool {
	budget := cc.s.cfg.maxClientBytes()
	for cc.held.Load() > budget {
		select {
		case <-cc.room:
		case <-cc.quit:
			return false
		}
	}
	return true
}

// endWaits ends the reader's waitRoom for good (once).
func (cc *clientConn) endWaits() {
	cc.quitOnce.Do(func() { close(cc.quit) })
}

// askPark asks an idle reader to park its connection: the read deadline
// ends its wait, and it parks if still idle (serve). Nothing happens
// where parking is not supported.
func (cc *clientConn) askPark() {
	if !parkSupported || !cc.sock.Raw() || cc.queueLen() > 0 || cc.parkReq.Swap(true) {
		return
	}
	_ = cc.nc.SetReadDeadline(time.Now())
}

func (cc *clientConn) stopReading() {
	cc.stopped.Store(true)
	cc.endWaits()
	if tc, ok := cc.nc.(*net.TCPConn); ok {
		_ = tc.CloseRead()
	} else {
		_ = cc.nc.SetReadDeadline(time.Now())
	}
}

// writeLoop is the writer goroutine of a connection that exposes no
// socket: it answers every entry in order, then closes.
func (cc *clientConn) writeLoop() {
	s := cc.s
	defer cc.closed()
	bw := bufio.NewWriterSize(cc.nc, writeBufSize)
	broken := false
	flush := func() {
		if !broken && bw.Buffered() > 0 {
			if err := bw.Flush(); err != nil {
				broken = true
				_ = cc.nc.Close() // unblocks the reader
				cc.endWaits()
			}
		}
	}
	for {
		// Sleep on wake only (flushing first): the entry at the head is
		// answered when its calls have finished.
		var e *entry
		var ok bool
		select {
		case e, ok = <-cc.entries:
		default:
			flush()
			<-cc.wake
			continue
		}
		if !ok {
			break
		}
		for _, c := range e.calls {
			for !c.finished.Load() {
				flush()
				<-cc.wake
			}
		}
		s.respond(bw, e)
		cc.giveBack(cc.release(e)) // bw holds at most writeBufSize
		if broken {
			bw.Reset(io.Discard)
			continue
		}
		if bw.Buffered() >= writeBufSize {
			flush()
		}
	}
	if !broken {
		_ = bw.Flush()
	}
	_ = cc.nc.Close()
}

package proxy

import (
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/poplimit/poplimit/proxy/fastconn"
	"github.com/poplimit/poplimit/proxy/protocol"
)

// The client connection's reader (see server.go for the connection and
// clientio.go for the writer): it reads pipelined requests into one
// buffer, parses them (protocol.Parse) and dispatches them to the
// backends without waiting for replies, pausing when the pipeline or the
// byte budget is full; an idle connection parks without its goroutine.

const (
	clientBufSize = 16 << 10
	writeBufSize  = 32 << 10
)

// readLoop reads and dispatches requests until the client stops, then
// closes the connection once every reply due is written; or, asked to
// by the sweeper, it parks an idle connection and returns (the parker
// runs readLoop again when the client sends or hangs up).
func (cc *clientConn) readLoop() {
	if cc.serve() {
		return // parked
	}
	close(cc.entries)
	cc.rd.releaseBuf()
	if cc.sock.Raw() {
		cc.closeWhenAnswered()
		cc.closed()
		return
	}
	cc.signal()
	cc.s.wg.Done()
}

// serve is readLoop's loop; it reports true when the connection parked.
func (cc *clientConn) serve() (parked bool) {
	rd := &cc.rd
	next := stepRead
	for {
		switch next {
		case stepStop:
			return false
		case stepBlock:
			next = rd.parse(false)
			rd.markPartial()
		case stepRead:
			rd.next = stepRead
			err := cc.sock.ReadEachVia(cc.readCombiner, rd.fillFn, rd.consumeFn)
			if rd.next != stepRead {
				next = rd.next // consume stopped reading; err is nil
				continue
			}
			if err == nil {
				continue
			}
			if !cc.parkReq.Swap(false) || cc.stopped.Load() || !errors.Is(err, os.ErrDeadlineExceeded) {
				return false
			}
			// The sweeper's deadline: park when nothing is partial.
			_ = cc.nc.SetReadDeadline(time.Time{})
			if cc.stopped.Load() { // stopReading's deadline may be gone
				return false
			}
			if rd.r == rd.w && cc.s.park.park(cc) {
				return true
			}
		}
	}
}

// discard reads and drops n bytes from the client; it reports false when
// the connection failed or stopped meanwhile. The sweeper's request to
// park (a read deadline) only makes it go on reading.
func (cc *clientConn) discard(n int64) bool {
	for n > 0 {
		m, err := io.CopyN(io.Discard, cc.nc, n)
		n -= m
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded) && cc.parkReq.Swap(false) && !cc.stopped.Load():
			_ = cc.nc.SetReadDeadline(time.Time{})
			if cc.stopped.Load() { // stopReading's deadline may be gone
				return false
			}
		default:
			return false
		}
	}
	return true
}

// readStep is what the client reader does next.
type readStep int

const (
	stepRead  readStep = iota // the buffer holds no complete request
	stepBlock                 // the next request needs a step that may block
	stepStop                  // close after the replies already queued
)

// clientReader is readLoop's state: buf[r:w] holds bytes read and not
// yet dispatched.
type clientReader struct {
	cc   *clientConn
	buf  []byte
	r, w int
	need int // bytes the incomplete request at r needs, when known
	req  protocol.Request
	next readStep // consume's verdict
	// replies: a request dispatched since the last read answers the
	// client (not noreply or quiet), so a write to the client follows.
	replies bool

	fillFn    func() []byte
	consumeFn func(int) fastconn.ReadNext
}

// readBufs holds the read buffers of connections between arrivals: a
// reader that consumed everything it read gives its buffer back while it
// waits for the next request, so an idle connection holds none.
var readBufs = sync.Pool{New: func() any { return new([clientBufSize]byte) }}

// releaseBuf gives the read buffer back when it holds nothing.
func (rd *clientReader) releaseBuf() {
	if rd.r == rd.w && len(rd.buf) == clientBufSize {
		readBufs.Put((*[clientBufSize]byte)(rd.buf))
	}
	rd.buf, rd.r, rd.w = nil, 0, 0
	// The last request's keys and data point into the buffer: without
	// this a parked connection would keep it reachable (and a pooled
	// buffer aliased).
	clear(rd.req.Keys)
	rd.req.Keys, rd.req.Data = rd.req.Keys[:0], nil
}

// fill makes room after buf[r:w] for the next read (FastConn.ReadEach).
func (rd *clientReader) fill() []byte {
	if rd.buf == nil {
		rd.buf = readBufs.Get().(*[clientBufSize]byte)[:]
	}
	rd.buf, rd.w = protocol.Compact(rd.buf, rd.r, rd.w, rd.need)
	rd.r = 0
	return rd.buf[rd.w:]
}

// consume takes n more bytes and dispatches every complete request that
// can be without blocking (it runs inside ReadEach); it asks for more
// bytes while that is all the reader needs. It lets a short read wait for
// the next arrival only when a reply to these bytes is due: otherwise
// (a partial request, noreply, quiet meta) a close that came with them
// would go unnoticed (see fastconn.ReadShort).
func (rd *clientReader) consume(n int) fastconn.ReadNext {
	rd.cc.active.Store(rd.cc.s.cl.tick.Load())
	rd.w += n
	rd.replies = false
	rd.next = rd.parse(true)
	rd.markPartial()
	switch {
	case rd.next != stepRead:
		return fastconn.ReadStop
	case rd.replies:
		if rd.r == rd.w {
			// The wait for the next request holds no buffer: a client
			// idle between requests (or until it parks) holds none.
			rd.releaseBuf()
		}
		return fastconn.ReadShort
	}
	return fastconn.ReadDrain
}

// markPartial records when the buffer began to hold an incomplete
// request, for the request timeout (the sweeper closes the client).
func (rd *clientReader) markPartial() {
	cc := rd.cc
	switch {
	case rd.next != stepRead || rd.r == rd.w:
		cc.partial.Store(0)
	case cc.partial.Load() == 0:
		cc.partial.Store(cc.s.cl.tick.Load())
	}
}

// parse dispatches the complete requests in buf[r:w]. With nonBlocking it
// stops, before acting, at a request whose dispatch may block: a full
// pipeline, a big request (byte budget), or a too large value to swallow
// from the socket.
func (rd *clientReader) parse(nonBlocking bool) readStep {
	cc := rd.cc
	s := cc.s
	for {
		if rd.r == rd.w {
			rd.r, rd.w = 0, 0
			if len(rd.buf) > 4*clientBufSize {
				rd.buf = make([]byte, clientBufSize)
			}
		}
		full := cc.queueFull() // only this goroutine sends
		rd.need = 0
		n, err := protocol.Parse(rd.buf[rd.r:rd.w], s.cfg.Limits, &rd.req)
		switch {
		case err == nil:
			over := cc.held.Load() > s.cfg.maxClientBytes() // big replies waiting for the client
			if nonBlocking && (full || over || n >= bigRequest) {
				return stepBlock
			}
			if over && !cc.waitRoom() {
				return stepStop
			}
			rd.replies = rd.replies || !(rd.req.Noreply || rd.req.Quiet)
			held := cc.replyReserve(&rd.req)
			if n < bigRequest && held == 0 {
				cc.dispatch(&rd.req, rd.buf[rd.r:rd.w], n, 0)
				rd.r += n
				continue
			}
			if n >= bigRequest {
				held += int64(n)
			}
			cc.held.Add(held)
			cc.dispatch(&rd.req, rd.buf[rd.r:rd.w], n, held)
			cc.perKey = 0
			rd.r += n
			if !cc.waitRoom() {
				return stepStop
			}
			continue
		case err == protocol.ErrIncomplete:
			rd.need = n
			return stepRead
		}
		var re *protocol.ReplyError
		if errors.As(err, &re) {
			if nonBlocking && (full || n > rd.w-rd.r) {
				return stepBlock
			}
			s.st.protocolErrors.Add(1)
			cc.replyError(&rd.req, re)
			if n <= rd.w-rd.r {
				rd.r += n
				continue
			}
			// Swallow the rest of a too large value without buffering it.
			rest := int64(n - (rd.w - rd.r))
			rd.r, rd.w = 0, 0
			if !cc.discard(rest) {
				return stepStop
			}
			continue
		}
		// quit, line too long, binary protocol: close after the replies
		// already queued.
		if err != protocol.ErrQuit {
			s.st.protocolErrors.Add(1)
		}
		return stepStop
	}
}

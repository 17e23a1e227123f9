package proxy

import (
	"sync"
)

// The client connection's hot path, tuned for syscalls and goroutine
// wakeups per request (see server.go for the loops).
//
// When the connection exposes its socket (TCP, Unix), replies are written
// by whoever completes them: Call.Finish, running on a backend's reader
// goroutine (or the client's reader, for a local answer), takes the
// client's output lock, answers every entry at the head of the client's
// queue whose calls have all finished, and writes the bytes with one
// non-blocking write. Only when the socket is full (a slow client) is a
// writer goroutine started, to finish the write blocking while later
// replies accumulate behind it, bounded by maxOutBuffered; it exits once
// the output is written, so an idle connection has none.
// A request answered by a backend thus costs no wakeup of a client
// goroutine besides the reader's own.
//
// Otherwise the writer goroutine answers every entry, and sleeps on
// clientConn.wake: Call.Finish wakes it, and queue wakes it only for an
// entry that is ready now, so one wakeup per request, not two.

// maxOutBuffered is how many reply bytes are answered into the output
// buffer before it is written (more wait as entries; for a slow client,
// the reader stops once the pipeline or the byte budget is full).
const maxOutBuffered = 256 << 10

var _ answerer = (*clientConn)(nil)

// clientOut is a client connection's output state, under mu.
type clientOut struct {
	mu    sync.Mutex
	buf   []byte // answered, not yet written
	spare []byte
	head  *entry // taken from entries, not yet answered
	busy  bool   // the writer goroutine runs (writeDirect), writing buf blocking
	eof   bool   // entries is closed and drained
	dead  bool   // a write failed: replies are dropped
	// held is the budget bytes (clientConn.held) of the replies in buf:
	// given back once buf is written, so replies answered and not yet
	// taken by the client count against MaxClientBytes.
	held int64
}

// Write appends p (respond writes replies into the output buffer).
func (o *clientOut) Write(p []byte) (int, error) {
	o.buf = append(o.buf, p...)
	return len(p), nil
}

// queue hands e to the writer in order; it blocks while the client's
// pipeline is full. Every entry must reach the writer through queue.
func (cc *clientConn) queue(e *entry) {
	var calls [4]*Call
	n := copy(calls[:], e.calls)
	many := len(e.calls) > len(calls)
	if len(cc.entries) == cap(cc.entries) && cap(cc.entries) < cc.s.cfg.maxPipeline() {
		cc.growQueue()
	}
	cc.entries <- e
	// e may be answered and reused from here on; the copied Calls may
	// be reused too, which only makes the check below act spuriously or
	// not at all for an entry already answered.
	ready := n == 0 || many
	// A call that finished before e was queued found nothing to answer
	// (or woke the writer for nothing): act for it now.
	for _, c := range calls[:n] {
		if ready || c.finished.Load() {
			ready = true
			break
		}
	}
	if ready {
		cc.answerNow()
	}
}

// answerNow answers the entries that are ready: at once with a raw
// socket, else by waking the writer goroutine.
func (cc *clientConn) answerNow() {
	if cc.sock.Raw() {
		cc.answer()
	} else {
		cc.signal()
	}
}

// signal wakes the writer if it sleeps (and otherwise leaves a token).
func (cc *clientConn) signal() {
	select {
	case cc.wake <- struct{}{}:
	default:
	}
}

// answer answers the ready head entries and writes them without blocking;
// see the comment at the top of the file. It makes clientConn the answerer
// of its calls.
func (cc *clientConn) answer() {
	o := &cc.out
	o.mu.Lock()
	cc.writeReady()
	if o.eof && o.head == nil && !o.busy {
		cc.signal() // the reader closes the connection (closeWhenAnswered)
	}
	o.mu.Unlock()
}

// writeReady answers the ready head entries and writes them without
// blocking, maxOutBuffered bytes at a time, until nothing is ready or
// the socket is full (the writer goroutine then goes on). out.mu is held.
func (cc *clientConn) writeReady() {
	o := &cc.out
	for {
		cc.answerReady()
		if len(o.buf) == 0 || o.busy || o.dead {
			return
		}
		cc.writeNow()
	}
}

// answerReady moves the replies of the head entries whose calls have all
// finished into the output buffer; out.mu is held.
func (cc *clientConn) answerReady() {
	o := &cc.out
	for {
		if o.head == nil {
			if o.eof {
				return
			}
			select {
			case e, ok := <-cc.entries:
				if !ok {
					o.eof = true
					return
				}
				o.head = e
			default:
				return
			}
		}
		if len(o.buf) >= maxOutBuffered {
			return // written first (writeReady, writeDirect)
		}
		e := o.head
		for _, c := range e.calls {
			if !c.finished.Load() {
				return
			}
		}
		o.head = nil
		cc.s.respond(o, e)
		o.held += cc.release(e)
		if o.dead {
			o.buf = o.buf[:0]
			cc.giveBack(o.held)
			o.held = 0
		}
	}
}

// takeReady is answer's first half for a batch of clients written
// together (replyReader.answerOwners): it answers the ready head entries and, when
// they make bytes to write and no write is under way, takes the output
// buffer for the batch and marks the output busy, reporting true; sent
// must follow. Otherwise it does all answer does.
func (cc *clientConn) takeReady() (buf []byte, held int64, ok bool) {
	o := &cc.out
	o.mu.Lock()
	defer o.mu.Unlock()
	cc.answerReady()
	if len(o.buf) == 0 || o.busy || o.dead || !cc.sock.Raw() {
		cc.writeReady()
		if o.eof && o.head == nil && !o.busy {
			cc.signal()
		}
		return nil, 0, false
	}
	buf, held = o.buf, o.held
	o.buf, o.held, o.spare = o.spare[:0], 0, nil
	o.busy = true
	return buf, held, true
}

// sent ends the batched write of buf, taken by takeReady: the socket took
// n bytes, or the write failed with err. What the socket did not take is
// written first by the writer goroutine; what became ready meanwhile is
// answered and written as answer does.
func (cc *clientConn) sent(buf []byte, held int64, n int, err error) {
	o := &cc.out
	o.mu.Lock()
	switch {
	case err != nil:
		cc.giveBack(held)
		o.busy = false
		cc.writeFailed()
	case n == len(buf):
		cc.giveBack(held)
		if cap(buf) <= 2*maxOutBuffered { // a big reply's: not kept
			o.spare = buf[:0]
		}
		o.busy = false
		cc.writeReady()
	default:
		later := o.buf
		o.buf = append(buf[:copy(buf, buf[n:])], later...)
		o.held += held
		o.spare = later[:0]
		go cc.writeDirect() // busy stays set: the writer clears it
	}
	if o.eof && o.head == nil && !o.busy {
		cc.signal()
	}
	o.mu.Unlock()
}

// writeNow writes the output buffer with one non-blocking write; what the
// socket does not take is left to the writer goroutine. out.mu is held.
func (cc *clientConn) writeNow() {
	o := &cc.out
	n, err := cc.sock.TryWrite(o.buf)
	switch {
	case err == nil && n == len(o.buf):
		o.buf = o.buf[:0]
		if cap(o.buf) > 2*maxOutBuffered { // a big reply's: not kept
			o.buf = nil
		}
		cc.giveBack(o.held)
		o.held = 0
	case err != nil:
		cc.writeFailed()
	default:
		if n > 0 {
			o.buf = o.buf[:copy(o.buf, o.buf[n:])]
		}
		o.busy = true
		go cc.writeDirect()
	}
}

// writeFailed marks the output dead after a failed write: the replies
// answered and not written are dropped at once, and so is every later
// one (answerReady), so the entries still queued are answered to nothing
// and closeWhenAnswered can end. Dropping buf here matters: an answer may
// have filled it while writeDirect's write blocked, and answerReady stops
// at a full buffer. out.mu is held.
func (cc *clientConn) writeFailed() {
	o := &cc.out
	o.dead = true
	o.buf = o.buf[:0]
	cc.giveBack(o.held)
	o.held = 0
	_ = cc.sock.Shutdown() // the reader sees EOF (Close would wait for it)
	cc.endWaits()
}

// writeDirect is the writer goroutine with a raw socket, started by
// writeNow when the socket could not take a write at once (busy): it
// finishes the writes, blocking, answering what became ready meanwhile,
// and exits once the output is written (busy cleared).
func (cc *clientConn) writeDirect() {
	o := &cc.out
	o.mu.Lock()
	for {
		cc.answerReady()
		if len(o.buf) == 0 || o.dead {
			o.buf = o.buf[:0]
			cc.giveBack(o.held)
			o.held = 0
			o.busy = false
			break
		}
		buf, held := o.buf, o.held
		o.buf, o.held = o.spare[:0], 0
		o.mu.Unlock()
		_, err := cc.sock.Write(buf)
		cc.giveBack(held) // written, or dropped (dead)
		o.mu.Lock()
		if cap(buf) <= maxOutBuffered {
			o.spare = buf[:0]
		}
		if err != nil {
			cc.writeFailed()
		}
	}
	done := o.eof && o.head == nil
	o.mu.Unlock()
	if done {
		cc.signal() // the reader closes the connection
	}
}

// closeWhenAnswered is the end of the reader with a raw socket (entries
// closed): it waits until every entry is answered and written, then
// closes the connection. answer and writeDirect signal wake when that
// happens.
func (cc *clientConn) closeWhenAnswered() {
	o := &cc.out
	for {
		o.mu.Lock()
		cc.writeReady()
		done := o.eof && o.head == nil && !o.busy
		o.mu.Unlock()
		if done {
			break
		}
		<-cc.wake
	}
	_ = cc.nc.Close()
}

package proxy

// A pool connection's session and its reader: replies matched to the
// pending calls in order.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/proxy/fastconn"
	"github.com/poplimit/poplimit/proxy/protocol"
)

// session is one live connection: calls written on it wait in pending
// until the reader matches their replies.
type session struct {
	nc      net.Conn
	sock    *fastconn.Conn // nc with raw socket I/O
	timeout time.Duration
	p       *Pool
	pc      *poolConn // its slot: the reader counts replies there

	mu      sync.Mutex
	pending []*Call // written (or being written), in order
	dead    bool    // the reader has exited; push fails calls

	broken atomic.Bool
	once   sync.Once
	err    error // set before broken
}

// push appends calls, whose wire form is nbytes long, to pending before
// they are written, so that the reader can match their replies. When the
// session is dead it finishes them with its error and reports false.
func (s *session) push(calls []*Call, nbytes int) bool {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		for _, c := range calls {
			c.Finish(s.err)
		}
		return false
	}
	s.pending = append(s.pending, calls...)
	// Counted before the reader can take them: done never passes sent.
	s.pc.sentCalls.Add(uint64(len(calls)))
	s.pc.sentBytes.Add(uint64(nbytes))
	s.mu.Unlock()
	return true
}

// take swaps the pending calls out for the reader; batch is reused.
func (s *session) take(batch []*Call) []*Call {
	clear(batch)
	s.mu.Lock()
	out := s.pending
	s.pending = batch[:0]
	s.mu.Unlock()
	return out
}

// setErr breaks the session with err; it reports whether this call was
// the one that broke it.
func (s *session) setErr(err error) (first bool) {
	s.once.Do(func() {
		first = true
		s.err = err
		s.broken.Store(true)
		_ = s.nc.Close()
	})
	return first
}

// read is the session's reader: it reads replies into one buffer, matches
// every complete reply in it to the pending calls in order, and finishes
// them; the read deadline is the oldest pending call's Start + timeout.
// With no call pending, a read that did not fill the buffer waits for the
// next arrival rather than reading again for nothing (fastconn.ReadShort):
// the next request is due, and a shard's close that came with the last
// replies then shows as that request's reset.
func (s *session) read() {
	defer s.p.wg.Done()
	rd := &replyReader{s: s, buf: make([]byte, readBufSize), batch: fastconn.NewBatch()}
	defer rd.batch.Close()
	fill, consume := rd.fill, rd.consume
	var err error
	for err == nil {
		rd.deadline()
		if err = s.sock.ReadEach(fill, consume); err == nil {
			err = rd.err
		} else {
			err = rd.readErr(err)
		}
	}
	s.end(err, rd.cur[rd.i:])
}

// replyReader is the state of a session's reader: buf[r:w] holds replies
// read and not yet matched; cur holds the calls taken from pending, cur[i:]
// unanswered.
type replyReader struct {
	s            *session
	buf          []byte
	r, w         int
	cur          []*Call
	i            int
	lastDeadline time.Time
	owners       []answerer // clients with calls finished in this batch
	batch        *fastconn.Batch
	taken        []takenOut
	err          error // a reply that is none (consume stopped)
}

// fill makes room in buf for the next read and returns it.
func (rd *replyReader) fill() []byte {
	rd.compact()
	return rd.buf[rd.w:]
}

// consume takes n more bytes, finishes the calls they answer and moves
// the read deadline to the next pending call's; it stops reading on a
// reply that is none. With calls still pending it reads again at once
// (under load their replies are often there already: a read is cheaper
// than a wait); with none, the next arrival is the reply to a request not
// yet written, so it waits for it.
func (rd *replyReader) consume(n int) fastconn.ReadNext {
	rd.w += n
	if rd.err = rd.answer(); rd.err != nil {
		return fastconn.ReadStop
	}
	rd.deadline()
	if rd.i < len(rd.cur) {
		return fastconn.ReadDrain
	}
	return fastconn.ReadShort
}

// answer finishes the calls whose replies buf holds whole, in order, and
// answers their clients, each once. It fails on a reply that is none, or
// one with no call pending.
func (rd *replyReader) answer() (err error) {
	s := rd.s
	buf, r, w, cur, i := rd.buf, rd.r, rd.w, rd.cur, rd.i
	answered, replyBytes, wireBytes := 0, 0, 0
	for r < w {
		if i == len(cur) {
			cur, i = s.take(cur), 0
			if len(cur) == 0 {
				err = fmt.Errorf("%w: %q with no request pending", protocol.ErrBadReply, protocol.FirstLine(buf[r:w]))
				break
			}
		}
		c := cur[i]
		n, rerr := protocol.ReplyLen(buf[r:w], c.Req)
		if rerr == protocol.ErrIncomplete {
			if n > len(buf) {
				buf, w = protocol.Compact(buf, r, w, n)
				r = 0
			}
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
		c.Reply = append(c.Reply, buf[r:r+n]...)
		r += n
		cur[i] = nil
		i++
		answered++
		replyBytes += n
		wireBytes += c.wire // c may be reused once finished
		if o := c.finish(nil); o != nil && (len(rd.owners) == 0 || rd.owners[len(rd.owners)-1] != o) {
			rd.owners = append(rd.owners, o)
		}
	}
	rd.buf, rd.r, rd.w, rd.cur, rd.i = buf, r, w, cur, i
	if answered > 0 {
		s.pc.responseBytes.Add(uint64(replyBytes))
		s.pc.doneBytes.Add(uint64(wireBytes))
		s.pc.doneCalls.Add(uint64(answered))
	}
	// Answer each client once per batch of replies: one write carries all
	// of a pipelining client's replies, and one system call all clients'.
	rd.answerOwners()
	if answered > 0 {
		s.p.ok()
	}
	return err
}

// answerOwners answers the clients of the replies just read: the writes
// of those with bytes to send go out together (fastconn.Batch), the rest
// answer as usual.
func (rd *replyReader) answerOwners() {
	if len(rd.owners) > 1 && rd.batch.Uring() {
		b := rd.batch
		for _, o := range rd.owners {
			cc, ok := o.(*clientConn)
			if !ok {
				o.answer()
				continue
			}
			if buf, held, ok := cc.takeReady(); ok {
				b.Add(cc.sock, buf)
				rd.taken = append(rd.taken, takenOut{cc, buf, held})
			}
		}
		b.Send()
		for i, t := range rd.taken {
			n, err := b.Result(i)
			t.cc.sent(t.buf, t.held, n, err)
		}
		b.Reset()
		clear(rd.taken)
		rd.taken = rd.taken[:0]
	} else {
		for _, o := range rd.owners {
			o.answer()
		}
	}
	clear(rd.owners)
	rd.owners = rd.owners[:0]
}

// takenOut is a client's output taken for a batched write.
type takenOut struct {
	cc   *clientConn
	buf  []byte
	held int64
}

// compact makes room in buf for the next read.
func (rd *replyReader) compact() {
	if rd.r == rd.w {
		rd.r, rd.w = 0, 0
		if len(rd.buf) > 4*readBufSize {
			rd.buf = make([]byte, readBufSize)
		}
	} else if rd.w == len(rd.buf) {
		rd.buf, rd.w = protocol.Compact(rd.buf, rd.r, rd.w, 0)
		rd.r = 0
	}
}

// deadline sets the read deadline to the head call's (or, idle, the pool
// timeout from now). A call pushed while the reader waits idle gets its
// deadline checked when that one expires (never later than the call's own).
func (rd *replyReader) deadline() {
	s := rd.s
	if rd.i == len(rd.cur) {
		rd.cur, rd.i = s.take(rd.cur), 0
	}
	var dl time.Time
	if rd.i < len(rd.cur) {
		dl = rd.cur[rd.i].Start.Add(s.timeout)
	} else {
		dl = time.Now().Add(s.timeout)
	}
	if d := dl.Sub(rd.lastDeadline); d > time.Millisecond || d < -time.Millisecond {
		_ = s.nc.SetReadDeadline(dl)
		rd.lastDeadline = dl
	}
}

// readErr is the session's error after a read failed with err, or nil
// when the deadline passed while the head call still has time left, or
// with no call pending.
func (rd *replyReader) readErr(err error) error {
	s := rd.s
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || s.broken.Load() {
		return err
	}
	if rd.i == len(rd.cur) {
		rd.cur, rd.i = s.take(rd.cur), 0
	}
	if rd.i == len(rd.cur) || time.Now().Before(rd.cur[rd.i].Start.Add(s.timeout)) {
		rd.lastDeadline = time.Time{}
		return nil
	}
	return ErrTimeout
}

// end ends the session after its reader stopped with err: the session
// is broken, and its unanswered calls (unanswered, then those still
// pending) fail with its error.
func (s *session) end(err error, unanswered []*Call) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		s.pc.eof.Add(1)
		err = fmt.Errorf("%s closed the connection", s.p.cfg.Addr)
	}
	if s.setErr(err) {
		s.p.fail(err)
	}
	s.mu.Lock()
	s.dead = true
	rest := s.pending
	s.pending = nil
	s.mu.Unlock()
	// Counted before any caller learns of its failure (as the reader
	// counts before it answers): a Stats read after the reply sees it.
	failed, wireBytes := 0, 0
	for _, calls := range [2][]*Call{unanswered, rest} {
		for _, c := range calls {
			failed++
			wireBytes += c.wire
		}
	}
	s.pc.doneBytes.Add(uint64(wireBytes))
	s.pc.doneCalls.Add(uint64(failed))
	for _, calls := range [2][]*Call{unanswered, rest} {
		for _, c := range calls {
			c.Finish(s.err)
		}
	}
}

package memcached

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/counter"
)

// muxSlot holds one multiplexed connection, replaced when it fails.
type muxSlot struct {
	mu sync.Mutex
	mc *muxConn
}

// muxReq is one call on a multiplexed connection.
type muxReq struct {
	write    func(*bufio.Writer)
	read     func(*pipeConn) error
	deadline time.Time
	done     chan error // capacity 1: exactly one send per request
	last     bool       // the last request of its write (set by the writer)
}

// muxConn is a connection shared by concurrent calls: a writer goroutine
// writes every queued request and flushes once per batch, a reader
// goroutine reads the replies in the same order. With maxInFlight batches
// awaiting replies, the writer waits for the oldest to be answered before
// the next flush, and calls queue meanwhile: they go together.
type muxConn struct {
	pc          *pipeConn
	timeout     time.Duration
	maxInFlight int64
	inFlight    atomic.Int64  // batches written whose last reply is unread
	answered    chan struct{} // capacity 1: the reader read a batch's last reply
	queue       chan *muxReq  // callers → writer
	sent        chan *muxReq  // writer → reader, in write order
	closed      chan struct{} // closed by fail
	wdone       chan struct{} // closed when the writer has exited
	rdone       chan struct{} // closed when the reader has exited
	once        sync.Once
	err         error // set before closed is closed
}

// muxReqs recycles the requests answered normally (a request abandoned on
// a failed connection is left to the garbage collector).
var muxReqs sync.Pool

// muxBatch bounds the requests written by one flush.
const muxBatch = 128

func newMuxConn(c net.Conn, timeout time.Duration, maxInFlight int) *muxConn {
	mc := &muxConn{
		pc:          &pipeConn{c: c, r: bufio.NewReaderSize(c, 16<<10), w: bufio.NewWriterSize(c, 16<<10)},
		timeout:     timeout,
		maxInFlight: int64(max(1, maxInFlight)),
		answered:    make(chan struct{}, 1),
		queue:       make(chan *muxReq, 4*muxBatch),
		sent:        make(chan *muxReq, 4*muxBatch),
		closed:      make(chan struct{}),
		wdone:       make(chan struct{}),
		rdone:       make(chan struct{}),
	}
	go mc.writer()
	go mc.reader()
	return mc
}

// fail closes the connection once; every caller waiting on it returns err.
func (mc *muxConn) fail(err error) {
	mc.once.Do(func() {
		mc.err = err
		close(mc.closed)
		mc.pc.c.Close()
	})
}

func (mc *muxConn) writer() {
	defer close(mc.wdone)
	batch := make([]*muxReq, 0, muxBatch)
	for {
		var req *muxReq
		select {
		case <-mc.closed:
			return
		case req = <-mc.queue:
		}
		if len(mc.queue) == 0 && mc.inFlight.Load() < mc.maxInFlight {
			// Alone, and nothing holds this call back: let the
			// goroutines already runnable (the other descriptors of one
			// rls request, other requests) queue their calls first, so
			// this write carries them all. Without it the writer, woken
			// by the first call, writes it alone, and the next ones wait
			// for its reply (MuxInFlight) or cost a write of their own.
			runtime.Gosched()
		}
		// Hold back while maxInFlight batches await replies: the calls
		// arriving meanwhile join this one's write. Bounded by the read
		// deadline of the oldest (the reader fails the connection then).
		for mc.inFlight.Load() >= mc.maxInFlight {
			select {
			case <-mc.answered:
			case <-mc.closed:
				return
			}
		}
		batch = append(batch[:0], req)
	drain:
		for len(batch) < muxBatch {
			select {
			case req = <-mc.queue:
				batch = append(batch, req)
			default:
				break drain
			}
		}
		// Set before writing: a batch larger than the buffer is flushed
		// on the way.
		if err := mc.pc.c.SetWriteDeadline(time.Now().Add(mc.timeout)); err != nil {
			mc.fail(err)
			return
		}
		mc.inFlight.Add(1)
		for i, req := range batch {
			req.write(mc.pc.w)
			req.last = i == len(batch)-1
			// req belongs to the reader (then to its caller) once sent.
			select {
			case mc.sent <- req:
			case <-mc.closed:
				return
			}
		}
		clear(batch)
		if err := mc.pc.w.Flush(); err != nil {
			mc.fail(err)
			return
		}
	}
}

func (mc *muxConn) reader() {
	defer close(mc.rdone)
	for {
		var req *muxReq
		select {
		case <-mc.closed:
			return
		case req = <-mc.sent:
		}
		if err := mc.pc.c.SetReadDeadline(req.deadline); err != nil {
			mc.fail(err)
			return
		}
		err := req.read(mc.pc)
		if err != nil && !errors.Is(err, counter.ErrNotFound) && !errors.Is(err, counter.ErrNotStored) &&
			!errors.Is(err, counter.ErrCASConflict) && !errors.Is(err, counter.ErrContention) {
			// The stream is out of sync or dead: this call and every
			// later one on the connection fail.
			mc.fail(err)
			return
		}
		if req.last {
			mc.inFlight.Add(-1)
			select {
			case mc.answered <- struct{}{}:
			default: // the writer has a wake-up pending already
			}
		}
		req.done <- err
	}
}

// conn returns the live multiplexed connection of a slot, dialling one.
func (p *PipeStore) muxConn(ctx context.Context, deadline time.Time) (mc *muxConn, reused bool, err error) {
	s := &p.mux[p.rr.Add(1)%uint64(len(p.mux))]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mc != nil {
		select {
		case <-s.mc.closed:
			s.mc = nil
		default:
			return s.mc, true, nil
		}
	}
	c, err := p.dial(ctx, deadline)
	if err != nil {
		return nil, false, err
	}
	s.mc = newMuxConn(c, p.cfg.Timeout, p.cfg.MuxInFlight)
	return s.mc, false, nil
}

// callMux is call on a multiplexed connection.
func (p *PipeStore) callMux(ctx context.Context, write func(*bufio.Writer), read func(*pipeConn) error) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(p.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// A connection the server closed (restart) fails the call with
	// connGone; each multiplexed slot may hold one: try them all.
	for attempt := 0; ; attempt++ {
		mc, reused, err := p.muxConn(ctx, deadline)
		if err != nil {
			return err
		}
		err = p.callOn(ctx, mc, deadline, write, read)
		if reused && attempt < len(p.mux) && connGone(err) {
			continue
		}
		return err
	}
}

// callOn runs one call on mc.
func (p *PipeStore) callOn(ctx context.Context, mc *muxConn, deadline time.Time, write func(*bufio.Writer), read func(*pipeConn) error) error {
	var err error
	req, _ := muxReqs.Get().(*muxReq)
	if req == nil {
		req = &muxReq{done: make(chan error, 1)}
	}
	req.write, req.read, req.deadline = write, read, deadline
	select {
	case mc.queue <- req: // room: no need for ctx.Done (it may cost a timer)
	default:
		select {
		case mc.queue <- req:
		case <-mc.closed:
			return fmt.Errorf("memcached: %s: %w", p.cfg.Addr, mc.err)
		case <-ctx.Done():
			muxReqs.Put(req) // never queued
			return ctxErr(ctx)
		}
	}
	// No giving up on ctx from here: the reader may be filling the
	// caller's results. The wait is bounded by the read deadline.
	select {
	case err = <-req.done:
		// Answered: the goroutines are done with req and its channel is
		// empty, so it can serve another call.
		req.write, req.read = nil, nil
		muxReqs.Put(req)
		return err
	case <-mc.closed:
		// Once both goroutines are gone nothing touches req any more.
		<-mc.wdone
		<-mc.rdone
		select {
		case err = <-req.done: // answered just before the connection failed
			return err
		default:
		}
		return fmt.Errorf("memcached: %s: %w", p.cfg.Addr, mc.err)
	}
}

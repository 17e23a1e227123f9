package fastconn

import (
	"runtime"
	"sync"
	"syscall"
)

// Combiner joins the non-blocking reads and writes of many goroutines
// into Batches: the first to come lets the goroutines runnable at that
// moment queue theirs (runtime.Gosched), then makes them all with one
// system call where io_uring is available. For a server whose handlers
// each read and write their own connection, as a Batch is for one
// goroutine answering many. Without io_uring each is a system call of its
// own.
type Combiner struct {
	mu     sync.Mutex
	queue  []*combineReq
	leader bool // a writer is sending the queue
	batch  *Batch
	uring  bool // batch had a ring when made (it may drop it: see submit)
	spare  []*combineReq
}

type combineReq struct {
	c     *Conn
	p     []byte
	fd    uintptr
	recv  bool // a read (readHeld)
	lead  bool // woken to send the queue, not with its result
	n     int
	err   error
	errno syscall.Errno
	done  chan struct{}
}

var reqPool = sync.Pool{New: func() any { return &combineReq{done: make(chan struct{}, 1)} }}

// Shared is the process's Combiner, made on first use: one ring for every
// server in the process that joins its sockets' reads and writes.
var Shared = sync.OnceValue(NewCombiner)

// NewCombiner returns a Combiner with its own io_uring ring, if the kernel
// gives one.
func NewCombiner() *Combiner {
	b := NewBatch()
	return &Combiner{batch: b, uring: b.Uring()}
}

// Close releases the ring; later reads and writes are made one by one. No
// write may be under way.
func (cb *Combiner) Close() error { return cb.batch.Close() }

// TryWrite is c.TryWrite(p) (c must be Raw, p not empty), sent together
// with the other writes queued meanwhile. One goroutine writes to c at a
// time.
func (cb *Combiner) TryWrite(c *Conn, p []byte) (int, error) {
	if !cb.uring {
		return c.TryWrite(p)
	}
	req := reqPool.Get().(*combineReq)
	req.c, req.p = c, p
	cb.run(req)
	n, err := req.n, req.err
	req.c, req.p, req.n, req.err = nil, nil, 0, nil
	reqPool.Put(req)
	return n, err
}

// readHeld is one read(2) of fd, c's descriptor that the caller holds for
// reading (inside c's RawConn.Read callback), made with the other queued
// reads and writes.
func (cb *Combiner) readHeld(c *Conn, fd uintptr, p []byte) (int, syscall.Errno) {
	if !cb.uring {
		return rawRead(fd, p)
	}
	req := reqPool.Get().(*combineReq)
	req.c, req.p, req.fd, req.recv = c, p, fd, true
	cb.run(req)
	n, e := req.n, req.errno
	req.c, req.p, req.fd, req.recv, req.n, req.errno = nil, nil, 0, false, 0, 0
	reqPool.Put(req)
	return n, e
}

// run queues req and returns once it is done: sent by the writer that
// leads the moment's batch, or by this one.
func (cb *Combiner) run(req *combineReq) {
	cb.mu.Lock()
	cb.queue = append(cb.queue, req)
	if cb.leader {
		cb.mu.Unlock()
		<-req.done
		if req.lead { // handed the queue, req still in it
			req.lead = false
			cb.sendAll(req)
		}
	} else {
		cb.leader = true
		cb.mu.Unlock()
		runtime.Gosched() // the runnable writers queue theirs
		cb.sendAll(req)
	}
}

// maxRounds is how many batches a leader sends before it hands the queue
// to the oldest waiter, so that no goroutine serves the others forever.
const maxRounds = 4

// sendAll sends the queue, and what is queued meanwhile, until it is
// empty or maxRounds were sent; it wakes every writer but own.
func (cb *Combiner) sendAll(own *combineReq) {
	b := cb.batch
	for round := 0; ; round++ {
		cb.mu.Lock()
		q := cb.queue
		if len(q) == 0 {
			cb.leader = false
			cb.mu.Unlock()
			return
		}
		if round == maxRounds {
			q[0].lead = true // it leads from here on
			cb.mu.Unlock()
			q[0].done <- struct{}{}
			return
		}
		cb.queue = cb.spare[:0]
		cb.mu.Unlock()
		for _, r := range q {
			if r.recv {
				b.addRecv(r.c, r.fd, r.p)
			} else {
				b.Add(r.c, r.p)
			}
		}
		b.Send()
		for i, r := range q {
			if r.recv {
				r.n, r.errno = b.recvResult(i)
			} else {
				r.n, r.err = b.Result(i)
			}
			if r != own {
				r.done <- struct{}{}
			}
		}
		b.Reset()
		clear(q)
		cb.spare = q[:0]
	}
}

package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// Errors a backend reports through Call.Err. The proxy answers the client
// "SERVER_ERROR <err text without the 'proxy: ' prefix>" for any of them.
var (
	// ErrBackendClosed: the backend was closed while the call was pending.
	ErrBackendClosed = errors.New("proxy: backend closed")
	// ErrTimeout: no reply within the request timeout.
	ErrTimeout = errors.New("proxy: timeout")
	// ErrNoShard: no live shard to route to (all ejected).
	ErrNoShard = errors.New("proxy: no live shard")
)

// Backend executes requests on one shard: a pool of pipelined connections
// to a memcached (Pool) or an in-process storage engine.
//
// Implementations must be safe for concurrent use by many client
// connections.
type Backend interface {
	// Do starts executing c.Req and may return before the reply is known.
	// The implementation must call c.Finish exactly once, possibly before
	// Do returns, after either appending to c.Reply the complete reply
	// memcached 1.6 writes for c.Req (as if Noreply were false: e.g.
	// "STORED\r\n", or "VALUE k 0 1\r\na\r\nEND\r\n") or passing an error.
	// Do must not block for longer than the request timeout.
	//
	// Calls from one client connection are given in the client's order;
	// a backend must apply calls it receives from one goroutine in that
	// order (pipelining keeps a client's requests ordered per shard).
	// c.Req and the byte slices it refers to stay valid until Finish.
	Do(c *Call)
	// Close stops the backend; calls pending at Close finish with
	// ErrBackendClosed. Close is idempotent.
	Close() error
}

// Prober is implemented by backends that can check a shard's health out of
// band (memcached "version" on a fresh connection). The health loop uses it
// to re-admit an ejected shard.
type Prober interface {
	Probe(ctx context.Context) error
}

// Call is one request to one backend, and the reply to it.
//
// The zero value is not usable; get one from NewCall. A Call is reused after
// Wait returns and the reply has been consumed (Release).
type Call struct {
	// Req is the request to execute (read-only for the backend).
	Req *protocol.Request
	// Reply receives the backend's complete wire reply.
	Reply []byte
	// Err is set instead of Reply when the request failed (timeout,
	// connection refused, shard ejected, ...).
	Err error
	// Start is when the proxy accepted the request; a backend with a
	// request timeout fails the call at Start+timeout.
	Start time.Time
	// Conn picks the backend connection: calls with the same Conn value go
	// over the same connection, in order (the proxy uses the client
	// connection's id).
	Conn uint64

	// shard is the index of the shard the call went to (stats, health),
	// router the Router that sent it (it may have been swapped since).
	shard  int
	router *Router
	done   chan struct{}
	// wake, when set, is the client writer's wakeup, signalled by Finish
	// after finished is set (see clientio.go).
	wake     chan struct{}
	owner    answerer // instead of wake: told once the call has finished
	finished atomic.Bool
	// req is the storage for Req when the proxy builds a sub-request by
	// splitting a multi-key request over shards: Router.do counts a call
	// whose Req is &c.req as one fragment (nutcracker's "fragments").
	req protocol.Request
	// wire is the byte length of Req's wire form, set by Pool.Do (its
	// queue stats subtract it when the call leaves a queue).
	wire int
	// budget is the client's byte budget: a reply of at least bigRequest
	// bytes is counted against it from Finish (held) until the client
	// releases the call.
	budget *atomic.Int64
	held   int64
	// perKey is what the client reserved in the budget for each key's
	// reply when it dispatched the call: a big reply is counted (held)
	// only beyond perKey times its keys.
	perKey int64
	// est is the client's reply size estimate: a retrieval's Finish
	// raises it to its reply's size when big, and sets it to 0 from
	// unknown when small.
	est *atomic.Int64
}

// An answerer is the client side of a Call: it writes the replies of its
// calls once they have finished. Finish calls answer after the call is
// finished; a backend finishing a batch of calls answers each answerer once,
// after the batch. answer runs on the backend's goroutine and must not wait
// for a backend.
type answerer interface {
	answer()
}

// NewCall returns an empty Call ready for Do.
func NewCall() *Call {
	return &Call{done: make(chan struct{}, 1)}
}

// Finish completes the call with err (nil on success). A backend calls it
// exactly once per Do.
func (c *Call) Finish(err error) {
	if o := c.finish(err); o != nil {
		o.answer()
	}
}

// finish is Finish but for answering the client, whose answerer it
// returns (nil when the client's writer was signalled instead): a backend
// finishing a batch of calls answers each client once.
func (c *Call) finish(err error) answerer {
	c.Err = err
	var big int64 // the reply's size when big, else 0
	if len(c.Reply) >= bigRequest {
		big = int64(len(c.Reply))
	}
	if c.budget != nil && big > 0 {
		covered := int64(0)
		if c.Req != nil {
			covered = c.perKey * int64(len(c.Req.Keys))
		}
		if big > covered {
			c.held = big - covered
			c.budget.Add(c.held)
		}
	}
	if c.est != nil && c.Req != nil && (c.Req.Cmd.IsRetrieval() || c.Req.Cmd == protocol.CmdMg) {
		raiseEstimate(c.est, big)
	}
	wake, owner := c.wake, c.owner // c may be reused once finished is set
	c.done <- struct{}{}
	c.finished.Store(true)
	if owner == nil && wake != nil {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return owner
}

// Wait blocks until Finish has been called.
func (c *Call) Wait() { <-c.done }

// Done returns a channel that receives one value when the call finishes;
// use it or Wait, not both.
func (c *Call) Done() <-chan struct{} { return c.done }

// reset prepares c for reuse.
func (c *Call) reset() {
	c.Req = nil
	c.Reply = c.Reply[:0]
	if cap(c.Reply) > bigRequest { // a pooled call keeps no big buffer
		c.Reply = nil
	}
	c.Err = nil
	c.shard = 0
	c.router = nil
	c.wake = nil
	c.owner = nil
	c.finished.Store(false)
	c.wire = 0
	c.budget, c.held, c.est, c.perKey = nil, 0, nil, 0
	c.req.Reset()
}

// raiseEstimate sets est to size when size is larger (-1, unknown, is
// below every size, so a small reply, size 0, makes it known).
func raiseEstimate(est *atomic.Int64, size int64) {
	for {
		v := est.Load()
		if v >= size || est.CompareAndSwap(v, size) {
			return
		}
	}
}

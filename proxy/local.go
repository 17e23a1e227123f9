package proxy

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// Executor answers requests in process, synchronously: Execute appends to
// dst the complete reply memcached 1.6 writes for r at now (as if
// r.Noreply were false) and returns the extended buffer. r and its slices
// may be reused once Execute returns. An Executor must be safe for
// concurrent use. The in-process memcached, embedded.Shard, is one.
type Executor interface {
	Execute(dst []byte, r *protocol.Request, now time.Time) []byte
}

// LocalBackend is a Backend that runs every call on an Executor inside Do:
// one embedded shard for mcproxy's --embedded mode, the demo and tests
// without memcached. Calls are applied in the order Do is called. It is
// safe for concurrent use.
//
// It has no wire and no queue, so it implements neither Stats nor
// OpenConns: in the Twemproxy stats its shards report request_bytes,
// response_bytes, server_eof, in_queue, in_queue_bytes, out_queue and
// out_queue_bytes as 0, and server_connections as configured.
type LocalBackend struct {
	x      Executor
	now    func() time.Time
	closed atomic.Bool
}

var (
	_ Backend = (*LocalBackend)(nil)
	_ Prober  = (*LocalBackend)(nil)
)

// NewLocalBackend returns a Backend over x whose clock is now (time.Now
// when nil; tests step it through fixed instants). now must be safe for
// concurrent use.
func NewLocalBackend(x Executor, now func() time.Time) *LocalBackend {
	if now == nil {
		now = time.Now
	}
	return &LocalBackend{x: x, now: now}
}

// Do executes c.Req at once and finishes c: with the reply appended to
// c.Reply, or with ErrBackendClosed after Close.
func (b *LocalBackend) Do(c *Call) {
	if b.closed.Load() {
		c.Finish(ErrBackendClosed)
		return
	}
	c.Reply = b.x.Execute(c.Reply, c.Req, b.now())
	c.Finish(nil)
}

// Close makes later calls fail with ErrBackendClosed; the Executor (and
// its data) is left as it is.
func (b *LocalBackend) Close() error {
	b.closed.Store(true)
	return nil
}

// Probe reports the backend healthy unless it is closed.
func (b *LocalBackend) Probe(ctx context.Context) error {
	if b.closed.Load() {
		return ErrBackendClosed
	}
	return ctx.Err()
}

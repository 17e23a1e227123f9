package main

import (
	"sync"
	"sync/atomic"

	"github.com/poplimit/poplimit/proxy/fastconn"
)

// readAhead is the read-ahead buffer of clientConn: as large as most
// requests' headers.
const readAhead = 4 << 10

var aheadPool = sync.Pool{New: func() any { b := make([]byte, readAhead); return &b }}

// clientConn is a client connection of the fasthttp core. fasthttp waits
// for the next request with a one-byte read (ReduceMemoryUsage: an idle
// connection holds no buffer) and then reads the rest; clientConn reads
// what has arrived into a pooled buffer at once, so a request costs one
// read(2), not two. The buffer is held only while it has unread bytes.
// Its reads and writes go out with the other connections' of the moment,
// clients' and the upstream's, in one system call (fastconn.Shared).
// One goroutine reads at a time (fasthttp's serving loop).
type clientConn struct {
	*fastconn.Conn
	ahead    *[]byte // unread bytes in (*ahead)[off:end]; nil when none
	off, end int
	held     atomic.Bool // ahead != nil, for Close (which may run on another goroutine)
	refused  atomic.Bool // a request was refused before it was read whole
}

func (c *clientConn) Read(p []byte) (int, error) {
	if c.ahead != nil {
		n := copy(p, (*c.ahead)[c.off:c.end])
		if c.off += n; c.off == c.end {
			aheadPool.Put(c.ahead)
			c.ahead = nil
			c.held.Store(false)
		}
		return n, nil
	}
	if len(p) >= readAhead {
		return c.Conn.ReadVia(fastconn.Shared(), p)
	}
	b := aheadPool.Get().(*[]byte)
	n, err := c.Conn.ReadVia(fastconn.Shared(), *b)
	k := copy(p, (*b)[:n])
	if k < n {
		c.ahead, c.off, c.end = b, k, n
		c.held.Store(true)
	} else {
		aheadPool.Put(b)
	}
	return k, err
}

// Write writes p as net.Conn.Write does; its non-blocking first attempt
// goes out with the other connections' writes of the moment.
func (c *clientConn) Write(p []byte) (int, error) {
	if len(p) == 0 || !c.Raw() {
		return c.Conn.Write(p)
	}
	n, err := fastconn.Shared().TryWrite(c.Conn, p)
	if err != nil || n == len(p) {
		return n, err
	}
	m, err := c.Conn.Write(p[n:])
	return n + m, err
}

// Close closes the connection as lingerClose does.
func (c *clientConn) Close() error { return lingerClose(c.Conn, c.held.Load() || c.refused.Load()) }

// deferWrite is the largest request upstreamConn sends with the read of
// its reply.
const deferWrite = 4 << 10

// upstreamConn is a connection to the upstream. fasthttp's HostClient
// writes a request and then reads its response, on one goroutine; a
// request up to deferWrite bytes is sent by that read
// (fastconn.WriteReadVia, with the other connections' reads and writes),
// which waits for the response instead of first reading to find the
// socket empty. Sound because an upstream sends nothing unprompted: what
// it sent while the connection was idle (a close) draws a reset on the
// write.
type upstreamConn struct {
	*fastconn.Conn
	pend []byte // written by the caller, not sent yet
}

func (c *upstreamConn) Write(p []byte) (int, error) {
	if len(c.pend)+len(p) <= deferWrite {
		if c.pend == nil {
			c.pend = make([]byte, 0, deferWrite)
		}
		c.pend = append(c.pend, p...)
		return len(p), nil
	}
	if len(c.pend) > 0 {
		_, err := c.Conn.Write(c.pend)
		c.pend = c.pend[:0]
		if err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

// Close sends what was written and not yet sent (a TLS close_notify
// written just before) with one non-blocking attempt, then closes.
func (c *upstreamConn) Close() error {
	if len(c.pend) > 0 && c.Raw() {
		c.TryWrite(c.pend)
		c.pend = c.pend[:0]
	}
	return c.Conn.Close()
}

func (c *upstreamConn) Read(p []byte) (int, error) {
	if len(c.pend) == 0 {
		return c.Conn.ReadVia(fastconn.Shared(), p)
	}
	n, err := c.Conn.WriteReadVia(fastconn.Shared(), c.pend, p)
	c.pend = c.pend[:0]
	return n, err
}

package memcached

import (
	"net"
	"sync/atomic"
)

// WireCounter counts the network round trips of the clients that share
// it: the writes they make on their store connections. Each write carries
// one or more requests (PipeStore's pipelined and multiplexed calls put
// several in one) and is answered by the replies read after it, so writes
// are round trips, however many store operations they carry (counting.Store
// counts those). A write the kernel takes in parts is still one. The zero
// value is ready; safe for concurrent use; a nil *WireCounter counts nothing.
type WireCounter struct{ writes atomic.Int64 }

// Writes returns the writes counted so far.
func (w *WireCounter) Writes() int64 {
	if w == nil {
		return 0
	}
	return w.writes.Load()
}

// wrap returns c counting its writes into w (c itself when w is nil).
func (w *WireCounter) wrap(c net.Conn) net.Conn {
	if w == nil {
		return c
	}
	return &countedConn{Conn: c, w: w}
}

// countedConn is a net.Conn whose writes are counted.
type countedConn struct {
	net.Conn
	w *WireCounter
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.w.writes.Add(1)
	return c.Conn.Write(b)
}

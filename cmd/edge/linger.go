package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/proxy/fastconn"
)

// A client connection closed while the client is still sending (a
// request refused with 431, 413 or 400 before it was read whole) is
// closed as nginx's lingering_close does: FIN after the answer, then what
// keeps arriving is read and dropped, so that no reset destroys the answer
// before the client reads it (closing a socket with unread input sends a
// reset, and the client's next write fails). The reading stops at EOF,
// after lingerGap without a byte, or after lingerTime in all.
const (
	lingerTime = 10 * time.Second       // nginx: lingering_time 30s
	lingerGap  = 500 * time.Millisecond // nginx: lingering_timeout 5s
)

// lingerClose closes nc, lingering in the background when it has unread
// input or when must (the caller holds bytes read from nc and not
// consumed, or refused a request it did not read whole).
func lingerClose(nc net.Conn, must bool) error {
	if !must {
		if n, ok := fastconn.Unread(nc); !ok || n == 0 {
			return nc.Close()
		}
	}
	go linger(nc)
	return nil
}

func linger(nc net.Conn) {
	defer nc.Close()
	cw, ok := nc.(interface{ CloseWrite() error })
	if s, isConn := nc.(*fastconn.Conn); isConn {
		cw, ok = s.Conn.(interface{ CloseWrite() error })
	}
	if !ok || cw.CloseWrite() != nil {
		return
	}
	b := aheadPool.Get().(*[]byte)
	defer aheadPool.Put(b)
	end := time.Now().Add(lingerTime)
	for {
		d := time.Now().Add(lingerGap)
		if d.After(end) {
			d = end
		}
		if nc.SetReadDeadline(d) != nil {
			return
		}
		if _, err := nc.Read(*b); err != nil {
			return
		}
	}
}

// lingerListener gives the net/http core's client connections
// lingerClose: net/http itself waits 500 ms after its FIN, then closes
// with whatever arrived meanwhile unread.
type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return &lingerConn{Conn: c}, nil
}

// lingerConn is a net/http core client connection. It lingers on close
// after a request whose body was not read to its end (lingerUnread), or
// once net/http half-closed it (CloseWrite: a body over its limit).
type lingerConn struct {
	net.Conn
	refused atomic.Bool
}

func (c *lingerConn) Close() error { return lingerClose(c.Conn, c.refused.Load()) }

// CloseWrite is the socket's, for net/http's FIN before its wait.
func (c *lingerConn) CloseWrite() error {
	c.refused.Store(true)
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

type lingerConnKey struct{}

// withLingerConn is the net/http core's ConnContext: it gives lingerUnread
// the request's connection.
func withLingerConn(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*lingerConn); ok {
		return context.WithValue(ctx, lingerConnKey{}, lc)
	}
	return ctx
}

// lingerUnread marks the connection of a request whose body h did not
// read to its end (a 413 answered from Content-Length, a refusal) for a
// lingering close: net/http closes a Connection: close request's
// connection at once, with the body still arriving.
func lingerUnread(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lc, _ := r.Context().Value(lingerConnKey{}).(*lingerConn)
		if lc == nil || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		b := &eofBody{ReadCloser: r.Body}
		r.Body = b
		h.ServeHTTP(w, r)
		if !b.eof.Load() {
			lc.refused.Store(true)
		}
	})
}

// eofBody records whether its body was read to EOF.
type eofBody struct {
	io.ReadCloser
	eof atomic.Bool // read by the handler, set by the transport's writer
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

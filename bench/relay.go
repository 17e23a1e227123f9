package bench

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// relay is a loopback TCP proxy that delays every byte by a one-way delay in
// each direction, so a round trip through it costs 2× the delay more: a
// stand-in for a store in another region, or a slowed shard. Throughput is
// not limited by the delay (data in flight is queued, like a long pipe).
// The delay can be changed while it runs. Close stops it and every
// connection through it.
type relay struct {
	// Addr is the relay's listening address.
	Addr   string
	target string
	delay  atomic.Int64
	ln     net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
	reset  atomic.Bool
}

// StartRelay listens on a free loopback port and forwards to target with the
// given one-way delay.
func startRelay(target string, oneWay time.Duration) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: relay listen: %w", err)
	}
	r := &relay{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	r.delay.Store(int64(oneWay))
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// SetDelay changes the one-way delay for data read from now on.
func (r *relay) SetDelay(oneWay time.Duration) { r.delay.Store(int64(oneWay)) }

// SetReset turns reset mode on or off. While on, every relayed connection
// is aborted with a TCP reset (SO_LINGER 0, then close) — those open now
// and each one accepted — so both ends see ECONNRESET rather than an
// orderly close. Off, new connections are relayed again.
func (r *relay) SetReset(on bool) {
	r.reset.Store(on)
	if !on {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Linger 0 on both ends first: closing one makes its pipe close the
	// other, which must reset too, not send a FIN.
	for c := range r.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	for c := range r.conns {
		_ = c.Close()
	}
}

// abort closes c with a reset (SO_LINGER 0) instead of a FIN.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Delay returns the current one-way delay.
func (r *relay) currentDelay() time.Duration { return time.Duration(r.delay.Load()) }

// Conns is the number of connections the relay holds open (each relayed
// connection counts twice: the client's and its own to the target).
func (r *relay) openConns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// Close stops the listener and closes every relayed connection.
func (r *relay) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	err := r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		_ = c.Close()
		return false
	}
	if r.reset.Load() {
		abort(c)
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	_ = c.Close()
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		if r.reset.Load() {
			abort(in)
			continue
		}
		if !r.track(in) {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.untrack(in)
			out, err := net.DialTimeout("tcp", r.target, 2*time.Second)
			if err != nil {
				return
			}
			if !r.track(out) {
				return
			}
			defer r.untrack(out)
			up, down := make(chan struct{}), make(chan struct{})
			go func() { r.pipe(out, in); close(up) }()   // client → target
			go func() { r.pipe(in, out); close(down) }() // target → client
			select {
			case <-up:
				// The client half-closed (pipe forwarded it with
				// CloseWrite): the target's replies still in flight
				// must reach it, so wait for the target to finish.
				<-down
			case <-down:
				// The target is done: nothing more can be answered,
				// close both so the client side ends too.
				_ = in.Close()
				_ = out.Close()
				<-up
			}
		}()
	}
}

type chunk struct {
	due  time.Time
	data []byte
}

// pipe copies src to dst, holding every chunk until its due time.
func (r *relay) pipe(dst, src net.Conn) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		read := stampedReader(src)
		for {
			n, at, err := read(buf)
			if n > 0 {
				q <- chunk{due: at.Add(r.currentDelay()), data: append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}
		if _, err := dst.Write(c.data); err != nil {
			_ = src.Close() // unblocks the reader
			// drain so the reader can finish
			for range q {
			}
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok && !r.reset.Load() {
		// (In reset mode dst is about to be reset: no FIN first.)
		_ = tc.CloseWrite()
	}
}

// plainReader reads c, stamping each read with the time it returned.
func plainReader(c net.Conn) func([]byte) (int, time.Time, error) {
	return func(p []byte) (int, time.Time, error) {
		n, err := c.Read(p)
		return n, time.Now(), err
	}
}

package memcached

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/counter"
	"github.com/poplimit/poplimit/proxy/fastconn"
)

// PipeConfig configures NewPipeStore. Zero means default.
type PipeConfig struct {
	// Addr is host:port of mcproxy (or of one memcached). Required.
	Addr string
	// Timeout bounds each call (dial, write and read); default 100ms. A
	// context deadline that comes sooner wins.
	Timeout time.Duration
	// MaxIdleConns is the number of idle connections kept; default 256.
	MaxIdleConns int
	// Multiplex, when > 0, shares that many connections between all
	// callers instead of giving each call a connection of its own: calls
	// arriving together are written in one write and their replies read
	// in order (far fewer syscalls per call under concurrency). A call
	// that fails on such a connection (timeout, I/O, protocol) fails every
	// call in flight on it, and the connection is replaced. 0 (default):
	// one pooled connection per call.
	Multiplex int
	// MuxInFlight, with Multiplex, is the number of writes a multiplexed
	// connection has awaiting replies before it holds new calls back: a
	// call that finds that many in flight waits (at most until the oldest
	// write's replies are read) so that every call arriving meanwhile
	// goes in the same next write: one round trip for many calls under
	// load, none held back when the connection is quiet. Default 1.
	MuxInFlight int
	// Wire, when set, counts the store's network round trips: writes on
	// its connections, each carrying every request that was ready to go
	// together (a multiplexed connection writes many calls at once); nil
	// counts none.
	Wire *WireCounter
}

// PipeStore is a Store over one memcached endpoint (usually the host's
// mcproxy) speaking the text protocol itself, so it can pipeline: it
// implements counter.Batcher by writing "get prev… / add cur 0 / incr cur n" in one
// write and reading the three replies, one round trip. Safe for concurrent
// use. Every key of one call must live on one shard (true for the window
// keys of one identity thanks to the hash tag).
type PipeStore struct {
	cfg  PipeConfig
	idle chan *pipeConn
	mux  []muxSlot // len cfg.Multiplex
	rr   atomic.Uint64
}

var (
	_ counter.Store   = (*PipeStore)(nil)
	_ counter.Batcher = (*PipeStore)(nil)
)

type pipeConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// NewPipeStore returns a PipeStore; connections are dialled on demand.
func NewPipeStore(cfg PipeConfig) *PipeStore {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	if cfg.MaxIdleConns <= 0 {
		cfg.MaxIdleConns = 256
	}
	if cfg.MuxInFlight <= 0 {
		cfg.MuxInFlight = 1
	}
	return &PipeStore{cfg: cfg, idle: make(chan *pipeConn, cfg.MaxIdleConns), mux: make([]muxSlot, max(0, cfg.Multiplex))}
}

// Close closes the idle connections (and the multiplexed ones: calls in
// flight on them fail).
func (p *PipeStore) Close() error {
	for i := range p.mux {
		s := &p.mux[i]
		s.mu.Lock()
		if s.mc != nil {
			s.mc.fail(net.ErrClosed)
			s.mc = nil
		}
		s.mu.Unlock()
	}
	p.closeIdle()
	return nil
}

// closeIdle closes the idle connections.
func (p *PipeStore) closeIdle() {
	for {
		select {
		case c := <-p.idle:
			c.c.Close()
		default:
			return
		}
	}
}

// do runs fn on a pooled connection with the call's deadline; the
// connection goes back to the pool only when fn succeeded or failed with a
// Store sentinel (the stream is then still in sync). When fn fails on a
// reused connection that the server closed (connGone), the idle
// connections are dropped and fn runs once more on a new one.
func (p *PipeStore) do(ctx context.Context, fn func(*pipeConn) error) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(p.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for retried := false; ; retried = true {
		var pc *pipeConn
		reused := false
		if !retried {
			select {
			case pc = <-p.idle:
				reused = true
			default:
			}
		}
		if pc == nil {
			fc, err := p.dial(ctx, deadline)
			if err != nil {
				return err
			}
			pc = &pipeConn{c: fc, r: bufio.NewReaderSize(fc, 4096), w: bufio.NewWriterSize(fc, 4096)}
		}
		if err := pc.c.SetDeadline(deadline); err != nil {
			pc.c.Close()
			return err
		}
		err := fn(pc)
		if err == nil || errors.Is(err, counter.ErrNotFound) || errors.Is(err, counter.ErrNotStored) || errors.Is(err, counter.ErrCASConflict) {
			select {
			case p.idle <- pc:
			default:
				pc.c.Close()
			}
			return err
		}
		pc.c.Close()
		if reused && connGone(err) {
			// The server closed a pooled connection (restart): so it
			// did the other idle ones. Once more on a new connection.
			p.closeIdle()
			continue
		}
		return fmt.Errorf("memcached: %s: %w", p.cfg.Addr, err)
	}
}

// dial connects to the endpoint by deadline; the connection is a FastConn.
func (p *PipeStore) dial(ctx context.Context, deadline time.Time) (net.Conn, error) {
	d := net.Dialer{Deadline: deadline}
	c, err := d.DialContext(ctx, "tcp", p.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("memcached: dial: %w", err)
	}
	return p.cfg.Wire.wrap(fastconn.New(c)), nil
}

// call writes a request with write and reads its replies with read: on a
// pooled connection of its own, or on a multiplexed one (Multiplex).
func (p *PipeStore) call(ctx context.Context, write func(*bufio.Writer), read func(*pipeConn) error) error {
	if len(p.mux) > 0 {
		return p.callMux(ctx, write, read)
	}
	return p.do(ctx, func(pc *pipeConn) error {
		write(pc.w)
		if err := pc.w.Flush(); err != nil {
			return err
		}
		return read(pc)
	})
}

// storeReply reads the reply of add/cas (readStoreReply).
func (pc *pipeConn) storeReply() error { return readStoreReply(pc.r) }

// numReply reads the reply of incr/decr (readNumReply).
func (pc *pipeConn) numReply() (uint64, error) { return readNumReply(pc.r) }

// values reads the reply of get (cas nil) or gets into out (ReadValues);
// cas receives the cas id of gets.
func (pc *pipeConn) values(out map[string][]byte, cas *uint64) error {
	return ReadValues(pc.r, cas != nil, func(key string, data []byte, id uint64) {
		out[key] = data
		if cas != nil {
			*cas = id
		}
	})
}

func writeStore(w *bufio.Writer, verb, key string, value []byte, ttl time.Duration, cas uint64) {
	w.WriteString(verb)
	w.WriteByte(' ')
	w.WriteString(key)
	w.WriteString(" 0 ")
	w.WriteString(strconv.FormatInt(int64(expiration(ttl)), 10))
	w.WriteByte(' ')
	w.WriteString(strconv.Itoa(len(value)))
	if verb == "cas" {
		w.WriteByte(' ')
		w.WriteString(strconv.FormatUint(cas, 10))
	}
	w.WriteString("\r\n")
	w.Write(value)
	w.WriteString("\r\n")
}

func writeGet(w *bufio.Writer, verb string, keys []string) {
	w.WriteString(verb)
	for _, k := range keys {
		w.WriteByte(' ')
		w.WriteString(k)
	}
	w.WriteString("\r\n")
}

func writeArith(w *bufio.Writer, verb, key string, delta uint64) {
	w.WriteString(verb)
	w.WriteByte(' ')
	w.WriteString(key)
	w.WriteByte(' ')
	w.WriteString(strconv.FormatUint(delta, 10))
	w.WriteString("\r\n")
}

// Add implements Store.
func (p *PipeStore) Add(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return p.call(ctx, func(w *bufio.Writer) { writeStore(w, "add", key, value, ttl, 0) }, (*pipeConn).storeReply)
}

func (p *PipeStore) arith(ctx context.Context, verb, key string, delta uint64) (v uint64, err error) {
	err = p.call(ctx, func(w *bufio.Writer) { writeArith(w, verb, key, delta) }, func(pc *pipeConn) error {
		v, err = pc.numReply()
		return err
	})
	return v, err
}

// Incr implements Store.
func (p *PipeStore) Incr(ctx context.Context, key string, delta uint64) (uint64, error) {
	return p.arith(ctx, "incr", key, delta)
}

// Decr implements Store.
func (p *PipeStore) Decr(ctx context.Context, key string, delta uint64) (uint64, error) {
	return p.arith(ctx, "decr", key, delta)
}

// GetMulti implements Store.
func (p *PipeStore) GetMulti(ctx context.Context, keys []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	err := p.call(ctx, func(w *bufio.Writer) { writeGet(w, "get", keys) }, func(pc *pipeConn) error {
		return pc.values(out, nil)
	})
	return out, err
}

// Gets implements Store.
func (p *PipeStore) Gets(ctx context.Context, key string) ([]byte, counter.CASToken, error) {
	out := make(map[string][]byte, 1)
	var cas uint64
	err := p.call(ctx, func(w *bufio.Writer) { writeGet(w, "gets", []string{key}) }, func(pc *pipeConn) error {
		return pc.values(out, &cas)
	})
	if err != nil {
		return nil, nil, err
	}
	v, ok := out[key]
	if !ok {
		return nil, nil, counter.ErrNotFound
	}
	return v, cas, nil
}

// CompareAndSwap implements Store.
func (p *PipeStore) CompareAndSwap(ctx context.Context, key string, value []byte, cas counter.CASToken, ttl time.Duration) error {
	id, ok := cas.(uint64)
	if !ok {
		return fmt.Errorf("%w: foreign CAS token %T", counter.ErrCASConflict, cas)
	}
	return p.call(ctx, func(w *bufio.Writer) { writeStore(w, "cas", key, value, ttl, id) }, (*pipeConn).storeReply)
}

// GetMultiIncr implements counter.Batcher: "get keys…", "add incrKey 0", "incr
// incrKey delta" in one write, three replies in one read.
func (p *PipeStore) GetMultiIncr(ctx context.Context, keys []string, incrKey string, delta uint64, ttl time.Duration) (map[string][]byte, uint64, error) {
	out := make(map[string][]byte, len(keys))
	var v uint64
	err := p.call(ctx, func(w *bufio.Writer) {
		if len(keys) > 0 {
			writeGet(w, "get", keys)
		}
		writeStore(w, "add", incrKey, []byte("0"), ttl, 0)
		writeArith(w, "incr", incrKey, delta)
	}, func(pc *pipeConn) error {
		if len(keys) > 0 {
			if err := pc.values(out, nil); err != nil {
				return err
			}
		}
		if err := pc.storeReply(); err != nil && !errors.Is(err, counter.ErrNotStored) {
			return err
		}
		var err error
		v, err = pc.numReply()
		if errors.Is(err, counter.ErrNotFound) {
			// Evicted or expired between add and incr: the stream is in
			// sync, the caller may retry.
			return fmt.Errorf("%w: %s vanished after add", counter.ErrContention, incrKey)
		}
		return err
	})
	return out, v, err
}

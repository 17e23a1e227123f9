package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// PoolConfig configures a Pool of connections to one memcached. Zero means
// default.
type PoolConfig struct {
	// Addr is the memcached's "host:port" (required).
	Addr string
	// Connections is the number of pipelined connections (Twemproxy's
	// server_connections); default 1.
	Connections int
	// Timeout bounds every request, from its arrival at the proxy to its
	// reply, and every connect (Twemproxy's timeout); default 1s.
	Timeout time.Duration
	// QueueLen is the number of requests that may wait for each
	// connection's writer; default 4096. Do blocks when it is full.
	QueueLen int
	// OnFailure, when set, is called once per I/O failure of the shard (a
	// failed connect, a broken or timed-out connection), and OnRecover once
	// per first success after failures. They feed shard.Health.
	OnFailure func(now time.Time, err error)
	OnRecover func(now time.Time)
}

func (c PoolConfig) connections() int {
	if c.Connections > 0 {
		return c.Connections
	}
	return 1
}

func (c PoolConfig) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return time.Second
}

func (c PoolConfig) queueLen() int {
	if c.QueueLen > 0 {
		return c.QueueLen
	}
	return 4096
}

const (
	maxBatch      = 64 << 10 // bytes written per flush to a shard
	readBufSize   = 64 << 10
	pendingPerCon = 4096
)

// Pool is a Backend for one memcached: a few connections, each with a
// writer goroutine that drains its queue and writes a batch of requests
// with one syscall, and a reader goroutine that matches replies to requests
// in FIFO order. Connections are dialled lazily and redialled after a
// failure; when a connection fails, every request pending on it finishes
// with the error at once. Pool is safe for concurrent use.
type Pool struct {
	cfg     PoolConfig
	conns   []*poolConn
	mu      sync.RWMutex // held shared by Do, exclusively by Close
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
	failing atomic.Bool
}

var (
	_ Backend = (*Pool)(nil)
	_ Prober  = (*Pool)(nil)
)

// NewPool returns a Pool for cfg.Addr; it does not connect yet.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.Addr == "" {
		return nil, errors.New("proxy: pool needs an address")
	}
	p := &Pool{cfg: cfg, closing: make(chan struct{})}
	p.conns = make([]*poolConn, cfg.connections())
	for i := range p.conns {
		pc := &poolConn{p: p, queue: make(chan *Call, cfg.queueLen())}
		p.conns[i] = pc
		p.wg.Add(1)
		go pc.run()
	}
	return p, nil
}

// Addr returns the shard's address.
func (p *Pool) Addr() string { return p.cfg.Addr }

// Do queues c on connection c.Conn mod Connections.
func (p *Pool) Do(c *Call) {
	if c.Start.IsZero() {
		c.Start = time.Now()
	}
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		c.Finish(ErrBackendClosed)
		return
	}
	pc := p.conns[c.Conn%uint64(len(p.conns))]
	select {
	case pc.queue <- c:
	case <-p.closing:
		c.Finish(ErrBackendClosed)
	}
	p.mu.RUnlock()
}

// Close closes every connection; pending calls finish with
// ErrBackendClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	close(p.closing)
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	for _, pc := range p.conns {
		pc.failQueued(ErrBackendClosed)
	}
	return nil
}

// Probe dials a new connection and checks that the shard answers
// "version"; ctx's deadline, or the pool timeout, bounds it.
func (p *Pool) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.timeout())
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", p.cfg.Addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if _, err := nc.Write([]byte("version\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(nc).ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("VERSION ")) {
		return fmt.Errorf("%w: %q", ErrBadReply, line)
	}
	return nil
}

func (p *Pool) fail(err error) {
	p.failing.Store(true)
	if p.cfg.OnFailure != nil {
		p.cfg.OnFailure(time.Now(), err)
	}
}

func (p *Pool) ok() {
	if p.failing.Load() && p.failing.CompareAndSwap(true, false) && p.cfg.OnRecover != nil {
		p.cfg.OnRecover(time.Now())
	}
}

type poolConn struct {
	p     *Pool
	queue chan *Call
	wbuf  []byte
}

func (pc *poolConn) failQueued(err error) {
	for {
		select {
		case c := <-pc.queue:
			c.Finish(err)
		default:
			return
		}
	}
}

// run is the connection's writer: it dials on demand and writes batches.
func (pc *poolConn) run() {
	defer pc.p.wg.Done()
	p := pc.p
	for {
		var first *Call
		select {
		case first = <-pc.queue:
		case <-p.closing:
			pc.failQueued(ErrBackendClosed)
			return
		}
		d := net.Dialer{Timeout: p.cfg.timeout()}
		nc, err := d.Dial("tcp", p.cfg.Addr)
		if err != nil {
			err = fmt.Errorf("connect %s: %w", p.cfg.Addr, err)
			p.fail(err)
			first.Finish(err)
			pc.failQueued(err)
			continue
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		s := &session{
			nc:      nc,
			pending: make(chan *Call, pendingPerCon),
			broken:  make(chan struct{}),
			timeout: p.cfg.timeout(),
			p:       p,
		}
		done := make(chan struct{})
		go func() { s.read(); close(done) }()
		pc.write(s, first)
		_ = nc.Close()
		close(s.pending)
		<-done
		select {
		case <-p.closing:
			pc.failQueued(ErrBackendClosed)
			return
		default:
		}
	}
}

// write sends batches on s until the session breaks or the pool closes.
func (pc *poolConn) write(s *session, c *Call) {
	p := pc.p
	for {
		buf := pc.wbuf[:0]
	batch:
		for {
			buf = c.Req.AppendWire(buf)
			s.pending <- c
			if len(buf) >= maxBatch {
				break
			}
			select {
			case c = <-pc.queue:
			default:
				break batch
			}
		}
		_ = s.nc.SetWriteDeadline(time.Now().Add(s.timeout))
		_, err := s.nc.Write(buf)
		if cap(buf) <= 4*maxBatch {
			pc.wbuf = buf[:0]
		}
		if err != nil {
			err = fmt.Errorf("write %s: %w", p.cfg.Addr, err)
			if s.setErr(err) {
				p.fail(err)
			}
			return
		}
		select {
		case c = <-pc.queue:
		case <-s.broken:
			return
		case <-p.closing:
			s.setErr(ErrBackendClosed)
			return
		}
	}
}

// session is one live connection: the reader matches replies to pending.
type session struct {
	nc      net.Conn
	pending chan *Call
	timeout time.Duration
	p       *Pool

	once   sync.Once
	err    error
	broken chan struct{}
}

// setErr breaks the session with err; it reports whether this call was
// the one that broke it.
func (s *session) setErr(err error) (first bool) {
	s.once.Do(func() {
		first = true
		s.err = err
		close(s.broken)
		_ = s.nc.Close()
	})
	return first
}

func (s *session) read() {
	br := bufio.NewReaderSize(s.nc, readBufSize)
	var lastDeadline time.Time
	for c := range s.pending {
		select {
		case <-s.broken:
			c.Finish(s.err)
			continue
		default:
		}
		dl := c.Start.Add(s.timeout)
		if d := dl.Sub(lastDeadline); d > time.Millisecond || d < -time.Millisecond {
			_ = s.nc.SetReadDeadline(dl)
			lastDeadline = dl
		}
		if err := readReply(br, c); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = ErrTimeout
			} else if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("%s closed the connection", s.p.cfg.Addr)
			}
			if s.setErr(err) {
				s.p.fail(err)
			}
			c.Finish(s.err)
			continue
		}
		s.p.ok()
		c.Finish(nil)
	}
}

var (
	endLine   = []byte("END\r\n")
	valuePref = []byte("VALUE ")
)

// readReply appends one complete memcached reply to c.Reply.
func readReply(br *bufio.Reader, c *Call) error {
	if !c.Req.Cmd.IsRetrieval() {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		c.Reply = append(c.Reply, line...)
		return nil
	}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		c.Reply = append(c.Reply, line...)
		if !bytes.HasPrefix(line, valuePref) {
			return nil // END, or an error line
		}
		n, ok := valueLen(line)
		if !ok {
			return fmt.Errorf("%w: %q", ErrBadReply, line)
		}
		old := len(c.Reply)
		c.Reply = slices.Grow(c.Reply, n+2)[:old+n+2]
		if _, err := io.ReadFull(br, c.Reply[old:]); err != nil {
			return err
		}
		if !bytes.HasSuffix(c.Reply, []byte("\r\n")) {
			return fmt.Errorf("%w: value not ended by CRLF", ErrBadReply)
		}
	}
}

// valueLen returns the <bytes> field of "VALUE <key> <flags> <bytes> [<cas>]\r\n".
func valueLen(line []byte) (int, bool) {
	f := line[len(valuePref):]
	for i := 0; i < 2; i++ {
		j := bytes.IndexByte(f, ' ')
		if j < 0 {
			return 0, false
		}
		f = f[j+1:]
	}
	end := 0
	for end < len(f) && f[end] >= '0' && f[end] <= '9' {
		end++
	}
	if end == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(f[:end]))
	if err != nil || n > 1<<30 {
		return 0, false
	}
	return n, true
}

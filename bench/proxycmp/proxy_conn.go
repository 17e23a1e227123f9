package proxycmp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/poplimit/poplimit/bench"
	"github.com/poplimit/poplimit/proxy/protocol"
)

var (
	replyStored    = []byte("STORED\r\n")
	replyNotStored = []byte("NOT_STORED\r\n")
	replyNotFound  = []byte("NOT_FOUND\r\n")
	value16        = []byte("0123456789abcdef")
)

// errReply is a reply the mix did not expect; the connection stays usable.
type errReply struct {
	op   string
	line []byte
}

func (e *errReply) Error() string { return fmt.Sprintf("%s: unexpected reply %q", e.op, e.line) }

// loadConn is one closed-loop connection with its own buffers, random
// source and histogram: no sharing, no allocation per request.
type loadConn struct {
	cfg      ProxyLoadConfig
	c        net.Conn
	r        *bufio.Reader
	w        *bufio.Writer
	rng      *rand.Rand
	hist     *bench.Latency
	nkeys    uint64
	prefix   string
	ops      int64
	errs     int64
	hits     int64
	misses   int64
	firstErr error
}

func newLoadConn(c net.Conn, cfg ProxyLoadConfig, i uint64) *loadConn {
	return &loadConn{
		cfg: cfg, c: c,
		r:      bufio.NewReaderSize(c, 16<<10),
		w:      bufio.NewWriterSize(c, 4<<10),
		rng:    rand.New(rand.NewPCG(cfg.seed(), i)),
		hist:   bench.NewLatency(),
		nkeys:  uint64(cfg.keys()),
		prefix: cfg.keyPrefix(),
	}
}

func (l *loadConn) close() {
	if l.c != nil {
		_ = l.c.Close()
	}
}

// run loops until stop; deadline bounds any single stalled request. After
// an I/O error it redials (counting the error) unless stopping.
func (l *loadConn) run(mix string, stop *atomic.Bool, deadline time.Time) {
	_ = l.c.SetDeadline(deadline)
	for !stop.Load() {
		t0 := time.Now()
		var err error
		switch mix {
		case mixIncr:
			err = l.incr()
		case mixGetSet:
			err = l.getset()
		case mixMGet:
			err = l.mget()
		case mixGet:
			err = l.get(l.randKey())
		case mixSet:
			err = l.set(l.randKey())
		}
		if err == nil {
			l.ops++
			l.hist.Record(time.Since(t0))
			continue
		}
		l.errs++
		if l.firstErr == nil {
			l.firstErr = err
		}
		var pe *errReply
		if errors.As(err, &pe) {
			continue
		}
		// I/O error: the connection's state is unknown; start afresh.
		l.close()
		if stop.Load() || time.Now().After(deadline) {
			l.c = nil
			return
		}
		c, derr := net.DialTimeout("tcp", l.cfg.Addr, l.cfg.timeout())
		if derr != nil {
			l.c = nil
			return
		}
		l.c = c
		l.r.Reset(c)
		l.w.Reset(c)
		_ = c.SetDeadline(deadline)
	}
}

func (l *loadConn) writeKey(k uint64) {
	l.w.WriteString(l.prefix)
	l.w.Write(strconv.AppendUint(l.w.AvailableBuffer(), k, 10))
}

func (l *loadConn) randKey() uint64 { return l.rng.Uint64N(l.nkeys) }

func (l *loadConn) writeSet(k uint64) {
	l.w.WriteString("set ")
	l.writeKey(k)
	l.w.WriteString(" 0 0 16\r\n")
	l.w.Write(value16)
	l.w.WriteString("\r\n")
}

func (l *loadConn) incr() error {
	k := l.randKey()
	l.w.WriteString("incr ")
	l.writeKey(k)
	l.w.WriteString(" 1\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	line, err := l.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) > 2 && line[0] >= '0' && line[0] <= '9' {
		return nil
	}
	if !bytes.Equal(line, replyNotFound) {
		return &errReply{"incr", bytes.Clone(line)}
	}
	l.w.WriteString("add ")
	l.writeKey(k)
	l.w.WriteString(" 0 0 1\r\n1\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	if line, err = l.r.ReadSlice('\n'); err != nil {
		return err
	}
	if bytes.Equal(line, replyStored) {
		return nil
	}
	if !bytes.Equal(line, replyNotStored) {
		return &errReply{"add", bytes.Clone(line)}
	}
	// Another connection created the key first: count on it.
	l.w.WriteString("incr ")
	l.writeKey(k)
	l.w.WriteString(" 1\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	if line, err = l.r.ReadSlice('\n'); err != nil {
		return err
	}
	if len(line) > 2 && line[0] >= '0' && line[0] <= '9' {
		return nil
	}
	return &errReply{"incr", bytes.Clone(line)}
}

func (l *loadConn) getset() error {
	k := l.randKey()
	if l.rng.Uint32N(10) == 0 {
		return l.set(k)
	}
	return l.get(k)
}

// set sets key k to a 16-byte value.
func (l *loadConn) set(k uint64) error {
	l.writeSet(k)
	if err := l.w.Flush(); err != nil {
		return err
	}
	line, err := l.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.Equal(line, replyStored) {
		return &errReply{"set", bytes.Clone(line)}
	}
	return nil
}

// get reads key k.
func (l *loadConn) get(k uint64) error {
	l.w.WriteString("get ")
	l.writeKey(k)
	l.w.WriteString("\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	return l.readValues("get", 1)
}

func (l *loadConn) mget() error {
	l.w.WriteString("get")
	for i := 0; i < 4; i++ {
		l.w.WriteByte(' ')
		l.writeKey(l.randKey())
	}
	l.w.WriteString("\r\n")
	if err := l.w.Flush(); err != nil {
		return err
	}
	return l.readValues("mget", 4)
}

// readValues reads VALUE blocks up to END for a get of n keys.
func (l *loadConn) readValues(op string, n int) error {
	found := 0
	for {
		line, err := l.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if bytes.Equal(line, protocol.EndLine) {
			l.hits += int64(found)
			l.misses += int64(n - found)
			return nil
		}
		size, ok := parseValueLine(line)
		if !ok {
			return &errReply{op, bytes.Clone(line)}
		}
		if _, err := l.r.Discard(size + 2); err != nil {
			return err
		}
		found++
	}
}

// parseValueLine returns the data length of a whole "VALUE <key> <flags>
// <bytes> [<cas>]\r\n" line, read by protocol.ValueLen.
func parseValueLine(line []byte) (int, bool) {
	if !bytes.HasPrefix(line, protocol.ValuePrefix) || !bytes.HasSuffix(line, []byte("\r\n")) {
		return 0, false
	}
	if n := len(bytes.Fields(line)); n != 4 && n != 5 {
		return 0, false
	}
	return protocol.ValueLen(line)
}

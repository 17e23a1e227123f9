package proxy

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// How a client's request is answered:
//
//   - one shard: the shard's reply is passed through byte for byte;
//   - a multi-key get spanning shards: one sub-request per shard, sent in
//     parallel, and the VALUE blocks merged back in the client's key order
//     (duplicates included) with one END. If any shard fails (timeout,
//     refused, ejected mid-flight) the client gets one
//     "SERVER_ERROR <reason>" line for the whole get and no partial values:
//     a partial answer would look like misses, and a rate limiter reading
//     a missing counter as zero would over-admit. If a shard answers an
//     error line, that line is the whole reply;
//   - flush_all and verbosity: sent to every live shard; "OK" when every
//     shard said OK, else the first failure;
//   - version, stats, and protocol errors: answered by the proxy itself.
type entryKind uint8

const (
	kindLocal entryKind = iota
	kindSingle
	kindMulti
	kindBroadcast
	kindSingleOverride // wait for the call, then answer local (too large set)
)

type entry struct {
	kind    entryKind
	noreply bool
	req     protocol.Request
	raw     []byte
	local   []byte
	calls   []*Call
	keyCall []int32 // multi: index into calls of each key
	cursor  []int   // multi: read position in each call's reply
	held    int64   // bytes counted against the client's MaxClientBytes
}

var entryPool = sync.Pool{New: func() any { return new(entry) }}
var callPool = sync.Pool{New: func() any { return NewCall() }}

func getEntry() *entry { return entryPool.Get().(*entry) }

func releaseEntry(e *entry) {
	for i, c := range e.calls {
		c.reset()
		callPool.Put(c)
		e.calls[i] = nil
	}
	e.calls = e.calls[:0]
	e.local = e.local[:0]
	e.keyCall = e.keyCall[:0]
	e.cursor = e.cursor[:0]
	e.noreply = false
	e.req.Reset()
	if cap(e.raw) > 64<<10 {
		e.raw = nil
	}
	entryPool.Put(e)
}

func (cc *clientConn) newCall(e *entry, req *protocol.Request) *Call {
	c := callPool.Get().(*Call)
	c.Req = req
	c.Conn = cc.id
	c.budget = &cc.held
	c.est = &cc.replyEst
	c.perKey = cc.perKey
	if cc.sock.Raw() {
		c.owner = cc
	} else {
		c.wake = cc.wake
	}
	c.Start = cc.s.now()
	e.calls = append(e.calls, c)
	return c
}

// replyError queues a protocol error reply.
func (cc *clientConn) replyError(req *protocol.Request, re *protocol.ReplyError) {
	e := getEntry()
	e.kind = kindLocal
	e.noreply = req.Noreply
	e.local = append(append(e.local, re.Reply...), "\r\n"...)
	if re == protocol.ErrTooLarge && req.Cmd == protocol.CmdMs && len(req.Keys) == 1 {
		cc.metaUnlink(e, req)
	}
	if re == protocol.ErrTooLarge && req.Cmd == protocol.CmdSet && len(req.Keys) == 1 {
		// memcached unlinks the old value of a set it cannot store.
		e.raw = append(e.raw[:0], req.Keys[0]...)
		e.req.Cmd = protocol.CmdDelete
		e.req.Keys = append(e.req.Keys, e.raw)
		r := cc.s.router.Load()
		if i := r.Locate(e.raw); i >= 0 {
			e.kind = kindSingleOverride
			r.do(i, cc.newCall(e, &e.req))
		}
	}
	cc.queue(e)
}

// dispatch copies the parsed request out of the read buffer, routes it and
// queues it for the writer. base is the buffer given to Parse, n the bytes
// the request spans.
func (cc *clientConn) dispatch(req *protocol.Request, base []byte, n int, held int64) {
	s := cc.s
	s.st.cmds[req.Cmd].Add(1)
	e := getEntry()
	e.held = held
	e.noreply = req.Noreply
	if req.Cmd.IsMeta() {
		cc.dispatchMeta(e, req, base, n)
		return
	}
	switch req.Cmd {
	case protocol.CmdVersion:
		e.kind = kindLocal
		e.local = append(e.local, s.version...)
		cc.queue(e)
		return
	case protocol.CmdStats:
		e.kind = kindLocal
		e.local = s.appendStats(e.local)
		cc.queue(e)
		return
	}
	// Copy the request's bytes and rebase its slices onto the copy (they
	// are all sub-slices of base: offset = cap(base) - cap(slice)).
	e.raw = append(e.raw[:0], base[:n]...)
	e.req = protocol.Request{
		Cmd: req.Cmd, Keys: e.req.Keys[:0], Flags: req.Flags, Exptime: req.Exptime,
		Cas: req.Cas, Delta: req.Delta, Delay: req.Delay, HasDelay: req.HasDelay,
		Level: req.Level, // backends never see noreply; e.noreply drops the reply
	}
	for _, k := range req.Keys {
		off := cap(base) - cap(k)
		e.req.Keys = append(e.req.Keys, e.raw[off:off+len(k):off+len(k)])
	}
	if req.Data != nil {
		off := cap(base) - cap(req.Data)
		e.req.Data = e.raw[off : off+len(req.Data) : off+len(req.Data)]
	}
	r := s.router.Load()
	switch {
	case req.Cmd.IsBroadcast():
		e.kind = kindBroadcast
		for i := 0; i < r.Len(); i++ {
			if r.m.Live(i) {
				r.do(i, cc.newCall(e, &e.req))
			}
		}
		if len(e.calls) == 0 {
			e.kind = kindLocal
			e.local = appendServerError(e.local, ErrNoShard)
		}
	case req.Cmd.IsRetrieval() && len(e.req.Keys) != 1:
		cc.dispatchMulti(e)
	default:
		i := r.Locate(e.req.Keys[0])
		if i < 0 {
			e.kind = kindLocal
			e.local = appendServerError(e.local, ErrNoShard)
			break
		}
		e.kind = kindSingle
		r.do(i, cc.newCall(e, &e.req))
	}
	cc.queue(e)
}

// dispatchMulti splits a many-key retrieval by shard.
func (cc *clientConn) dispatchMulti(e *entry) {
	r := cc.s.router.Load()
	keys := e.req.Keys
	if len(keys) == 0 {
		e.kind = kindLocal
		e.local = append(e.local, protocol.EndLine...)
		return
	}
	var shardCallArr [16]int32
	var shardCall []int32
	if r.Len() <= len(shardCallArr) {
		shardCall = shardCallArr[:r.Len()]
	} else {
		shardCall = make([]int32, r.Len())
	}
	for i := range shardCall {
		shardCall[i] = -1
	}
	for _, k := range keys {
		i := r.Locate(k)
		if i < 0 {
			e.kind = kindLocal
			e.local = appendServerError(e.local, ErrNoShard)
			for _, c := range e.calls { // never sent
				c.reset()
				callPool.Put(c)
			}
			e.calls = e.calls[:0]
			e.keyCall = e.keyCall[:0]
			return
		}
		ci := shardCall[i]
		if ci < 0 {
			ci = int32(len(e.calls))
			shardCall[i] = ci
			c := cc.newCall(e, nil)
			c.shard = i
			c.req.Cmd, c.req.Exptime = e.req.Cmd, e.req.Exptime
			c.Req = &c.req
		}
		c := e.calls[ci]
		c.req.Keys = append(c.req.Keys, k)
		e.keyCall = append(e.keyCall, ci)
	}
	if len(e.calls) == 1 {
		// One shard: pass the request and its reply through.
		e.kind = kindSingle
		c := e.calls[0]
		c.Req = &e.req
		r.do(c.shard, c)
		return
	}
	e.kind = kindMulti
	for _, c := range e.calls {
		r.do(c.shard, c)
	}
}

// respond waits for e's calls and writes its reply.
func (s *Server) respond(bw io.Writer, e *entry) {
	for _, c := range e.calls {
		c.Wait()
		c.router.finished(c)
	}
	var out []byte
	switch e.kind {
	case kindLocal, kindSingleOverride:
		out = e.local
	case kindSingle:
		c := e.calls[0]
		if c.Err != nil {
			e.local = appendServerError(e.local, c.Err)
			out = e.local
		} else {
			out = metaReply(&e.req, c.Reply)
		}
	case kindBroadcast:
		out = okLine
		for _, c := range e.calls {
			if c.Err != nil {
				e.local = appendServerError(e.local, c.Err)
				out = e.local
				break
			}
			if !bytes.Equal(c.Reply, okLine) {
				out = c.Reply
				break
			}
		}
	case kindMulti:
		s.writeMerged(bw, e)
		return
	}
	if e.noreply {
		return
	}
	if bytes.HasPrefix(out, serverErrorPrefix) {
		s.st.serverErrors.Add(1)
	}
	_, _ = bw.Write(out)
}

var (
	okLine            = []byte("OK\r\n")
	serverErrorPrefix = []byte("SERVER_ERROR ")
)

// writeMerged writes the VALUE blocks of a split retrieval in client key
// order; see entryKind for the failure rule.
func (s *Server) writeMerged(bw io.Writer, e *entry) {
	for _, c := range e.calls {
		if c.Err != nil {
			e.local = appendServerError(e.local, c.Err)
			s.st.serverErrors.Add(1)
			_, _ = bw.Write(e.local)
			return
		}
		if !bytes.HasSuffix(c.Reply, protocol.EndLine) {
			// An error line from the shard: it is the whole reply.
			_, _ = bw.Write(c.Reply)
			return
		}
	}
	for range e.calls {
		e.cursor = append(e.cursor, 0)
	}
	for i, k := range e.req.Keys {
		ci := e.keyCall[i]
		rep := e.calls[ci].Reply[e.cursor[ci]:]
		if !bytes.HasPrefix(rep, protocol.ValuePrefix) {
			continue
		}
		nl := bytes.IndexByte(rep, '\n')
		line := rep[:nl+1]
		rest := line[len(protocol.ValuePrefix):]
		sp := bytes.IndexByte(rest, ' ')
		if sp < 0 || !bytes.Equal(rest[:sp], k) {
			continue // a miss: the shard's next value is for a later key
		}
		n, ok := protocol.ValueLen(line)
		if !ok || len(line)+n+2 > len(rep) {
			continue
		}
		block := rep[:len(line)+n+2]
		_, _ = bw.Write(block)
		e.cursor[ci] += len(block)
	}
	_, _ = bw.Write(protocol.EndLine)
}

// appendServerError appends "SERVER_ERROR <reason>\r\n" for err.
func appendServerError(dst []byte, err error) []byte {
	msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "proxy: "), "protocol: ")
	msg = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, msg)
	dst = append(dst, serverErrorPrefix...)
	dst = append(dst, msg...)
	return append(dst, "\r\n"...)
}

// serverStats are the proxy's own counters ("stats").
type serverStats struct {
	currConns      atomic.Int64
	parked         atomic.Int64 // client connections with no goroutine (parker)
	totalConns     atomic.Uint64
	protocolErrors atomic.Uint64
	serverErrors   atomic.Uint64
	cmds           [protocol.CmdQuit + 1]atomic.Uint64
}

// appendStats appends the "stats" reply: STAT lines and END. Names: pid,
// uptime, time, version, curr_connections, total_connections,
// cmd_<command> for every command (requests parsed), protocol_errors
// (requests answered ERROR/CLIENT_ERROR or closed), server_errors
// (SERVER_ERROR replies), shards, and per shard i: shard_<i>_addr,
// shard_<i>_live (0 while ejected), shard_<i>_requests (calls sent),
// shard_<i>_errors (calls failed: timeout, refused, ...),
// shard_<i>_ejections.
func (s *Server) appendStats(dst []byte) []byte {
	stat := func(name string, v string) {
		dst = append(dst, "STAT "...)
		dst = append(dst, name...)
		dst = append(dst, ' ')
		dst = append(dst, v...)
		dst = append(dst, "\r\n"...)
	}
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	now := s.now()
	stat("pid", strconv.Itoa(os.Getpid()))
	stat("uptime", strconv.FormatInt(int64(now.Sub(s.started).Seconds()), 10))
	stat("time", strconv.FormatInt(now.Unix(), 10))
	stat("version", strings.TrimSuffix(strings.TrimPrefix(string(s.version), "VERSION "), "\r\n"))
	stat("curr_connections", strconv.FormatInt(s.st.currConns.Load(), 10))
	stat("total_connections", u(s.st.totalConns.Load()))
	for c := protocol.CmdGet; c <= protocol.CmdQuit; c++ {
		stat("cmd_"+c.String(), u(s.st.cmds[c].Load()))
	}
	stat("protocol_errors", u(s.st.protocolErrors.Load()))
	stat("server_errors", u(s.st.serverErrors.Load()))
	rt := s.router.Load()
	stat("shards", strconv.Itoa(rt.Len()))
	servers := rt.m.Servers()
	for i := 0; i < rt.Len(); i++ {
		p := "shard_" + strconv.Itoa(i) + "_"
		hs := rt.m.Health(i).Stats()
		live := "1"
		if hs.Ejected {
			live = "0"
		}
		stat(p+"addr", servers[i].Addr)
		stat(p+"live", live)
		stat(p+"requests", u(rt.stats[i].requests.Load()))
		stat(p+"errors", u(rt.stats[i].errors.Load()))
		stat(p+"ejections", u(hs.Ejections))
	}
	return append(dst, protocol.EndLine...)
}

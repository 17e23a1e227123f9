package proxy

// How the proxy answers meta requests (parsed in meta.go):
//
//   - mn is answered by the proxy itself, "MN", in its place in the
//     client's pipeline: the writer answers entries in order, so MN comes
//     after every earlier reply, whichever shards those came from;
//   - mg, ms, md, ma and me go to the shard owning their key (the decoded
//     key for a b key, through the hash tag), their line forwarded as
//     received. A quiet (q) request is followed by "mn" on the shard's
//     connection, so the shard itself applies memcached's rules for what q
//     suppresses and every forwarded request gets a reply to match in FIFO
//     order; the proxy drops the shard's MN and writes what came before it
//     (possibly nothing);
//   - errors (bad flags, a shard down) are always written, as memcached
//     writes its errors whatever q says.

import (
	"bytes"

	"github.com/poplimit/poplimit/proxy/protocol"
)

// dispatchMeta is dispatch for a meta command: e is the entry dispatch
// started, req the parsed request pointing into base, n its length.
func (cc *clientConn) dispatchMeta(e *entry, req *protocol.Request, base []byte, n int) {
	e.noreply = false
	if req.Cmd == protocol.CmdMn {
		e.kind = kindLocal
		e.local = append(e.local, protocol.MNLine...)
		cc.queue(e)
		return
	}
	e.raw = append(e.raw[:0], base[:n]...)
	rebase := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		off := cap(base) - cap(b)
		return e.raw[off : off+len(b) : off+len(b)]
	}
	e.req = protocol.Request{
		Cmd: req.Cmd, Keys: append(e.req.Keys[:0], rebase(req.Keys[0])),
		Line: rebase(req.Line), MetaFlags: rebase(req.MetaFlags), Data: rebase(req.Data),
		Quiet: req.Quiet, Base64: req.Base64,
	}
	r := cc.s.router.Load()
	i := r.Locate(e.hashKey())
	if i < 0 {
		e.kind = kindLocal
		e.local = appendServerError(e.local, ErrNoShard)
	} else {
		e.kind = kindSingle
		r.do(i, cc.newCall(e, &e.req))
	}
	cc.queue(e)
}

// hashKey returns the key the shard is chosen by: e.req's key, decoded
// into e.raw's spare capacity when it is a b key.
func (e *entry) hashKey() []byte {
	k := e.req.Key()
	if !e.req.Base64 {
		return k
	}
	start := len(e.raw)
	e.raw = append(e.raw, make([]byte, len(k))...)
	dec := e.raw[start:]
	m := protocol.DecodeMetaKey(dec, k)
	return dec[:m:m]
}

// metaUnlink sends, for an ms whose value is too large, the md memcached
// performs instead (it unlinks the key whatever the mode, so no stale value
// is served); e then waits for it and answers e.local.
func (cc *clientConn) metaUnlink(e *entry, req *protocol.Request) {
	key := req.Key()
	e.raw = append(append(append(e.raw[:0], "md "...), key...), " b"...)
	if !req.Base64 {
		e.raw = e.raw[:len(e.raw)-2]
	}
	e.req.Cmd = protocol.CmdMd
	e.req.Line = e.raw
	e.req.Keys = append(e.req.Keys[:0], e.raw[3:3+len(key)])
	e.req.Base64 = req.Base64
	r := cc.s.router.Load()
	if i := r.Locate(e.hashKey()); i >= 0 {
		e.kind = kindSingleOverride
		r.do(i, cc.newCall(e, &e.req))
	}
}

// metaReply is what the client gets from a shard's reply to a meta
// request: the reply without the MN that follows a quiet request.
func metaReply(req *protocol.Request, reply []byte) []byte {
	if req.Quiet {
		return bytes.TrimSuffix(reply, protocol.MNLine)
	}
	return reply
}

package protocol

// This file frames a shard's replies: where the reply to a request ends in
// the bytes read from its connection, so that a pipelined connection's
// reader can match replies to requests in FIFO order.

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrBadReply: the bytes are not a memcached reply (a shard sent garbage).
var ErrBadReply = errors.New("protocol: bad reply from shard")

const (
	// maxReplyLine bounds a reply line: a longer one is a bad reply.
	maxReplyLine = 64 << 10
	// maxDataLen bounds the data block a reply announces (1 GiB), and
	// maxDataDigits the digits of its length.
	maxDataLen    = 1 << 30
	maxDataDigits = 10
)

// Reply lines and prefixes.
var (
	EndLine     = []byte("END\r\n")
	MNLine      = []byte("MN\r\n")
	ValuePrefix = []byte("VALUE ")
	vaPrefix    = []byte("VA ")
)

// ReplyLen returns the length of the complete memcached reply to req at
// the start of buf:
//   - to a retrieval (get, gets, gat, gats): VALUE blocks ended by END, or
//     an error line;
//   - to a meta request: one line, with its data block when it is
//     "VA <n> ...", or, for a quiet request, whatever comes before the
//     "MN" line of the mn sent after it, and that line (see Request.Quiet);
//   - to any other request: one line.
//
// When buf holds only part of it, err is ErrIncomplete and n is the total
// length needed when known (a data block's length is read), else 0. A
// reply that cannot be one is ErrBadReply (wrapped). It is a pure function
// of buf, req.Cmd and req.Quiet.
func ReplyLen(buf []byte, req *Request) (n int, err error) {
	retrieval, meta := req.Cmd.IsRetrieval(), req.Cmd.IsMeta()
	off := 0
	for {
		nl := bytes.IndexByte(buf[off:], '\n')
		if nl < 0 {
			if len(buf)-off > maxReplyLine {
				return 0, fmt.Errorf("%w: line too long", ErrBadReply)
			}
			return 0, ErrIncomplete
		}
		line := buf[off : off+nl+1]
		off += len(line)
		var v int
		var block, ok bool
		switch {
		case retrieval && bytes.HasPrefix(line, ValuePrefix):
			v, ok = ValueLen(line)
			block = true
		case meta && bytes.HasPrefix(line, vaPrefix):
			v, ok = dataLen(line[len(vaPrefix):])
			block = true
		}
		if block {
			if !ok {
				return 0, fmt.Errorf("%w: %q", ErrBadReply, line)
			}
			off += v + 2
			if off > len(buf) {
				return off, ErrIncomplete
			}
			if buf[off-2] != '\r' || buf[off-1] != '\n' {
				return 0, fmt.Errorf("%w: value not ended by CRLF", ErrBadReply)
			}
			if retrieval {
				continue
			}
		}
		if !meta || !req.Quiet || bytes.Equal(line, MNLine) {
			return off, nil
		}
	}
}

// ValueLen returns the <bytes> field of
// "VALUE <key> <flags> <bytes> [<cas>]\r\n".
func ValueLen(line []byte) (int, bool) {
	f := line[len(ValuePrefix):]
	for i := 0; i < 2; i++ {
		j := bytes.IndexByte(f, ' ')
		if j < 0 {
			return 0, false
		}
		f = f[j+1:]
	}
	return dataLen(f)
}

// dataLen reads the data length at the start of f: 1 to maxDataDigits
// decimal digits (what follows them is not looked at), at most maxDataLen.
func dataLen(f []byte) (int, bool) {
	end := 0
	for end < len(f) && f[end] >= '0' && f[end] <= '9' {
		end++
	}
	if end > maxDataDigits {
		return 0, false
	}
	v, ok := ParseUint(f[:end])
	if !ok || v > maxDataLen {
		return 0, false
	}
	return int(v), true
}

// FirstLine returns b's first line (with its '\n'), at most 80 bytes of
// it: a bad reply, for an error message.
func FirstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	}
	return b[:min(len(b), 80)]
}
